//! Gateways (as Go's bridge works them out after IPAM ADD): computing them from the IPAM result and
//! putting them on the bridge.

use std::net::IpAddr;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::Handle;
use cni_types::{CniError, CniResult, Route};
use ipnet::IpNet;

/// The gateway addresses (with the container's prefix length) per family.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gateways {
    pub v4: Vec<IpNet>,
    pub v6: Vec<IpNet>,
}

/// The first address after the network address: the gateway Go picks when IPAM gave none.
pub fn first_host(net: &IpNet) -> IpAddr {
    match net.network() {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add(1).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(1).into()),
    }
}

fn default_dst(v6: bool) -> IpNet {
    if v6 {
        IpNet::V6(ipnet::Ipv6Net::default())
    } else {
        IpNet::V4(ipnet::Ipv4Net::default())
    }
}

/// Go's `calcGateways`: points every IP at the container interface (index 2), fills missing
/// gateways with subnet + 1 when `is_gateway`, adds one default route per family via the
/// gateway when `is_default_gateway` (unless IPAM already returned a default route with a
/// gateway), and collects the gateway addresses.
pub fn calc_gateways(
    result: &mut CniResult,
    is_gateway: bool,
    is_default_gateway: bool,
) -> Gateways {
    let mut gws = Gateways::default();
    let mut default_found = [false, false];
    for i in 0..result.ips.len() {
        let ipc = &mut result.ips[i];
        let v6 = !ipc.is_ipv4();
        ipc.interface = Some(2);
        if ipc.gateway.is_none() && is_gateway {
            ipc.gateway = Some(first_host(&ipc.address));
        }
        let gateway = ipc.gateway;
        let prefix = ipc.address.prefix_len();
        let fam = usize::from(v6);
        if is_default_gateway && !default_found[fam] {
            let dst = default_dst(v6);
            if !result.routes.iter().any(|r| r.gw.is_some() && r.dst == dst) {
                result.routes.push(Route::new(dst, gateway));
            }
            default_found[fam] = true;
        }
        if is_gateway {
            if let Some(gw) = gateway.and_then(|g| IpNet::new(g, prefix).ok()) {
                if v6 {
                    gws.v6.push(gw);
                } else {
                    gws.v4.push(gw);
                }
            }
        }
    }
    gws
}

/// Whether an address already on the bridge conflicts with the gateway `want`: any other IPv4
/// address, or an overlapping IPv6 prefix.
pub fn conflicts(existing: &IpNet, want: &IpNet) -> bool {
    match want {
        IpNet::V4(_) => existing.addr().is_ipv4(),
        IpNet::V6(_) => {
            existing.addr().is_ipv6()
                && (existing.contains(&want.addr()) || want.contains(&existing.addr()))
        }
    }
}

