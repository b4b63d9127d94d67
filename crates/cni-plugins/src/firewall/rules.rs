//! The firewall nf_tables layout, table `inet cni_firewall` (Go's firewall plugin has no
//! nftables backend, so the names are rcni's):
//!
//! * base chain `forward` (filter, forward, priority filter, policy accept) with the constant
//!   rules `jump isolation_stage1`, `jump cni_forward`, rewritten on every ADD;
//! * base chain `<iptablesAdminChainName>` (default `CNI-ADMIN`; filter, forward, priority
//!   filter - 1, policy accept): the administrator's overrides, evaluated first, created if
//!   missing and never flushed;
//! * per attachment, tagged with its [`AttachmentTag`]: in `cni_forward`, for each address
//!   `ip[6] daddr <ip> ct state established,related accept` and `ip[6] saddr <ip> accept`;
//!   with `ingressPolicy` `same-bridge`/`isolated` (Go's two isolation stages), in
//!   `isolation_stage1` `iifname <br> oifname != <br> jump isolation_stage2` (plus, when
//!   isolated, `iifname <br> oifname <br> drop`) and in `isolation_stage2`
//!   `oifname <br> drop`. Attachments on one bridge each own a copy, so the bridge's
//!   isolation goes away with its last attachment and no rule is ever shared.
//!
//! nf_tables evaluates every base chain: an accept here cannot override a drop policy of
//! another table (for example iptables' FORWARD), unlike the Go plugin's iptables rules.

use ipnet::IpNet;

use cni_nft::{ct_state, priority, Batch, Chain, ChainType, Family, Hook, Policy, Rule};

use super::conf::{FirewallConf, IngressPolicy};
use crate::common::nft_skeleton::Skeleton;
use crate::common::nft_tag::AttachmentTag;

pub const FAMILY: Family = Family::Inet;
pub const TABLE: &str = "cni_firewall";
pub const FORWARD: &str = "forward";
pub const CNI_FORWARD: &str = "cni_forward";
pub const STAGE1: &str = "isolation_stage1";
pub const STAGE2: &str = "isolation_stage2";
/// The chains holding per-attachment rules.
pub const RULE_CHAINS: [&str; 3] = [CNI_FORWARD, STAGE1, STAGE2];

/// The comment on the fixed rules of `forward`.
const MARKER: &str = "rcni firewall v1";

/// True when the table already has this config's constant part (see [`Skeleton`]).
pub fn skeleton_in_place(
    nft: &mut cni_nft::Nft,
    conf: &FirewallConf,
) -> Result<bool, cni_nft::Error> {
    let chains = [
        CNI_FORWARD,
        STAGE1,
        STAGE2,
        FORWARD,
        conf.admin_chain.as_str(),
    ];
    Skeleton {
        family: FAMILY,
        table: TABLE,
        chains: &chains,
        fixed: &[(FORWARD, 2)],
        marker: MARKER,
    }
    .in_place(nft)
}

fn skeleton(b: &mut Batch, conf: &FirewallConf) -> Result<(), cni_nft::Error> {
    b.add_table(FAMILY, TABLE)?;
    for chain in RULE_CHAINS {
        b.add_chain(&Chain::regular(FAMILY, TABLE, chain))?;
    }
    b.add_chain(
        &Chain::base(
            FAMILY,
            TABLE,
            &conf.admin_chain,
            ChainType::Filter,
            Hook::Forward,
            priority::FILTER - 1,
        )
        .with_policy(Policy::Accept),
    )?;
    b.add_chain(
        &Chain::base(
            FAMILY,
            TABLE,
            FORWARD,
            ChainType::Filter,
            Hook::Forward,
            priority::FILTER,
        )
        .with_policy(Policy::Accept),
    )?;
    b.flush_chain(FAMILY, TABLE, FORWARD)?;
    for target in [STAGE1, CNI_FORWARD] {
        b.add_rule(
            &Rule::builder(FAMILY, TABLE, FORWARD)
                .jump(target)
                .comment(MARKER)
                .build()?,
        );
    }
    Ok(())
}

