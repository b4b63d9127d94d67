//! The Go firewall plugin's iptables layout, written over netlink into the `ip filter` and
//! `ip6 filter` tables that iptables-nft manages, so that the `filter FORWARD` chain (policy
//! DROP on Docker and hardened hosts) accepts the pod's traffic and `iptables-nft -S` shows it:
//!
//! ```text
//! -A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! -A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//! -A CNI-FORWARD -d <ip>/32 -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "<tag>" -j ACCEPT
//! -A CNI-FORWARD -s <ip>/32 -m comment --comment "<tag>" -j ACCEPT
//! -A CNI-FORWARD -d <ip>/32 -m conntrack --ctstate DNAT -m comment --comment "<tag>" -j ACCEPT
//! ```
//!
//! The third rule is rcni's own: it accepts connections a port mapping (portmap) DNATed to
//! the pod, so a host port works on a FORWARD DROP host; Go's layout has no such rule and its
//! host ports stay blocked there. Only connections the host chose to forward to the pod match.
//!
//! * The two jumps are inserted at the top of their chain when no rule jumps there yet (Go's
//!   own jumps count, whoever wrote them), and never removed, like Go. Chains are created if
//!   missing; an existing `FORWARD` chain is never redeclared, so its policy is untouched.
//! * The per-address rules carry the attachment's [`AttachmentId`] as their comment (userdata,
//!   which iptables-nft shows as `-m comment`), so DEL and GC remove exactly this attachment's
//!   rules and never Go's or an administrator's. Go's own per-address rules have no comment.
//! * Encoding: native payload/cmp, the conntrack state as iptables-nft's `conntrack` x_tables
//!   match (iptables-nft 1.8 refuses a table with a native `ct state`), counters like
//!   iptables-nft.

use ipnet::IpNet;

use cni_nft::{ct_state, xt, Batch, Chain, Family, Nft, Rule};

use super::conf::FirewallConf;
use cni_attribution::AttachmentId;

pub use cni_attribution::names::firewall_iptables::{CNI_FORWARD, FORWARD, RULE_CHAINS, TABLE};
/// Both families' tables, for DEL and GC.
pub const TABLES: [(Family, &str); 2] = [(Family::Ip, TABLE), (Family::Ip6, TABLE)];

/// `XT_CONNTRACK_STATE_DNAT` (`1 << (IP_CT_NUMBER + 2)`): the connection's destination was
/// translated. x_tables only; nf_tables' `ct state` has no such bit.
const XT_CTSTATE_DNAT: u32 = 1 << 7;

/// Go's comments on the two jumps.
const FORWARD_JUMP_COMMENT: &str = "CNI firewall plugin rules";
const ADMIN_JUMP_COMMENT: &str = "CNI firewall plugin admin overrides";

/// The families of `addrs`, IPv4 first, each once.
pub fn families(addrs: &[IpNet]) -> Vec<Family> {
    [Family::Ip, Family::Ip6]
        .into_iter()
        .filter(|f| addrs.iter().any(|a| Family::of(a.addr()) == *f))
        .collect()
}

/// What of the constant layout one family's table already has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Present {
    pub forward_chain: bool,
    pub forward_jump: bool,
    pub admin_jump: bool,
}

impl Present {
    pub fn complete(&self) -> bool {
        self.forward_chain && self.forward_jump && self.admin_jump
    }
}

/// Reads what of the layout exists in `family filter` (read-only).
pub fn survey(
    nft: &mut Nft,
    family: Family,
    conf: &FirewallConf,
) -> Result<Present, cni_nft::Error> {
    let jumps_to = |nft: &mut Nft, chain: &str, target: &str| -> Result<bool, cni_nft::Error> {
        Ok(nft
            .list_rule_jumps(family, TABLE, chain)?
            .iter()
            .any(|(_, jump)| jump.as_deref() == Some(target)))
    };
    Ok(Present {
        forward_chain: nft.chain_exists(family, TABLE, FORWARD)?,
        forward_jump: jumps_to(nft, FORWARD, CNI_FORWARD)?,
        admin_jump: jumps_to(nft, CNI_FORWARD, &conf.admin_chain)?,
    })
}

/// Adds to `b` what `present` lacks of `family`'s constant layout.
pub fn skeleton(
    b: &mut Batch,
    family: Family,
    conf: &FirewallConf,
    present: Present,
) -> Result<(), cni_nft::Error> {
    if present.complete() {
        return Ok(());
    }
    b.add_table(family, TABLE)?;
    if !present.forward_chain {
        // As iptables-nft creates it; only when missing, so a DROP policy stays.
        b.add_chain(&super::forward_base_chain(family, TABLE, FORWARD))?;
    }
    b.add_chain(&Chain::regular(family, TABLE, CNI_FORWARD))?;
    b.add_chain(&Chain::regular(family, TABLE, &conf.admin_chain))?;
    if !present.forward_jump {
        b.insert_rule(&jump(family, FORWARD, CNI_FORWARD, FORWARD_JUMP_COMMENT)?);
    }
    if !present.admin_jump {
        b.insert_rule(&jump(
            family,
            CNI_FORWARD,
            &conf.admin_chain,
            ADMIN_JUMP_COMMENT,
        )?);
    }
    Ok(())
}

