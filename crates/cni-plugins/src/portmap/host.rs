//! Host-side settings portmap needs besides its rules: `route_localnet` on the
//! interface that routes to the container, and the flush of stale UDP conntrack entries.

use std::net::IpAddr;

use ipnet::IpNet;

use cni_linux::rtnl::link::Link;
use cni_linux::{sysctl, Handle};
use cni_nft::{ConntrackFilter, Family, Nft};
use cni_plugin::ResultExt;
use cni_types::CniError;

use super::conf::PortMapping;

/// The interface the kernel routes `addr` through (`ip route get`): one route look-up,
/// where listing the routes grew with the node (a ptp node has a route per pod).
fn route_interface(h: &mut Handle, addr: IpAddr) -> Result<Option<Link>, CniError> {
    let route = h
        .route_get(addr)
        .or_internal("cannot look up the route to the container")?;
    let Some(oif) = route.and_then(|r| r.oif) else {
        return Ok(None);
    };
    let link = h
        .link_by_index(oif)
        .or_internal("cannot read the interface routing to the container")?;
    Ok(Some(link))
}

/// Lets connections to 127.0.0.1 be DNATed to `container` by setting `route_localnet=1` on
/// the interface routing to it (IPv4 only; the kernel has no IPv6 equivalent). The current
/// value comes with the link from netlink, so the sysctl is only opened to change it: a
/// `/proc/sys/net/ipv4` lookup grows with the namespaces on the node.
pub fn enable_localnet_routing(container: IpNet) -> Result<(), CniError> {
    let mut h = Handle::new().or_internal("cannot open netlink")?;
    let Some(link) = route_interface(&mut h, container.addr())? else {
        // Like Go: without a route there is no interface to enable it on.
        log::warn!(
            "portmap: no route to container address {}: route_localnet not enabled",
            container.addr()
        );
        return Ok(());
    };
    if link.ipv4_route_localnet == Some(true) {
        return Ok(());
    }
    let key = sysctl::iface_key("ipv4", &link.name, "route_localnet");
    sysctl::ensure(&key, "1").or_internal("unable to enable route_localnet")?;
    Ok(())
}

/// Deletes UDP conntrack entries whose original destination port is a mapped host port, so
/// a client that sent before the mapping existed reaches the container. Best effort.
pub fn flush_udp_conntrack(nft: &mut Nft, ipv6: bool, mappings: &[PortMapping]) {
    let family = if ipv6 { Family::Ip6 } else { Family::Ip };
    for m in mappings
        .iter()
        .filter(|m| m.protocol == cni_nft::L4Proto::Udp && m.applies_to(ipv6))
    {
        let filter = ConntrackFilter::new(family)
            .protocol(cni_nft::L4Proto::Udp)
            .dst_port(m.host_port);
        if let Err(e) = nft.delete_conntrack(&filter) {
            log::warn!(
                "portmap: could not flush UDP conntrack entries for port {}: {e}",
                m.host_port
            );
        }
    }
}