/// The attachment's rules.
pub fn attachment_rules(
    conf: &FirewallConf,
    tag: &AttachmentTag,
    addrs: &[IpNet],
    bridge: Option<&str>,
) -> Result<Vec<Rule>, cni_nft::Error> {
    let comment = tag.comment();
    let mut out = Vec::new();
    for addr in addrs {
        let ip = addr.addr();
        out.push(
            Rule::builder(FAMILY, TABLE, CNI_FORWARD)
                .daddr(ip)
                .ct_state(ct_state::ESTABLISHED | ct_state::RELATED)
                .accept()
                .comment(&comment)
                .build()?,
        );
        out.push(
            Rule::builder(FAMILY, TABLE, CNI_FORWARD)
                .saddr(ip)
                .accept()
                .comment(&comment)
                .build()?,
        );
    }
    if let (Some(br), IngressPolicy::SameBridge | IngressPolicy::Isolated) =
        (bridge, conf.ingress_policy)
    {
        out.push(
            Rule::builder(FAMILY, TABLE, STAGE1)
                .iifname(br)
                .oifname_not(br)
                .jump(STAGE2)
                .comment(&comment)
                .build()?,
        );
        if conf.ingress_policy == IngressPolicy::Isolated {
            out.push(
                Rule::builder(FAMILY, TABLE, STAGE1)
                    .iifname(br)
                    .oifname(br)
                    .drop()
                    .comment(&comment)
                    .build()?,
            );
        }
        out.push(
            Rule::builder(FAMILY, TABLE, STAGE2)
                .oifname(br)
                .drop()
                .comment(&comment)
                .build()?,
        );
    }
    Ok(out)
}

/// The ADD batch: the skeleton when `with_skeleton`, deletion of the attachment's earlier
/// rules, the new rules.
pub fn add_batch(
    conf: &FirewallConf,
    stale: &[cni_nft::RuleInfo],
    rules: &[Rule],
    with_skeleton: bool,
) -> Result<Batch, cni_nft::Error> {
    let mut b = Batch::new();
    if with_skeleton {
        skeleton(&mut b, conf)?;
    }
    for r in stale {
        b.delete_rule(FAMILY, TABLE, &r.chain, r.handle)?;
    }
    for r in rules {
        b.add_rule(r);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(policy: IngressPolicy) -> FirewallConf {
        FirewallConf {
            admin_chain: "CNI-ADMIN".into(),
            ingress_policy: policy,
        }
    }

    #[test]
    fn rules_per_address_and_isolation() {
        let tag = AttachmentTag::new("n", "c", "eth0");
        let addrs: Vec<IpNet> = vec![
            "10.0.0.2/24".parse().unwrap(),
            "fd00::2/64".parse().unwrap(),
        ];
        let r = attachment_rules(&conf(IngressPolicy::Open), &tag, &addrs, Some("br0")).unwrap();
        assert_eq!(r.len(), 4);
        let r =
            attachment_rules(&conf(IngressPolicy::SameBridge), &tag, &addrs, Some("br0")).unwrap();
        assert_eq!(r.len(), 6);
        assert_eq!(r[4].chain(), STAGE1);
        assert_eq!(r[5].chain(), STAGE2);
        let r =
            attachment_rules(&conf(IngressPolicy::Isolated), &tag, &addrs, Some("br0")).unwrap();
        assert_eq!(r.len(), 7);
        let r = attachment_rules(&conf(IngressPolicy::Isolated), &tag, &addrs, None).unwrap();
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn skeleton_is_constant_for_one_admin_chain() {
        let c = conf(IngressPolicy::Open);
        assert_eq!(
            add_batch(&c, &[], &[], true).unwrap(),
            add_batch(&c, &[], &[], true).unwrap()
        );
    }
}
