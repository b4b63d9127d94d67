//! Repair: putting back the nf_tables objects and rules an attachment's ADD made, after
//! something else on the host removed them (`nft flush ruleset`, `iptables -F`, a firewalld
//! reload). The operation is plugin-level: each rcni plugin that owns rules compares the
//! kernel with what its CHECK expects and, for whatever is missing, runs the rule-installing
//! part of its own ADD with the cached `prevResult`, the same functions ADD calls. Links,
//! addresses, routes, leases and sysctls are never touched, and a part found complete is
//! left alone, so repeating a repair changes nothing.
//!
//! The runtime (`cni_runtime::repair`) decides which attachments and which plugins of their
//! chains are repaired (rcni's own, not Go plugins) and executes the `rcni-plugins` binary
//! under its own name with `CNI_COMMAND` [`RCNI_REPAIR`] (or [`RCNI_REPAIR_LOOK`]), the
//! attachment's CNI variables and, on stdin, the request config the plugin got at ADD
//! ([`run_command`]). Plugins stay executed, never linked, as for every other command.

use std::io::Read;

use ipnet::IpNet;
use serde_json::json;

use cni_invoke::{RCNI_REPAIR, RCNI_REPAIR_LOOK};
use cni_plugin::{CmdArgs, Command};
use cni_types::{pretty_json, CniError, CniResult, SpecVersion};

use crate::bridge::conf::BridgeConf;
use crate::common::{masquerade, spoofcheck};
use crate::firewall::Firewall;
use crate::portmap::Portmap;
use crate::ptp::PtpConf;

/// Whether a repair puts back what is missing or only says what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Look,
    Repair,
}

/// The mode `CNI_COMMAND` asks for, if it is one of the repair commands.
pub fn mode_of(command: &str) -> Option<Mode> {
    match command {
        RCNI_REPAIR => Some(Mode::Repair),
        RCNI_REPAIR_LOOK => Some(Mode::Look),
        _ => None,
    }
}

/// The front end's repair command: the request from the environment and stdin, the answer
/// (or a CNI error) on stdout. Returns the exit code.
pub fn run_command(mode: Mode) -> i32 {
    let answer = request_from_env().and_then(|args| repair(&args.conf.plugin_type, &args, mode));
    let (code, out) = match answer {
        Ok(Some(restored)) => (0, pretty_json(&json!({ "restored": restored }))),
        Ok(None) => (0, pretty_json(&json!({ "ownsNoRules": true }))),
        Err(e) => (1, e.to_json(SpecVersion::CURRENT)),
    };
    print!("{out}");
    code
}

fn request_from_env() -> Result<CmdArgs, CniError> {
    let mut stdin = Vec::new();
    std::io::stdin()
        .read_to_end(&mut stdin)
        .map_err(|e| CniError::internal(format!("reading the request config: {e}")))?;
    let mut args = CmdArgs::new(Command::Check, &stdin)?;
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    args.container_id = var("CNI_CONTAINERID");
    args.netns = var("CNI_NETNS");
    args.ifname = var("CNI_IFNAME");
    args.args = var("CNI_ARGS");
    args.path = var("CNI_PATH");
    Ok(args)
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
