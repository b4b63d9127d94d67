//! The portmap nf_tables layout, one table per family (`ip cni_hostport`, `ip6 cni_hostport`,
//! the names of the Go plugin's nftables backend):
//!
//! * regular chains `hostip_hostports` (mappings with a specific hostIP) and `hostports`;
//! * base chains `prerouting` and `output` (nat, priority dstnat), with the constant rules
//!   `fib daddr type local jump hostip_hostports` / `... jump hostports`, rewritten (flush +
//!   add in the same batch) on every ADD, so concurrent ADDs always leave one copy;
//! * base chain `masquerading` (nat, postrouting, srcnat).
//!
//! Per attachment, every rule commented with its [`AttachmentId`]:
//! * with `snat`, before each DNAT rule a mark rule (`meta mark set mark | 1<<markMasqBit`)
//!   for hairpin sources: the container's subnet (Go's iptables backend, PR #469) and, for
//!   IPv4, 127.0.0.1; with `masqAll`, every source;
//! * `[conditions] [ip daddr hostIP] <proto> dport <hostPort> dnat to <ip>:<port>`;
//! * with `snat`, in `masquerading`: `meta mark & bit == bit ip daddr <ip> masquerade`.
//!
//! So only connections that went through a port mapping are masqueraded.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use cni_nft::{
    priority, Batch, Chain, ChainType, Expr, Family, Hook, MetaKey, Nft, Reg, Rule, RuleBuilder,
    RuleInfo,
};

use super::conf::{PortMapConf, PortMapping};
use crate::common::nft_skeleton::Skeleton;
use cni_attribution::AttachmentId;

pub use cni_attribution::names::portmap::{
    HOSTIP_HOSTPORTS, HOSTPORTS, MASQUERADING, OUTPUT, PREROUTING, RULE_CHAINS, TABLE,
};
/// Both tables.
pub const TABLES: [(Family, &str); 2] = [(Family::Ip, TABLE), (Family::Ip6, TABLE)];

pub fn family(ipv6: bool) -> Family {
    if ipv6 {
        Family::Ip6
    } else {
        Family::Ip
    }
}

/// The constant part of family `f`'s table; see [`Skeleton`].
pub fn skeleton_spec(f: Family) -> Skeleton<'static> {
    Skeleton {
        family: f,
        table: TABLE,
        chains: &[
            HOSTPORTS,
            HOSTIP_HOSTPORTS,
            PREROUTING,
            OUTPUT,
            MASQUERADING,
        ],
        fixed: &[(PREROUTING, 2), (OUTPUT, 2)],
        marker: "rcni portmap v1",
    }
}

/// The table, the chains, and the constant jump rules of the base chains.
fn skeleton(b: &mut Batch, f: Family) -> Result<(), cni_nft::Error> {
    b.add_table(f, TABLE)?;
    b.add_chain(&Chain::regular(f, TABLE, HOSTPORTS))?;
    b.add_chain(&Chain::regular(f, TABLE, HOSTIP_HOSTPORTS))?;
    for (name, hook) in [(PREROUTING, Hook::Prerouting), (OUTPUT, Hook::Output)] {
        b.add_chain(&Chain::base(
            f,
            TABLE,
            name,
            ChainType::Nat,
            hook,
            priority::DSTNAT,
        ))?;
        b.flush_chain(f, TABLE, name)?;
        for target in [HOSTIP_HOSTPORTS, HOSTPORTS] {
            b.add_rule(
                &Rule::builder(f, TABLE, name)
                    .fib_daddr_local()
                    .jump(target)
                    .comment(skeleton_spec(f).marker)
                    .build()?,
            );
        }
    }
    b.add_chain(&Chain::base(
        f,
        TABLE,
        MASQUERADING,
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))?;
    Ok(())
}

/// `meta mark set meta mark | bit` (keeps the other bits, which may belong to others).
fn or_mark(b: RuleBuilder, bit: u32) -> RuleBuilder {
    b.expr(Expr::Meta {
        dreg: Reg::R1,
        key: MetaKey::Mark,
    })
    .expr(Expr::Bitwise {
        sreg: Reg::R1,
        dreg: Reg::R1,
        mask: (!bit).to_ne_bytes().to_vec(),
        xor: bit.to_ne_bytes().to_vec(),
    })
    .expr(Expr::MetaSet {
        sreg: Reg::R1,
        key: MetaKey::Mark,
    })
}

/// What one attachment needs in one family: its identity (`tag`) with its mappings.
pub struct MappedAttachment<'a> {
    pub conf: &'a PortMapConf,
    pub tag: &'a AttachmentId,
    /// The container address with its prefix (the prefix gives the hairpin subnet).
    pub addr: IpNet,
    pub mappings: &'a [PortMapping],
}

