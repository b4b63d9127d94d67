//! firewall (Go: containernetworking/plugins `plugins/meta/firewall/`): forward-accept rules for
//! the container's addresses in the Go plugin's iptables layout, and `ingressPolicy` bridge
//! isolation.
//!
//! - [`iptables`]: `backend` `"iptables"` or `""` (podman, Nomad, minikube configs). The accept
//!   rules go where iptables' `filter FORWARD` chain sees them, in the `ip`/`ip6 filter` tables
//!   iptables-nft manages (`CNI-FORWARD`, the admin chain), over netlink: in nf_tables an
//!   accept in another table cannot override that chain's DROP policy (Docker and hardened
//!   hosts). `iptables-nft -S` shows them; admin rules in `CNI-ADMIN` apply.
//! - [`isolation`]: the isolation drops, in rcni's `inet cni_firewall` table.
//! - ADD (chained: needs `prevResult`, returned unchanged) replaces the attachment's rules in
//!   one atomic batch. DEL removes them by tag, without `prevResult` or netns. CHECK verifies
//!   they and the jumps to them exist. GC removes this network's rules of attachments not in
//!   the valid list.
//!
//! Differences from the Go plugin:
//! - `"firewalld"` is refused with code 7 (Go: D-Bus calls), and `""` never means firewalld.
//!   `firewalldZone` is answered with one warning line on stderr.
//! - A third accept per address takes connections DNATed to the pod (host ports through
//!   portmap), which Go's layout leaves to the FORWARD policy (blocked on DROP hosts).
//! - The per-address rules carry the attachment's tag as comment; Go's have none and are
//!   deleted by address, so two attachments with one address cannot remove each other's.
//! - On a host whose namespace has an iptables-legacy `filter` table, ADD fails: rules written
//!   with nf_tables cannot override x_tables' FORWARD (Go would write legacy rules with the
//!   legacy binary). DEL, CHECK and GC still work.
//! - Isolation lives in `inet cni_firewall` instead of `CNI-ISOLATION-STAGE-1/2` of `filter`,
//!   and goes away with the bridge's last attachment (Go never removes it).

pub mod conf;
pub mod iptables;
pub mod isolation;

use ipnet::IpNet;

use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Policy, Rule, RuleInfo};
use cni_plugin::repair::REPAIR_HINT;
use cni_plugin::{CmdArgs, Plugin, RepairAnswer, RepairMode};
use cni_types::{CniError, CniResult, SpecVersion};

use crate::common::nft_tag::{
    delete_selected, nft_error, open_host, owned_rules, owns_rule, retry_transient,
    stale_in_network,
};
use cni_attribution::AttachmentId;
use conf::{FirewallConf, IngressPolicy};

/// The firewall plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Firewall;

fn tag_of(args: &CmdArgs) -> AttachmentId {
    args.id()
}

fn prev_result(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result
        .as_ref()
        .ok_or_else(|| CniError::invalid_config("firewall: missing prevResult from earlier plugin"))
}

/// What ADD installs and CHECK expects.
struct Plan<'a> {
    conf: FirewallConf,
    prev: &'a CniResult,
    tag: AttachmentId,
    families: Vec<Family>,
    accepts: Vec<Rule>,
    isolation: Vec<Rule>,
}

fn planned(args: &CmdArgs) -> Result<Plan<'_>, CniError> {
    let conf = FirewallConf::parse(&args.conf)?;
    let prev = prev_result(args)?;
    let tag = tag_of(args);
    let (addrs, bridge) = targets(prev);
    let build = |e| nft_error("firewall: building rules", e);
    let accepts = iptables::attachment_rules(&tag, &addrs).map_err(build)?;
    let isolation = isolation::attachment_rules(&conf, &tag, bridge).map_err(build)?;
    Ok(Plan {
        families: iptables::families(&addrs),
        conf,
        prev,
        tag,
        accepts,
        isolation,
    })
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

/// A filter base chain on the forward hook at the filter priority with policy accept, as
/// iptables-nft declares `FORWARD` and as rcni declares its isolation chain.
fn forward_base_chain(family: Family, table: &str, name: &str) -> Chain {
    Chain::base(
        family,
        table,
        name,
        ChainType::Filter,
        Hook::Forward,
        priority::FILTER,
    )
    .with_policy(Policy::Accept)
}

/// Fails when a family in use has an iptables-legacy `filter` table in this namespace.
fn refuse_legacy(families: &[Family]) -> Result<(), CniError> {
    for family in families {
        let present = cni_nft::legacy::legacy_filter_present(*family)
            .map_err(|e| nft_error("firewall: looking for iptables-legacy tables", e))?;
        if present {
            return Err(CniError::internal(format!(
                "firewall: this host uses iptables-legacy: {} lists a legacy (x_tables) filter \
                 table, whose FORWARD chain rcni cannot write and whose drops no nf_tables rule \
                 can override; switch the host to iptables-nft (update-alternatives --set \
                 iptables /usr/sbin/iptables-nft, then restart the services that wrote legacy \
                 rules, or reboot)",
                cni_nft::legacy::names_file(*family).unwrap_or("x_tables")
            )));
        }
    }
    Ok(())
}

/// Every table and chain that can hold an attachment's rules, current layout and earlier.
fn cleaned(nft: &mut Nft, select: &dyn Fn(&RuleInfo) -> bool) -> Result<usize, cni_nft::Error> {
    Ok(
        delete_selected(nft, &iptables::TABLES, &iptables::RULE_CHAINS, select)?
            + delete_selected(
                nft,
                &[(isolation::FAMILY, isolation::TABLE)],
                &isolation::CLEANED_CHAINS,
                select,
            )?,
    )
}

