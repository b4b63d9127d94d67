//! bridge CHECK: IPAM CHECK, then the bridge, the container veth and its host peer
//! found through `prevResult`, then the container's addresses and routes, then the
//! attachment's rules; and rcni's repair of those rules.
//!
//! Deliberate difference (containernetworking/plugins issue #805): the host veth's MAC is not
//! compared, because udev may rewrite a kernel-random MAC after ADD; the host veth is identified by
//! being the container veth's peer and a port of the bridge.

use cni_linux::rtnl::link::Link;
use cni_linux::Handle;
use cni_plugin::{ipam, CmdArgs, RepairAnswer, RepairMode, ResultExt};
use cni_types::{CniError, Interface};

use super::conf::BridgeConf;
use crate::common::attachment_rules::{self, Rules};
use crate::common::validate;
use crate::netns;

fn fail(msg: String) -> CniError {
    CniError::internal(msg)
}

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    let ns = netns::open_required(&args.netns)?;
    // Go always runs IPAM CHECK; an L2-only bridge has no IPAM to ask, so rcni skips it.
    if conf.layer3 {
        ipam::ipam_check(args)?;
    }
    let prev = args
        .prev_result
        .as_ref()
        .ok_or_else(|| fail("Required prevResult missing".into()))?;

    let bridge_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == conf.bridge)
        .cloned()
        .unwrap_or_default();
    let mut host = Handle::new().or_internal("cannot open netlink")?;
    let bridge = check_bridge(&mut host, &bridge_entry, &conf)?;

    let container_entry = validate::container_entry(args, prev)?;
    let mut in_container =
        Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let container = validate::container_veth(&mut in_container, &container_entry)?;

    let host_veth = prev
        .interfaces
        .iter()
        .filter(|i| i.name != bridge_entry.name && i.name != container_entry.name)
        .map(|i| host_peer(&mut host, i, &bridge, &container))
        .find_map(|r| r.transpose());
    match host_veth {
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(e),
        None => {
            return Err(fail(format!(
                "CNI veth created for bridge {} was not found",
                conf.bridge
            )))
        }
    }

    validate::expected_ips(&mut in_container, &args.ifname, &prev.ips)?;
    validate::expected_routes(&mut in_container, &prev.routes)?;
    attachment_rules::check("bridge", args, &rules(&conf))
}

/// The rules ADD made: `ipMasq` on a layer-3 bridge only, and `macspoofchk`.
fn rules(conf: &BridgeConf) -> Rules<'_> {
    Rules {
        ip_masq: conf.layer3 && conf.ip_masq,
        spoofcheck_bridge: conf.macspoofchk.then_some(conf.bridge.as_str()),
    }
}

/// rcni's repair of the rules CHECK looks at.
pub fn repair(args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    attachment_rules::repair(args, &rules(&conf), mode)
}

/// The bridge entry must name a bridge in the host namespace, with its MAC, and its promisc
/// state must equal `promiscMode`.
fn check_bridge(h: &mut Handle, entry: &Interface, conf: &BridgeConf) -> Result<Link, CniError> {
    if entry.name.is_empty() {
        return Err(fail(format!(
            "CNI created bridge {} in host namespace was not found",
            conf.bridge
        )));
    }
    let link = validate::host_interface(h, entry)?;
    if link.kind.as_deref() != Some("bridge") {
        return Err(fail(format!(
            "Interface {} does not have link type of bridge",
            entry.name
        )));
    }
    validate::check_mac(entry, &link).map_err(|_| {
        fail(format!(
            "Bridge interface {} Mac doesn't match: {}",
            entry.name, entry.mac
        ))
    })?;
    if link.promisc != conf.promisc_mode {
        return Err(fail(format!(
            "Bridge interface {} configured Promisc Mode {} doesn't match current state: {}",
            entry.name, conf.promisc_mode, link.promisc
        )));
    }
    Ok(link)
}

/// `Some(link)` when `entry` is the host veth of this attachment: a veth in the host namespace
/// peered with the container veth and enslaved to the bridge. Entries of other kinds are
/// skipped (`None`), as in Go.
fn host_peer(
    h: &mut Handle,
    entry: &Interface,
    bridge: &Link,
    container: &Link,
) -> Result<Option<Link>, CniError> {
    let link = validate::host_interface(h, entry)?;
    if link.kind.as_deref() != Some("veth") {
        return Ok(None);
    }
    let peered = container.link == Some(link.index) && link.link == Some(container.index);
    if !peered || link.master != Some(bridge.index) {
        return Ok(None);
    }
    Ok(Some(link))
}