impl MappedAttachment<'_> {
    fn ipv6(&self) -> bool {
        self.addr.addr().is_ipv6()
    }

    fn mappings(&self) -> impl Iterator<Item = &PortMapping> {
        let v6 = self.ipv6();
        self.mappings.iter().filter(move |m| m.applies_to(v6))
    }

    /// The matches selecting one mapping's packets, in the chain they go to.
    fn mapping_match(&self, m: &PortMapping) -> (&'static str, RuleBuilder) {
        let f = family(self.ipv6());
        let chain = if m.host_ip.is_some() {
            HOSTIP_HOSTPORTS
        } else {
            HOSTPORTS
        };
        let mut b = self
            .conf
            .conditions(self.ipv6())
            .apply(Rule::builder(f, TABLE, chain));
        if let Some(ip) = m.host_ip {
            b = b.daddr(ip);
        }
        (chain, b.dport(m.protocol, m.host_port))
    }

    /// Hairpin sources whose connections are marked for masquerading (`None`: any).
    fn hairpin_sources(&self) -> Vec<Option<IpNet>> {
        if self.conf.masq_all {
            return vec![None];
        }
        let mut out = vec![Some(self.addr.trunc())];
        if !self.ipv6() {
            out.push(Some(IpNet::from(IpAddr::V4(Ipv4Addr::LOCALHOST))));
        }
        out
    }

    /// The rules, in order.
    pub fn rules(&self) -> Result<Vec<Rule>, cni_nft::Error> {
        let comment = self.tag.comment();
        let bit = 1u32 << self.conf.mark_bit;
        let mut out = Vec::new();
        for m in self.mappings() {
            if self.conf.snat {
                for src in self.hairpin_sources() {
                    let (_, mut b) = self.mapping_match(m);
                    if let Some(src) = src {
                        b = b.saddr(src);
                    }
                    out.push(or_mark(b, bit).comment(&comment).build()?);
                }
            }
            let (_, b) = self.mapping_match(m);
            out.push(
                b.dnat(self.addr.addr(), Some(m.container_port))
                    .comment(&comment)
                    .build()?,
            );
        }
        if self.conf.snat && self.mappings().next().is_some() {
            out.push(
                Rule::builder(family(self.ipv6()), TABLE, MASQUERADING)
                    .mark(bit, bit)
                    .daddr(self.addr.addr())
                    .masquerade()
                    .comment(&comment)
                    .build()?,
            );
        }
        Ok(out)
    }

    /// How many rules CHECK expects per chain: (DNAT-chain rules, masquerading rules).
    pub fn expected_counts(&self) -> (usize, usize) {
        let n = self.mappings().count();
        if n == 0 {
            return (0, 0);
        }
        let marks = if self.conf.snat {
            self.hairpin_sources().len()
        } else {
            0
        };
        (n * (1 + marks), usize::from(self.conf.snat))
    }
}

/// The ADD batch of one family: the skeleton when `with_skeleton`, removal of the attachment's
/// earlier rules (`stale`, listed by the caller), then the new rules.
pub fn add_batch(
    att: &MappedAttachment<'_>,
    stale: &[RuleInfo],
    with_skeleton: bool,
) -> Result<Batch, cni_nft::Error> {
    let f = family(att.ipv6());
    let mut b = Batch::new();
    if with_skeleton {
        skeleton(&mut b, f)?;
    }
    for r in stale {
        b.delete_rule(f, TABLE, &r.chain, r.handle)?;
    }
    for rule in att.rules()? {
        b.add_rule(&rule);
    }
    Ok(b)
}

/// The attachment's rules currently in the per-attachment chains of family `f`.
pub fn owned_rules(
    nft: &mut Nft,
    f: Family,
    tag: &AttachmentId,
) -> Result<Vec<RuleInfo>, cni_nft::Error> {
    crate::common::nft_tag::owned_rules(nft, f, TABLE, &RULE_CHAINS, tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portmap::conf::test_support::{conf, mapping};

    #[test]
    fn ipv4_with_snat_marks_subnet_and_localhost() {
        let c = conf(true, false);
        let tag = AttachmentId::new("n", "c", "eth0");
        let maps = [
            mapping(8080, None),
            mapping(8080, Some("198.18.145.1")),
            mapping(8080, Some("fd00::1")),
        ];
        let att = MappedAttachment {
            conf: &c,
            tag: &tag,
            addr: "198.19.128.5/20".parse().unwrap(),
            mappings: &maps,
        };
        let rules = att.rules().unwrap();
        // 2 applicable mappings * (2 marks + dnat) + 1 masquerade
        assert_eq!(rules.len(), 7);
        assert_eq!(att.expected_counts(), (6, 1));
        assert_eq!(rules[0].chain(), HOSTPORTS);
        assert_eq!(rules[3].chain(), HOSTIP_HOSTPORTS);
        assert_eq!(rules[6].chain(), MASQUERADING);
        assert!(rules
            .iter()
            .all(|r| r.comment() == Some(tag.comment().as_str())));
    }

    #[test]
    fn ipv6_without_snat_only_dnats() {
        let c = conf(false, false);
        let tag = AttachmentId::new("n", "c", "eth0");
        let maps = [mapping(8080, None), mapping(8080, Some("198.18.145.1"))];
        let att = MappedAttachment {
            conf: &c,
            tag: &tag,
            addr: "fd00::5/64".parse().unwrap(),
            mappings: &maps,
        };
        assert_eq!(att.rules().unwrap().len(), 1);
        assert_eq!(att.expected_counts(), (1, 0));
        let c = conf(true, true);
        let att = MappedAttachment { conf: &c, ..att };
        assert_eq!(att.rules().unwrap().len(), 3);
    }

    #[test]
    fn skeleton_is_constant() {
        let mut a = Batch::new();
        skeleton(&mut a, Family::Ip).unwrap();
        let mut b = Batch::new();
        skeleton(&mut b, Family::Ip).unwrap();
        assert_eq!(a, b);
    }
}
