//! The nf_tables rules the veth plugins make for an attachment beside its links: `ipMasq`
//! (bridge and ptp, `common::masquerade`) and `macspoofchk` (bridge, `common::spoofcheck`).
//! CHECK names the first one missing ([`check`]); rcni's repair ([`repair`]) names every one
//! missing and puts it back with the function ADD installs it with, from the cached result.

use ipnet::IpNet;

use cni_plugin::repair::REPAIR_HINT;
use cni_plugin::{CmdArgs, RepairAnswer, RepairMode};
use cni_types::{CniError, CniResult};

use super::{masquerade, spoofcheck};

/// Which of the rules an attachment's config asks for.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// `ipMasq` (for bridge: on a layer-3 bridge only, as ADD makes them).
    pub ip_masq: bool,
    /// `macspoofchk`: the bridge the attachment is a port of.
    pub spoofcheck_bridge: Option<&'a str>,
}

/// One kind of rule found missing: its description, and how to put it back.
enum Missing<'a> {
    Masquerade(String, Vec<IpNet>),
    Spoofcheck(String, SpoofcheckTarget<'a>),
}

impl Missing<'_> {
    fn describe(&self) -> String {
        match self {
            Missing::Masquerade(m, _) => format!("ipMasq: {m}"),
            Missing::Spoofcheck(m, _) => format!("macspoofchk: {m}"),
        }
    }

    fn restore(&self, args: &CmdArgs) -> Result<(), CniError> {
        let (cid, ifname) = (&args.container_id, &args.ifname);
        match self {
            Missing::Masquerade(_, ips) => {
                masquerade::setup_masquerade(&args.conf.name, cid, ifname, ips)
            }
            Missing::Spoofcheck(_, target) => {
                spoofcheck::setup_spoofcheck(cid, ifname, target.host_veth, target.mac)
            }
        }
    }
}

fn prev(args: &CmdArgs) -> Result<&CniResult, CniError> {
    args.prev_result
        .as_ref()
        .ok_or_else(|| CniError::invalid_config("repair needs the cached result as prevResult"))
}

fn missing_masquerade<'a>(
    args: &CmdArgs,
    prev: &CniResult,
) -> Result<Option<Missing<'a>>, CniError> {
    let ips: Vec<IpNet> = prev.ips.iter().map(|i| i.address).collect();
    let (net, cid, ifname) = (&args.conf.name, &args.container_id, &args.ifname);
    Ok(
        masquerade::missing_masquerade(net, cid, ifname, &ips)?
            .map(|m| Missing::Masquerade(m, ips)),
    )
}

fn missing_spoofcheck<'a>(
    args: &CmdArgs,
    prev: &'a CniResult,
    bridge: &str,
) -> Result<Option<Missing<'a>>, CniError> {
    let target = spoofcheck_target(prev, bridge, &args.ifname)?;
    Ok(
        spoofcheck::missing_spoofcheck(&args.container_id, &args.ifname)?
            .map(|m| Missing::Spoofcheck(m, target)),
    )
}

/// CHECK: an error naming the first rule missing, and the repair.
pub fn check(plugin: &str, args: &CmdArgs, rules: &Rules<'_>) -> Result<(), CniError> {
    let prev = prev(args)?;
    let mut missing = None;
    if rules.ip_masq {
        missing = missing_masquerade(args, prev)?;
    }
    if let (None, Some(bridge)) = (&missing, rules.spoofcheck_bridge) {
        missing = missing_spoofcheck(args, prev, bridge)?;
    }
    match missing {
        None => Ok(()),
        Some(m) => Err(CniError::internal(format!(
            "{plugin}: rules of container {} are missing: {}; {REPAIR_HINT}",
            args.container_id,
            m.describe()
        ))),
    }
}

/// rcni's repair: every rule missing, put back with [`RepairMode::Repair`].
pub fn repair(
    args: &CmdArgs,
    rules: &Rules<'_>,
    mode: RepairMode,
) -> Result<RepairAnswer, CniError> {
    let mut restored = Vec::new();
    let mut put_back = |missing: Option<Missing<'_>>| -> Result<(), CniError> {
        if let Some(m) = missing {
            if mode == RepairMode::Repair {
                m.restore(args)?;
            }
            restored.push(m.describe());
        }
        Ok(())
    };
    if rules.ip_masq {
        put_back(missing_masquerade(args, prev(args)?)?)?;
    }
    if let Some(bridge) = rules.spoofcheck_bridge {
        put_back(missing_spoofcheck(args, prev(args)?, bridge)?)?;
    }
    Ok(RepairAnswer::Restored(restored))
}

/// The host veth and the container MAC a spoof check names.
#[derive(Debug, Clone, Copy)]
struct SpoofcheckTarget<'a> {
    host_veth: &'a str,
    mac: &'a str,
}

/// The spoof check's names from the bridge's result (bridge, host veth, container interface).
fn spoofcheck_target<'a>(
    prev: &'a CniResult,
    bridge: &str,
    ifname: &str,
) -> Result<SpoofcheckTarget<'a>, CniError> {
    let host = prev
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_empty() && i.name != bridge);
    let container = prev
        .interfaces
        .iter()
        .find(|i| !i.sandbox.is_empty() && i.name == ifname);
    match (host, container) {
        (Some(h), Some(c)) if !c.mac.is_empty() => Ok(SpoofcheckTarget {
            host_veth: &h.name,
            mac: &c.mac,
        }),
        _ => Err(CniError::internal(format!(
            "macspoofchk: the result names no host veth and container {ifname} with a MAC"
        ))),
    }
}
