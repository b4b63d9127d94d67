//! `ingressPolicy` bridge isolation (Go's two isolation stages), in rcni's own table
//! `inet cni_firewall`: isolation only drops, and a drop in any nf_tables table is final,
//! so it needs no place in iptables' chains.
//!
//! * base chain `forward` (filter, forward, priority filter, policy accept) with the constant
//!   rule `jump isolation_stage1`, written when missing or not as expected;
//! * per attachment, tagged with its [`AttachmentId`]: in `isolation_stage1`
//!   `iifname <br> oifname != <br> jump isolation_stage2` (plus, when isolated,
//!   `iifname <br> oifname <br> drop`) and in `isolation_stage2` `oifname <br> drop`.
//!   Attachments on one bridge each own a copy, so the bridge's isolation goes away with its
//!   last attachment and no rule is ever shared.
//!
//! The table is created only for an attachment with isolation rules. Earlier rcni versions also kept
//! the forward accepts in chain `cni_forward` here; DEL and GC still clean that chain.

use cni_nft::{Batch, Chain, Family, Rule};

use super::conf::{FirewallConf, IngressPolicy};
use crate::common::nft_skeleton::Skeleton;
use cni_attribution::AttachmentId;

pub const FAMILY: Family = Family::Inet;
pub use cni_attribution::names::firewall_isolation::{
    CLEANED_CHAINS, FORWARD, RULE_CHAINS, STAGE1, STAGE2, TABLE,
};

/// The comment on the fixed rule of `forward`.
const MARKER: &str = "rcni firewall v2";

/// True when the table already has its constant part (see [`Skeleton`]).
pub fn skeleton_in_place(nft: &mut cni_nft::Nft) -> Result<bool, cni_nft::Error> {
    Skeleton {
        family: FAMILY,
        table: TABLE,
        chains: &[STAGE1, STAGE2, FORWARD],
        fixed: &[(FORWARD, 1)],
        marker: MARKER,
    }
    .in_place(nft)
}

/// Adds the table's constant part to `b`.
pub fn skeleton(b: &mut Batch) -> Result<(), cni_nft::Error> {
    b.add_table(FAMILY, TABLE)?;
    for chain in RULE_CHAINS {
        b.add_chain(&Chain::regular(FAMILY, TABLE, chain))?;
    }
    b.add_chain(&super::forward_base_chain(FAMILY, TABLE, FORWARD))?;
    b.flush_chain(FAMILY, TABLE, FORWARD)?;
    b.add_rule(
        &Rule::builder(FAMILY, TABLE, FORWARD)
            .jump(STAGE1)
            .comment(MARKER)
            .build()?,
    );
    Ok(())
}

/// The attachment's isolation rules (none for `open` or without a bridge).
pub fn attachment_rules(
    conf: &FirewallConf,
    tag: &AttachmentId,
    bridge: Option<&str>,
) -> Result<Vec<Rule>, cni_nft::Error> {
    let (Some(br), IngressPolicy::SameBridge | IngressPolicy::Isolated) =
        (bridge, conf.ingress_policy)
    else {
        return Ok(Vec::new());
    };
    let comment = tag.comment();
    let mut out = vec![Rule::builder(FAMILY, TABLE, STAGE1)
        .iifname(br)
        .oifname_not(br)
        .jump(STAGE2)
        .comment(&comment)
        .build()?];
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
    Ok(out)
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
    fn isolation_rules_per_policy() {
        let tag = AttachmentId::new("n", "c", "eth0");
        let n = |p, br| attachment_rules(&conf(p), &tag, br).unwrap();
        assert!(n(IngressPolicy::Open, Some("br0")).is_empty());
        let r = n(IngressPolicy::SameBridge, Some("br0"));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].chain(), r[1].chain()), (STAGE1, STAGE2));
        assert_eq!(n(IngressPolicy::Isolated, Some("br0")).len(), 3);
        assert!(n(IngressPolicy::Isolated, None).is_empty());
    }

    #[test]
    fn skeleton_is_constant() {
        let (mut a, mut b) = (Batch::new(), Batch::new());
        skeleton(&mut a).unwrap();
        skeleton(&mut b).unwrap();
        assert_eq!(a, b);
    }
}
