//! Applying an IPAM result to one interface: Go's `ipam.ConfigureIface`
//! (containernetworking/plugins `pkg/ipam/ipam_linux.go`).
//!
//! [`configure_iface`] must run on a thread inside the interface's namespace (inside
//! [`cni_linux::NetNs::run`]) when it writes that namespace's sysctls (for IPv6 addresses, see
//! [`needs_namespace_thread`]).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::route::{Route as KernelRoute, RouteScope};
use cni_linux::{sysctl, Handle};
use cni_types::{CniError, CniResult};
use ipnet::IpNet;

/// How long IPv6 addresses may stay tentative (Go: 5 s).
const DAD_SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
const DAD_SETTLE_INTERVAL: Duration = Duration::from_millis(50);

/// Options of [`configure_iface`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigureOptions {
    /// Add IPv6 addresses with `IFA_F_NODAD`, where the caller has turned DAD off anyway
    /// (bridge without `enabledad`), so there is nothing to wait for
    /// (containernetworking/plugins issue #680).
    pub ipv6_nodad: bool,
}

/// Adds the addresses of `result` whose `interface` index names `ifname`, sets the link up,
/// waits for IPv6 DAD when there is an IPv6 gateway, and adds the routes (ECMP-style: a
/// duplicate destination is appended).
pub fn configure_iface(
    h: &mut Handle,
    ifname: &str,
    result: &CniResult,
    opts: ConfigureOptions,
) -> Result<(), CniError> {
    let link = h
        .link_by_name(ifname)
        .map_err(|e| CniError::internal(format!("failed to lookup {ifname:?}: {e}")))?;
    configure_link(h, &link, result, opts)
}

/// True when [`configure_link`] writes sysctls (it enables IPv6 for an IPv6 address), so it
/// must run on a thread inside the link's namespace; without IPv6 addresses a handle open in
/// that namespace is enough.
pub fn needs_namespace_thread(result: &CniResult) -> bool {
    result.ips.iter().any(|ip| !ip.is_ipv4())
}

/// [`configure_iface`] for a link already looked up.
pub fn configure_link(
    h: &mut Handle,
    link: &Link,
    result: &CniResult,
    opts: ConfigureOptions,
) -> Result<(), CniError> {
    let ifname = link.name.as_str();
    if result.interfaces.is_empty() {
        return Err(CniError::internal("no interfaces to configure"));
    }
    let mut v4gw: Option<IpAddr> = None;
    let mut v6gw: Option<IpAddr> = None;
    let mut ipv6_enabled = false;
    for ipc in &result.ips {
        let Some(idx) = ipc.interface else { continue };
        let names_us = usize::try_from(idx)
            .ok()
            .and_then(|i| result.interfaces.get(i))
            .is_some_and(|iface| iface.name == ifname);
        if !names_us {
            return Err(CniError::internal(format!(
                "failed to add IP addr {} to {ifname:?}: invalid interface index",
                ipc.address
            )));
        }
        let is_v6 = !ipc.is_ipv4();
        if is_v6 && !ipv6_enabled {
            enable_ipv6(ifname)?;
            ipv6_enabled = true;
        }
        h.add_address(
            link.index,
            ipc.address,
            AddAddressOptions {
                nodad: is_v6 && opts.ipv6_nodad,
            },
        )
        .map_err(|e| {
            CniError::internal(format!(
                "failed to add IP addr {} to {ifname:?}: {e}",
                ipc.address
            ))
        })?;
        match ipc.gateway {
            Some(gw @ IpAddr::V4(_)) if v4gw.is_none() => v4gw = Some(gw),
            Some(gw @ IpAddr::V6(_)) if v6gw.is_none() => v6gw = Some(gw),
            _ => {}
        }
    }

    h.change_link(&LinkChange::of(link.index).up())
        .map_err(|e| CniError::internal(format!("failed to set {ifname:?} UP: {e}")))?;

    if v6gw.is_some() {
        settle_addresses(h, ifname, link.index, DAD_SETTLE_TIMEOUT).map_err(|e| {
            CniError::internal(format!("failed to settle addresses for {ifname:?}: {e}"))
        })?;
    }

    for r in &result.routes {
        let gw = r.gw.or(match r.dst {
            IpNet::V4(_) => v4gw,
            IpNet::V6(_) => v6gw,
        });
        let mut route = KernelRoute::to(r.dst);
        route.oif = Some(link.index);
        route.gateway = gw;
        route.priority = (r.priority > 0).then_some(r.priority);
        route.table = r.table;
        route.scope = r
            .scope
            .and_then(|s| u8::try_from(s).ok())
            .map(RouteScope::from);
        h.add_route(&route).map_err(|e| {
            let via = gw.map(|g| g.to_string()).unwrap_or_else(|| "<nil>".into());
            CniError::internal(format!(
                "failed to add route '{} via {via} dev {ifname} metric {}': {e}",
                r.dst, r.priority
            ))
        })?;
    }
    Ok(())
}

/// `disable_ipv6=0` for `lo` and `ifname` (a failed read is only logged), then
/// `keep_addr_on_down=1` for `ifname` (a failure is fatal, as in Go).
fn enable_ipv6(ifname: &str) -> Result<(), CniError> {
    for iface in ["lo", ifname] {
        let key = sysctl::iface_key("ipv6", iface, "disable_ipv6");
        match sysctl::read(&key) {
            Err(e) => {
                log::warn!("failed to read sysctl {key}: {e}");
                continue;
            }
            Ok(v) if v == "0" => continue,
            Ok(v) => sysctl::write(&key, "0").map_err(|e| {
                CniError::internal(format!(
                    "failed to enable IPv6 for interface {iface:?} ({key}={v}): {e}"
                ))
            })?,
        }
    }
    let key = sysctl::iface_key("ipv6", ifname, "keep_addr_on_down");
    sysctl::write(&key, "1").map_err(|e| {
        CniError::internal(format!(
            "failed to enable keep_addr_on_down for interface {ifname:?}: {e}"
        ))
    })
}

/// Waits until no IPv6 address of the link is tentative. DADFAILED is an error; still
/// tentative at the deadline is an error only if the link is operationally up.
fn settle_addresses(
    h: &mut Handle,
    ifname: &str,
    index: u32,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let addrs = h
            .addresses(Some(index))
            .map_err(|e| format!("could not list addresses: {e}"))?;
        let v6: Vec<_> = addrs.iter().filter(|a| a.addr.addr().is_ipv6()).collect();
        if let Some(bad) = v6.iter().find(|a| a.dad_failed) {
            return Err(format!(
                "link {ifname} has address {} in DADFAILED state",
                bad.addr.addr()
            ));
        }
        if !v6.iter().any(|a| a.tentative) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let up = h
                .link_by_index(index)
                .map_err(|e| format!("failed to retrieve link: {e}"))?
                .oper_up;
            if up {
                return Err(format!(
                    "link {ifname} still has tentative addresses after {} seconds",
                    timeout.as_secs()
                ));
            }
            return Ok(());
        }
        std::thread::sleep(DAD_SETTLE_INTERVAL);
    }
}