/// The ADD transaction, from a fresh look at the kernel.
fn add_batch(nft: &mut Nft, plan: &Plan<'_>) -> Result<Batch, cni_nft::Error> {
    let mut b = Batch::new();
    for family in &plan.families {
        let present = iptables::survey(nft, *family, &plan.conf)?;
        iptables::skeleton(&mut b, *family, &plan.conf, present)?;
    }
    for (family, table) in iptables::TABLES {
        for r in owned_rules(nft, family, table, &iptables::RULE_CHAINS, &plan.tag)? {
            b.delete_rule(family, table, &r.chain, r.handle)?;
        }
    }
    if !plan.isolation.is_empty() && !isolation::skeleton_in_place(nft)? {
        isolation::skeleton(&mut b)?;
    }
    let (f, t) = (isolation::FAMILY, isolation::TABLE);
    for r in owned_rules(nft, f, t, &isolation::CLEANED_CHAINS, &plan.tag)? {
        b.delete_rule(f, t, &r.chain, r.handle)?;
    }
    for r in plan.accepts.iter().chain(&plan.isolation) {
        b.add_rule(r);
    }
    Ok(b)
}

/// CHECK's comparison of what exists with `plan`.
fn verify(nft: &mut Nft, plan: &Plan<'_>, cid: &str) -> Result<(), CniError> {
    let listing = |e| nft_error("firewall: listing rules", e);
    for family in &plan.families {
        let present = iptables::survey(nft, *family, &plan.conf).map_err(listing)?;
        if !present.complete() {
            return Err(CniError::internal(format!(
                "firewall: {family} filter lacks the jump FORWARD -> {} -> {}; {REPAIR_HINT}",
                iptables::CNI_FORWARD,
                plan.conf.admin_chain
            )));
        }
    }
    let chains = iptables::TABLES
        .iter()
        .map(|(f, t)| (*f, *t, iptables::CNI_FORWARD))
        .chain(isolation::RULE_CHAINS.map(|c| (isolation::FAMILY, isolation::TABLE, c)));
    for (family, table, chain) in chains {
        let want = plan
            .accepts
            .iter()
            .chain(&plan.isolation)
            .filter(|r| r.family() == family && r.table() == table && r.chain() == chain)
            .count();
        let have = owned_rules(nft, family, table, &[chain], &plan.tag)
            .map_err(listing)?
            .len();
        if have < want {
            return Err(CniError::internal(format!(
                "firewall: missing rules for container {cid} in {family} {table} {chain}: found {have} of {want}; {REPAIR_HINT}"
            )));
        }
    }
    Ok(())
}

/// ADD's kernel work: the attachment's rules in one batch, then duplicate jumps removed.
fn apply(plan: &Plan<'_>) -> Result<(), CniError> {
    refuse_legacy(&plan.families)?;
    let mut nft = open_host("firewall")?;
    retry_transient(|| {
        let batch = add_batch(&mut nft, plan)?;
        nft.commit(&batch)
    })
    .map_err(|e| nft_error("firewall: unable to set up rules", e))?;
    retry_transient(|| {
        let mut b = Batch::new();
        for family in &plan.families {
            iptables::duplicate_jumps(&mut nft, &mut b, *family, &plan.conf)?;
        }
        if b.is_empty() {
            return Ok(());
        }
        nft.commit(&b)
    })
    .map_err(|e| nft_error("firewall: removing duplicate jumps", e))
}

impl Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let plan = planned(args)?;
        apply(&plan)?;
        Ok(plan.prev.clone())
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The config is decoded like ADD's, so every command refuses the same configs.
        FirewallConf::parse(&args.conf)?;
        let tag = tag_of(args);
        let mut nft = open_host("firewall")?;
        cleaned(&mut nft, &|r| owns_rule(&tag, r))
            .map(drop)
            .map_err(|e| nft_error("firewall: removing rules", e))
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let plan = planned(args)?;
        let mut nft = open_host("firewall")?;
        verify(&mut nft, &plan, &args.container_id)?;
        if plan.conf.ingress_policy != IngressPolicy::Open && targets(plan.prev).1.is_none() {
            log::warn!("firewall: ingressPolicy set but prevResult names no bridge interface");
        }
        Ok(())
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let select = stale_in_network(&args.conf.name, args.valid_attachments());
        let mut nft = open_host("firewall")?;
        cleaned(&mut nft, &select)
            .map(drop)
            .map_err(|e| nft_error("firewall: garbage-collecting rules", e))
    }

    /// Puts back the attachment's rules when CHECK finds any missing, through ADD's own
    /// [`apply`] (which replaces them, so nothing is doubled).
    fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
        let plan = planned(args)?;
        let mut nft = open_host("firewall")?;
        let Err(missing) = verify(&mut nft, &plan, &args.container_id) else {
            return Ok(RepairAnswer::Restored(Vec::new()));
        };
        if mode == RepairMode::Repair {
            apply(&plan)?;
        }
        let what = missing.msg.replace(&format!("; {REPAIR_HINT}"), "");
        Ok(RepairAnswer::Restored(vec![what]))
    }

    /// Like the Go plugin: 0.4.0 and later.
    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .filter(|v| *v >= SpecVersion::V0_4_0)
            .collect()
    }
}
