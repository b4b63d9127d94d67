//! Repair: putting back the nf_tables objects and rules an attachment's ADD made, after
//! something else on the host removed them (`nft flush ruleset`, `iptables -F`, a firewalld
//! reload). The operation is plugin-level: each rcni plugin that owns rules compares the
//! kernel with what its CHECK expects and, for whatever is missing, runs the rule-installing
//! part of its own ADD with the cached `prevResult`, the same functions ADD calls. Links,
//! addresses, routes, leases and sysctls are never touched, and a part found complete is
//! left alone, so repeating a repair changes nothing.
//!
//! The runtime (`cni_runtime::repair`) decides which attachments and which plugins of their
//! chains are repaired (rcni's own, not Go plugins) and calls [`repair`] in the host
//! namespace with the request config each plugin got at ADD.

use ipnet::IpNet;

use cni_plugin::{CmdArgs, Command};
use cni_runtime::repair::AttachmentRepair;
use cni_runtime::{Attachment, Runtime};
use cni_types::{CniError, CniResult};

use crate::bridge::conf::BridgeConf;
use crate::common::{masquerade, spoofcheck};
use crate::firewall::Firewall;
use crate::portmap::Portmap;
use crate::ptp::PtpConf;

/// Repairs every cached attachment of `rt`'s cache (or of `network`): the one entry point of
/// `rcni repair` and of rcni-node's automatic repair.
pub fn repair_cached(rt: &Runtime, network: Option<&str>) -> Vec<AttachmentRepair> {
    rt.repair(network, &owns_rules, &|kind, stdin, att| {
        in_process(kind, stdin, att, Mode::Repair)
    })
}

/// What is missing for every cached attachment, changing nothing (`rcni doctor`).
pub fn missing_cached(rt: &Runtime) -> Vec<AttachmentRepair> {
    rt.repair(None, &owns_rules, &|kind, stdin, att| {
        in_process(kind, stdin, att, Mode::Look)
    })
}

/// [`repair`] of one plugin for the runtime: `stdin` is the request config it got at ADD.
fn in_process(
    plugin_type: &str,
    stdin: &[u8],
    att: &Attachment,
    mode: Mode,
) -> Result<Option<Vec<String>>, CniError> {
    let mut args = CmdArgs::new(Command::Check, stdin)?;
    args.container_id.clone_from(&att.container_id);
    args.netns.clone_from(&att.netns);
    args.ifname.clone_from(&att.ifname);
    args.args = att.args_env();
    repair(plugin_type, &args, mode)
}

/// Whether a repair puts back what is missing or only says what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Look,
    Repair,
}

/// Appended to CHECK errors about missing rules: the command that puts them back.
pub const REPAIR_HINT: &str = "`rcni repair` puts the attachment's rules back";

/// Repairs the rules `plugin_type` owns for the attachment of `args` (a CHECK-like request:
/// config, `prevResult`, container ID, ifname, CNI_ARGS). `None`: this plugin owns no
/// nf_tables rules. `Some(list)`: what was missing and, with [`Mode::Repair`], is now
/// restored (empty: nothing was).
pub fn repair(
    plugin_type: &str,
    args: &CmdArgs,
    mode: Mode,
) -> Result<Option<Vec<String>>, CniError> {
    let fix = mode == Mode::Repair;
    Ok(Some(match plugin_type {
        "portmap" => Portmap.repair(args, fix)?,
        "firewall" => Firewall.repair(args, fix)?,
        "bridge" => bridge(args, fix)?,
        "ptp" => {
            let conf = PtpConf::parse(&args.conf)?;
            masq(args, conf.ip_masq, fix)?.into_iter().collect()
        }
        _ => return Ok(None),
    }))
}

/// What `plugin_type` can repair, for reports naming the plugins that were not asked.
pub fn owns_rules(plugin_type: &str) -> bool {
    matches!(plugin_type, "portmap" | "firewall" | "bridge" | "ptp")
}

fn prev(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result
        .as_ref()
        .ok_or_else(|| CniError::invalid_config("repair needs the cached result as prevResult"))
}

fn addresses(prev: &CniResult) -> Vec<IpNet> {
    prev.ips.iter().map(|i| i.address).collect()
}

/// bridge: `ipMasq` (layer-3 bridges only, as ADD) and `macspoofchk`.
fn bridge(args: &CmdArgs, fix: bool) -> Result<Vec<String>, CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    let mut restored: Vec<String> = masq(args, conf.layer3 && conf.ip_masq, fix)?
        .into_iter()
        .collect();
    if conf.macspoofchk {
        let (cid, ifname) = (&args.container_id, &args.ifname);
        let (host_veth, mac) = spoofcheck_target(prev(args)?, &conf.bridge, ifname)?;
        let missing = spoofcheck::missing_spoofcheck(cid, ifname)?;
        if fix && missing.is_some() {
            spoofcheck::setup_spoofcheck(cid, ifname, host_veth, mac)?;
        }
        restored.extend(missing.map(|m| format!("macspoofchk: {m}")));
    }
    Ok(restored)
}

fn masq(args: &CmdArgs, enabled: bool, fix: bool) -> Result<Option<String>, CniError> {
    if !enabled {
        return Ok(None);
    }
    let ips = addresses(prev(args)?);
    let (net, cid, ifname) = (&args.conf.name, &args.container_id, &args.ifname);
    let missing = masquerade::missing_masquerade(net, cid, ifname, &ips)?;
    if fix && missing.is_some() {
        masquerade::setup_masquerade(net, cid, ifname, &ips)?;
    }
    Ok(missing.map(|m| format!("ipMasq: {m}")))
}

/// The host veth and the container MAC the spoof check names, from the bridge's result
/// (bridge, host veth, container interface).
pub fn spoofcheck_target<'a>(
    prev: &'a CniResult,
    bridge: &str,
    ifname: &str,
) -> Result<(&'a str, &'a str), CniError> {
    let host = prev
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_empty() && i.name != bridge);
    let container = prev
        .interfaces
        .iter()
        .find(|i| !i.sandbox.is_empty() && i.name == ifname);
    match (host, container) {
        (Some(h), Some(c)) if !c.mac.is_empty() => Ok((&h.name, &c.mac)),
        _ => Err(CniError::internal(format!(
            "macspoofchk: the result names no host veth and container {ifname} with a MAC"
        ))),
    }
}

/// CHECK of the rules bridge and ptp own (`ipMasq`, and `macspoofchk` when
/// `spoofcheck_bridge` names the bridge): an error naming what is missing and the repair.
pub fn check_rules(
    plugin: &str,
    args: &CmdArgs,
    ip_masq: bool,
    spoofcheck_bridge: Option<&str>,
) -> Result<(), CniError> {
    let prev = prev(args)?;
    let (cid, ifname) = (&args.container_id, &args.ifname);
    let mut missing = None;
    if ip_masq {
        let ips = addresses(prev);
        missing = masquerade::missing_masquerade(&args.conf.name, cid, ifname, &ips)?
            .map(|m| format!("ipMasq: {m}"));
    }
    if let (None, Some(bridge)) = (&missing, spoofcheck_bridge) {
        spoofcheck_target(prev, bridge, ifname)?;
        missing = spoofcheck::missing_spoofcheck(cid, ifname)?.map(|m| format!("macspoofchk: {m}"));
    }
    match missing {
        None => Ok(()),
        Some(m) => Err(CniError::internal(format!(
            "{plugin}: rules of container {cid} are missing: {m}; {REPAIR_HINT}"
        ))),
    }
}
