//! host-gw: per remote node, `<remote subnet> via <remote PublicIP> dev <underlay>`, and on an
//! IPv6 network `<remote IPv6 subnet> via <remote PublicIPv6> dev <underlay>`. Needs the nodes
//! on one L2 segment (the gateway must be a neighbour of the underlay device).

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use cni_linux::rtnl::overlay::NextHopRoute;
use cni_linux::Handle;

use super::{gone_is_fine, nl_err, Backend, BackendError, Repairs, RTPROT_RCNI};
use crate::lease::{BackendData, Lease};

/// The host-gw backend.
pub struct HostGw {
    nl: Handle,
    underlay: u32,
}

impl HostGw {
    /// A backend routing through the underlay device with index `underlay`.
    pub fn new(nl: Handle, underlay: u32) -> Self {
        HostGw { nl, underlay }
    }

    fn routes_for(&self, lease: &Lease) -> Vec<NextHopRoute> {
        if lease.attrs.backend_type != "host-gw" {
            log::warn!(
                "lease {} is of backend {}, not host-gw: skipped",
                lease.subnet,
                lease.attrs.backend_type
            );
            return Vec::new();
        }
        let v4 = lease
            .subnet
            .v4
            .zip(lease.attrs.public_ipv4())
            .map(|(net, via)| (IpNet::V4(net), IpAddr::V4(via)));
        let v6 = lease
            .subnet
            .v6
            .zip(lease.attrs.public_ipv6)
            .map(|(net, via)| (IpNet::V6(net), IpAddr::V6(via)));
        v4.into_iter()
            .chain(v6)
            .map(|(dst, via)| NextHopRoute {
                dst,
                via,
                oif: self.underlay,
                onlink: false,
                protocol: RTPROT_RCNI,
            })
            .collect()
    }
}

impl Backend for HostGw {
    fn backend_data(&self) -> Option<BackendData> {
        None
    }

    fn configure_local(&mut self, _subnet: crate::lease::Subnets) -> Result<(), BackendError> {
        Ok(())
    }

    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        for route in self.routes_for(lease) {
            self.nl
                .replace_nexthop_route(&route)
                .map_err(nl_err(format!("route to {} via {}", route.dst, route.via)))?;
        }
        Ok(())
    }

    fn update_remote(&mut self, old: &Lease, new: &Lease) -> Result<(), BackendError> {
        self.add_remote(new)?;
        let kept: Vec<IpNet> = self.routes_for(new).iter().map(|r| r.dst).collect();
        for route in self
            .routes_for(old)
            .into_iter()
            .filter(|r| !kept.contains(&r.dst))
        {
            gone_is_fine(self.nl.delete_nexthop_route(&route))
                .map_err(nl_err(format!("delete route to {}", route.dst)))?;
        }
        Ok(())
    }

    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        for route in self.routes_for(lease) {
            gone_is_fine(self.nl.delete_nexthop_route(&route))
                .map_err(nl_err(format!("delete route to {}", route.dst)))?;
        }
        Ok(())
    }

    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError> {
        let per_node: Vec<Vec<NextHopRoute>> = remotes.iter().map(|l| self.routes_for(l)).collect();
        let nodes = per_node.iter().filter(|r| !r.is_empty()).count();
        // Sets on both sides: the comparison stays linear in the remote nodes.
        let wanted: HashSet<NextHopRoute> = per_node.into_iter().flatten().collect();
        let mut actual: HashSet<NextHopRoute> = HashSet::new();
        for ipv6 in [false, true] {
            actual.extend(
                self.nl
                    .nexthop_routes(ipv6, RTPROT_RCNI)
                    .map_err(nl_err("list routes"))?,
            );
        }
        let mut repairs = Repairs {
            programmed: nodes,
            ..Repairs::default()
        };
        for stale in actual.iter().filter(|r| !wanted.contains(r)) {
            gone_is_fine(self.nl.delete_nexthop_route(stale))
                .map_err(nl_err(format!("delete stale route to {}", stale.dst)))?;
            repairs.removed += 1;
        }
        for route in wanted.iter().filter(|r| !actual.contains(r)) {
            self.nl
                .replace_nexthop_route(route)
                .map_err(nl_err(format!("route to {} via {}", route.dst, route.via)))?;
            repairs.restored += 1;
        }
        Ok(repairs)
    }
}