/// Adds to `b` the deletion of duplicate jumps that concurrent first ADDs inserted (each saw
/// none): of the rules jumping `FORWARD -> CNI-FORWARD` and `CNI-FORWARD -> admin`, the one
/// with the lowest handle stays, so concurrent callers agree; only rcni's (by comment) go.
pub fn duplicate_jumps(
    nft: &mut Nft,
    b: &mut Batch,
    family: Family,
    conf: &FirewallConf,
) -> Result<(), cni_nft::Error> {
    for (chain, target, comment) in [
        (FORWARD, CNI_FORWARD, FORWARD_JUMP_COMMENT),
        (CNI_FORWARD, conf.admin_chain.as_str(), ADMIN_JUMP_COMMENT),
    ] {
        let mut jumps: Vec<_> = nft
            .list_rule_jumps(family, TABLE, chain)?
            .into_iter()
            .filter(|(_, jump)| jump.as_deref() == Some(target))
            .map(|(info, _)| info)
            .collect();
        jumps.sort_by_key(|r| r.handle);
        for extra in jumps.iter().skip(1) {
            if extra.comment.as_deref() == Some(comment) {
                b.delete_rule(family, TABLE, chain, extra.handle)?;
            }
        }
    }
    Ok(())
}

fn jump(family: Family, chain: &str, target: &str, comment: &str) -> Result<Rule, cni_nft::Error> {
    Rule::builder(family, TABLE, chain)
        .counter()
        .jump(target)
        .comment(comment)
        .build()
}

/// The attachment's three rules per address, in `CNI-FORWARD` of the address's family.
pub fn attachment_rules(tag: &AttachmentId, addrs: &[IpNet]) -> Result<Vec<Rule>, cni_nft::Error> {
    let comment = tag.comment();
    let mut out = Vec::new();
    for addr in addrs {
        let ip = addr.addr();
        let family = Family::of(ip);
        out.push(
            Rule::builder(family, TABLE, CNI_FORWARD)
                .daddr(ip)
                .expr(xt::conntrack_state(
                    ct_state::RELATED | ct_state::ESTABLISHED,
                ))
                .counter()
                .accept()
                .comment(&comment)
                .build()?,
        );
        out.push(
            Rule::builder(family, TABLE, CNI_FORWARD)
                .saddr(ip)
                .counter()
                .accept()
                .comment(&comment)
                .build()?,
        );
        out.push(
            Rule::builder(family, TABLE, CNI_FORWARD)
                .daddr(ip)
                .expr(xt::conntrack_state(XT_CTSTATE_DNAT))
                .counter()
                .accept()
                .comment(&comment)
                .build()?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf() -> FirewallConf {
        FirewallConf {
            admin_chain: "CNI-ADMIN".into(),
            ingress_policy: super::super::conf::IngressPolicy::Open,
        }
    }

    #[test]
    fn three_rules_per_address_in_its_family() {
        let tag = AttachmentId::new("n", "c", "eth0");
        let addrs: Vec<IpNet> = vec![
            "198.18.0.2/24".parse().unwrap(),
            "2001:2::2/64".parse().unwrap(),
        ];
        let r = attachment_rules(&tag, &addrs).unwrap();
        let fams: Vec<Family> = r.iter().map(Rule::family).collect();
        assert_eq!(
            fams,
            [
                Family::Ip,
                Family::Ip,
                Family::Ip,
                Family::Ip6,
                Family::Ip6,
                Family::Ip6
            ]
        );
        assert!(r
            .iter()
            .all(|r| r.chain() == CNI_FORWARD && r.comment() == Some(&*tag.comment())));
        assert_eq!(families(&addrs), [Family::Ip, Family::Ip6]);
        assert_eq!(families(&addrs[1..]), [Family::Ip6]);
    }

    #[test]
    fn complete_layout_writes_nothing_and_existing_forward_is_not_redeclared() {
        let c = conf();
        let mut b = Batch::new();
        let all = Present {
            forward_chain: true,
            forward_jump: true,
            admin_jump: true,
        };
        skeleton(&mut b, Family::Ip, &c, all).unwrap();
        assert!(b.is_empty());
        let mut with_forward = Batch::new();
        skeleton(
            &mut with_forward,
            Family::Ip,
            &c,
            Present {
                forward_chain: true,
                ..Present::default()
            },
        )
        .unwrap();
        let mut without = Batch::new();
        skeleton(&mut without, Family::Ip, &c, Present::default()).unwrap();
        // table, 2 regular chains, 2 jumps; plus the FORWARD chain only when it is missing.
        assert_eq!(with_forward.len(), 5);
        assert_eq!(without.len(), 6);
    }
}
