//! firewall (PL §1.16): forward-accept rules for the container's addresses and
//! `ingressPolicy` bridge isolation, on nf_tables (see [`rules`] for the layout).
//!
//! - `backend` `"iptables"` or `""` (podman, Nomad, minikube configs) are served by the
//!   nftables rules; `"firewalld"` is refused with code 7.
//! - ADD (chained: needs `prevResult`, returned unchanged) replaces the attachment's rules in
//!   one atomic batch. DEL removes them by tag, without `prevResult` or netns. CHECK verifies
//!   they exist. GC removes this network's rules of attachments not in the valid list.

pub mod conf;
pub mod rules;

use ipnet::IpNet;

use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult, SpecVersion};

use crate::common::nft_tag::{
    delete_selected, nft_error, open_host, owned_rules, retry_transient, stale_in_network,
    AttachmentTag,
};
use conf::{FirewallConf, IngressPolicy};

/// The firewall plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Firewall;

fn tag_of(args: &CmdArgs) -> AttachmentTag {
    AttachmentTag::new(&args.conf.name, &args.container_id, &args.ifname)
}

fn prev_result(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result
        .as_ref()
        .ok_or_else(|| CniError::invalid_config("firewall: missing prevResult from earlier plugin"))
}

/// What ADD installs and CHECK expects: the config, the chained result, the attachment's tag
/// and its rules.
fn planned(
    args: &CmdArgs,
) -> Result<(FirewallConf, &CniResult, AttachmentTag, Vec<cni_nft::Rule>), CniError> {
    let conf = FirewallConf::parse(&args.conf)?;
    let prev = prev_result(args)?;
    let tag = tag_of(args);
    let (addrs, bridge) = targets(prev);
    let wanted = rules::attachment_rules(&conf, &tag, &addrs, bridge)
        .map_err(|e| nft_error("firewall: building rules", e))?;
    Ok((conf, prev, tag, wanted))
}

/// Every address of the result and the bridge (Go: the first interface's name).
fn targets(prev: &CniResult) -> (Vec<IpNet>, Option<&str>) {
    let addrs = prev.ips.iter().map(|ip| ip.address).collect();
    let bridge = prev
        .interfaces
        .first()
        .map(|i| i.name.as_str())
        .filter(|n| !n.is_empty());
    (addrs, bridge)
}

impl Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let (conf, prev, tag, wanted) = planned(args)?;
        let mut nft = open_host("firewall")?;
        retry_transient(|| {
            let stale = owned_rules(
                &mut nft,
                rules::FAMILY,
                rules::TABLE,
                &rules::RULE_CHAINS,
                &tag,
            )?;
            let with_skeleton = !rules::skeleton_in_place(&mut nft, &conf)?;
            nft.commit(&rules::add_batch(&conf, &stale, &wanted, with_skeleton)?)
        })
        .map_err(|e| nft_error("firewall: unable to set up rules", e))?;
        Ok(prev.clone())
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let tag = tag_of(args);
        let mut nft = open_host("firewall")?;
        delete_selected(
            &mut nft,
            &[(rules::FAMILY, rules::TABLE)],
            &rules::RULE_CHAINS,
            &|r| tag.owns(r),
        )
        .map(drop)
        .map_err(|e| nft_error("firewall: removing rules", e))
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let (conf, prev, tag, wanted) = planned(args)?;
        let mut nft = open_host("firewall")?;
        for chain in rules::RULE_CHAINS {
            let want = wanted.iter().filter(|r| r.chain() == chain).count();
            let have = nft
                .list_rules(rules::FAMILY, rules::TABLE, chain)
                .map_err(|e| nft_error("firewall: listing rules", e))?
                .iter()
                .filter(|r| tag.owns(r))
                .count();
            if have < want {
                return Err(CniError::internal(format!(
                    "firewall: missing rules for container {} in chain {chain}: found {have} of {want}",
                    args.container_id
                )));
            }
        }
        if conf.ingress_policy != IngressPolicy::Open && targets(prev).1.is_none() {
            log::warn!("firewall: ingressPolicy set but prevResult names no bridge interface");
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let Some(valid) = args.conf.valid_attachments.as_deref() else {
            log::info!("firewall: GC without cni.dev/valid-attachments: nothing removed");
            return Ok(());
        };
        let select = stale_in_network(&args.conf.name, valid);
        let mut nft = open_host("firewall")?;
        delete_selected(
            &mut nft,
            &[(rules::FAMILY, rules::TABLE)],
            &rules::RULE_CHAINS,
            &select,
        )
        .map(drop)
        .map_err(|e| nft_error("firewall: garbage-collecting rules", e))
    }

    /// Like the Go plugin: 0.4.0 and later.
    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .filter(|v| *v >= SpecVersion::V0_4_0)
            .collect()
    }

    fn about(&self) -> String {
        crate::about("firewall")
    }
}