/// Go's `ensureAddr`: puts `gw` on `link` unless it is there, removing conflicting addresses
/// with `force`, failing on them otherwise; then pins the link's MAC by writing it back.
pub fn ensure_addr(h: &mut Handle, link: &Link, gw: IpNet, force: bool) -> Result<(), CniError> {
    let addrs = h
        .addresses(Some(link.index))
        .map_err(|e| CniError::internal(format!("could not get list of IP addresses: {e}")))?;
    let same_family = addrs
        .iter()
        .filter(|a| a.addr.addr().is_ipv4() == gw.addr().is_ipv4());
    let mut to_remove = Vec::new();
    for a in same_family {
        if a.addr == gw {
            return Ok(());
        }
        if conflicts(&a.addr, &gw) {
            if !force {
                return Err(CniError::internal(format!(
                    "{:?} already has an IP address different from {gw}",
                    link.name
                )));
            }
            to_remove.push(a.addr);
        }
    }
    for old in to_remove {
        h.delete_address(link.index, old).map_err(|e| {
            CniError::internal(format!(
                "could not remove IP address from {:?}: {e}",
                link.name
            ))
        })?;
    }
    match h.add_address(link.index, gw, AddAddressOptions::default()) {
        Ok(()) => {}
        Err(e) if e.is_exists() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "could not add IP address {gw} to {:?}: {e}",
                link.name
            )))
        }
    }
    // Otherwise the bridge takes the lowest MAC of its ports and changes as ports come and go.
    // The MAC is read again: a bridge whose last port went away has the all-zero MAC until a
    // port is added, and the kernel refuses to set that one (Go would fail here).
    let current = h
        .link_by_index(link.index)
        .map_err(|e| CniError::internal(format!("could not look up {:?}: {e}", link.name)))?;
    if let Some(mac) = current.mac.filter(|m| m.0 != [0u8; 6]) {
        h.change_link(&LinkChange::of(link.index).mac(mac))
            .map_err(|e| CniError::internal(format!("could not set bridge's mac: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::{IpConfig, SpecVersion};

    fn ip(addr: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            interface: None,
            address: addr.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
        }
    }

    #[test]
    fn first_host_of_subnets() {
        assert_eq!(
            first_host(&"10.1.2.7/24".parse().unwrap()).to_string(),
            "10.1.2.1"
        );
        assert_eq!(
            first_host(&"fd00::9/64".parse().unwrap()).to_string(),
            "fd00::1"
        );
    }

    #[test]
    fn computes_gateways_and_default_routes() {
        let mut r = CniResult::new(SpecVersion::V1_0_0);
        r.ips = vec![
            ip("10.1.2.7/24", None),
            ip("fd00::9/64", Some("fd00::fe")),
            ip("10.9.0.3/16", Some("10.9.0.1")),
        ];
        let gws = calc_gateways(&mut r, true, true);
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        assert_eq!(r.ips[0].gateway.unwrap().to_string(), "10.1.2.1");
        assert_eq!(
            gws.v4,
            [
                "10.1.2.1/24".parse().unwrap(),
                "10.9.0.1/16".parse().unwrap()
            ]
        );
        assert_eq!(gws.v6, ["fd00::fe/64".parse::<IpNet>().unwrap()]);
        let routes: Vec<String> = r
            .routes
            .iter()
            .map(|r| format!("{} {:?}", r.dst, r.gw.map(|g| g.to_string())))
            .collect();
        assert_eq!(
            routes,
            ["0.0.0.0/0 Some(\"10.1.2.1\")", "::/0 Some(\"fd00::fe\")"]
        );
    }

    #[test]
    fn keeps_ipam_default_route_with_gateway() {
        let mut r = CniResult::new(SpecVersion::V1_0_0);
        r.ips = vec![ip("10.1.2.7/24", Some("10.1.2.1"))];
        r.routes = vec![Route::new(
            "0.0.0.0/0".parse().unwrap(),
            Some("10.1.2.254".parse().unwrap()),
        )];
        calc_gateways(&mut r, true, true);
        assert_eq!(r.routes.len(), 1);
        // A default route without a gateway does not count.
        r.routes[0].gw = None;
        calc_gateways(&mut r, true, true);
        assert_eq!(r.routes.len(), 2);
    }

    #[test]
    fn no_gateway_without_is_gateway() {
        let mut r = CniResult::new(SpecVersion::V1_0_0);
        r.ips = vec![ip("10.1.2.7/24", None)];
        let gws = calc_gateways(&mut r, false, false);
        assert_eq!(gws, Gateways::default());
        assert_eq!(r.ips[0].gateway, None);
        assert!(r.routes.is_empty());
    }

    #[test]
    fn conflict_rules() {
        let n = |s: &str| s.parse::<IpNet>().unwrap();
        assert!(conflicts(&n("10.0.0.1/8"), &n("10.1.0.1/16")));
        assert!(conflicts(&n("192.168.0.1/24"), &n("10.1.0.1/16")));
        assert!(!conflicts(&n("fd00::1/64"), &n("10.1.0.1/16")));
        assert!(conflicts(&n("fd00::1/48"), &n("fd00::2/64")));
        assert!(!conflicts(&n("fd01::1/64"), &n("fd00::1/64")));
    }
}
