//! CHECK helpers comparing a `prevResult` with the kernel (Go's `ip.ValidateExpected*`):
//! the container's entry in it, its interfaces, addresses and routes. The kernel checks take a
//! handle opened in the namespace to look at.

use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::route::RT_TABLE_MAIN;
use cni_linux::Handle;
use cni_plugin::CmdArgs;
use cni_types::{CniError, CniResult, Interface, IpConfig, Route};
use ipnet::IpNet;

fn fail(msg: String) -> CniError {
    CniError::internal(msg)
}

/// Every IP must be on `ifname` with the same prefix length, and a route to its prefix
/// must exist in the main table.
pub fn expected_ips(h: &mut Handle, ifname: &str, ips: &[IpConfig]) -> Result<(), CniError> {
    if ips.is_empty() {
        return Ok(());
    }
    let link = h
        .link_by_name(ifname)
        .map_err(|_| fail(format!("Cannot find container link {ifname}")))?;
    let addrs = h
        .addresses(Some(link.index))
        .map_err(|e| fail(format!("Cannot obtain List of IP Addresses: {e}")))?;
    for ipc in ips {
        if !addrs.iter().any(|a| a.addr == ipc.address) {
            return Err(fail(format!(
                "Failed to match addr {} on interface {ifname}",
                ipc.address
            )));
        }
        let prefix = ipc.address.trunc();
        let routes = h.routes(prefix.addr().is_ipv6(), None).map_err(|e| {
            fail(format!(
                "Error {e} trying to find Gateway for interface {ifname}"
            ))
        })?;
        if !routes.iter().any(|r| r.dst == prefix) {
            let gw = ipc.gateway.map(|g| g.to_string()).unwrap_or_default();
            return Err(fail(format!(
                "Failed to find Gateway {gw} for interface {ifname}"
            )));
        }
    }
    Ok(())
}

fn is_default(dst: &IpNet) -> bool {
    dst.prefix_len() == 0
}

/// Every route must exist, matching its destination and, when given, its gateway; a default
/// route is matched by destination only (as Go's filter does). A gateway of 0.0.0.0 or `::`
/// (dhcp's on-link option-121 routes) is a route without a gateway in the kernel.
pub fn expected_routes(h: &mut Handle, routes: &[Route]) -> Result<(), CniError> {
    for r in routes {
        let want_gw = r.gw.filter(|g| !g.is_unspecified());
        let table = r.table.unwrap_or(RT_TABLE_MAIN);
        let have = h.routes(r.dst.addr().is_ipv6(), Some(table)).map_err(|e| {
            fail(format!(
                "Expected Route {} not route table lookup error {e}",
                r.dst
            ))
        })?;
        let found = have.iter().any(|k| {
            k.dst == r.dst.trunc() && (is_default(&r.dst) || r.gw.is_none() || k.gateway == want_gw)
        });
        if !found {
            let via = r.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(fail(format!(
                "Expected Route {}{via} not found in routing table",
                r.dst
            )));
        }
    }
    Ok(())
}

/// CHECK's `prevResult` and its entry for the container interface (see [`container_entry`]).
pub fn prev_container_entry(args: &CmdArgs) -> Result<(&CniResult, Interface), CniError> {
    let prev = args
        .prev_result
        .as_ref()
        .ok_or_else(|| fail("Required prevResult missing".into()))?;
    Ok((prev, container_entry(args, prev)?))
}

/// The entry of `prev` for the container interface, `CNI_IFNAME` in `CNI_NETNS` (an empty
/// one when there is none); its sandbox must be this netns.
pub fn container_entry(args: &CmdArgs, prev: &CniResult) -> Result<Interface, CniError> {
    let sandbox = args.sandbox()?;
    let entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == sandbox)
        .cloned()
        .unwrap_or_default();
    if entry.sandbox != sandbox {
        return Err(fail(format!(
            "Sandbox in prevResult {} doesn't match configured netns: {}",
            entry.sandbox, sandbox
        )));
    }
    Ok(entry)
}

/// The link a `prevResult` interface names in `h`'s namespace.
fn named_link(h: &mut Handle, iface: &Interface) -> Result<Link, CniError> {
    if iface.name.is_empty() {
        return Err(fail("Interface name missing".into()));
    }
    h.link_by_name(&iface.name)
        .map_err(|_| fail(format!("Interface name {} not found", iface.name)))
}

/// Looks up a `prevResult` interface of the host side (a bridge, a host veth): it must be in
/// `h`'s namespace and name no sandbox.
pub fn host_interface(h: &mut Handle, iface: &Interface) -> Result<Link, CniError> {
    let link = named_link(h, iface)?;
    if !iface.sandbox.is_empty() {
        return Err(fail(format!(
            "Interface {} should not be in sandbox",
            iface.name
        )));
    }
    Ok(link)
}

/// Looks up a `prevResult` interface that must be a veth in a sandbox, `h`'s namespace, with
/// the MAC the result gives (when it gives one).
pub fn container_veth(h: &mut Handle, iface: &Interface) -> Result<Link, CniError> {
    let link = named_link(h, iface)?;
    if iface.sandbox.is_empty() {
        return Err(fail(format!(
            "Interface {} is expected to be in a sandbox",
            iface.name
        )));
    }
    if link.kind.as_deref() != Some("veth") {
        return Err(fail(format!(
            "Error: Container interface {} not of type veth",
            link.name
        )));
    }
    check_mac(iface, &link)?;
    Ok(link)
}

/// The result's MAC (when set) must equal the link's, compared case-insensitively.
pub fn check_mac(iface: &Interface, link: &Link) -> Result<(), CniError> {
    if iface.mac.is_empty() {
        return Ok(());
    }
    let actual = link.mac.map(|m| m.to_string()).unwrap_or_default();
    if !iface.mac.eq_ignore_ascii_case(&actual) {
        return Err(fail(format!(
            "Interface {} Mac {} doesn't match: {actual}",
            iface.name, iface.mac
        )));
    }
    Ok(())
}
