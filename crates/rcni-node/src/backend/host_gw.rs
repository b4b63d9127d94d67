//! host-gw: per remote node, `<remote subnet> via <remote PublicIP> dev <underlay>`. Needs the
//! nodes on one L2 segment (the gateway must be a neighbour of the underlay device).

use std::collections::HashSet;
use std::net::IpAddr;

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

    fn route_for(&self, lease: &Lease) -> Option<NextHopRoute> {
        if lease.attrs.backend_type != "host-gw" {
            log::warn!(
                "lease {} is of backend {}, not host-gw: skipped",
                lease.subnet,
                lease.attrs.backend_type
            );
            return None;
        }
        Some(NextHopRoute {
            dst: lease.subnet.into(),
            via: IpAddr::V4(lease.attrs.public_ip),
            oif: self.underlay,
            onlink: false,
            protocol: RTPROT_RCNI,
        })
    }
}

impl Backend for HostGw {
    fn backend_data(&self) -> Option<BackendData> {
        None
    }

    fn configure_local(&mut self, _subnet: ipnet::Ipv4Net) -> Result<(), BackendError> {
        Ok(())
    }

    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        let Some(route) = self.route_for(lease) else {
            return Ok(());
        };
        self.nl
            .replace_nexthop_route(&route)
            .map_err(nl_err(format!("route to {} via {}", route.dst, route.via)))
    }

    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        let Some(route) = self.route_for(lease) else {
            return Ok(());
        };
        gone_is_fine(self.nl.delete_nexthop_route(&route))
            .map_err(nl_err(format!("delete route to {}", route.dst)))
    }

    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError> {
        let wanted: Vec<NextHopRoute> = remotes.iter().filter_map(|l| self.route_for(l)).collect();
        let actual: HashSet<NextHopRoute> = self
            .nl
            .nexthop_routes(false, RTPROT_RCNI)
            .map_err(nl_err("list routes"))?
            .into_iter()
            .collect();
        let mut repairs = Repairs {
            programmed: wanted.len(),
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
