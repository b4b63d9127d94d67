//! Route operations: add (appending duplicates, as the Go plugins do), replace, delete, list,
//! and the kernel's route look-up for one address.

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Error, Handle};

/// Route scope (universe, link, host, ...), re-exported so callers need no netlink crate.
pub use netlink_packet_route::route::RouteScope;

/// The main routing table.
pub const RT_TABLE_MAIN: u32 = 254;

/// A route to add, replace or delete, or one read back from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination network; `0.0.0.0/0` or `::/0` for a default route.
    pub dst: IpNet,
    /// Next-hop gateway.
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    /// Metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// Routing table; the main table when `None`.
    pub table: Option<u32>,
    /// Scope; universe when `None`.
    pub scope: Option<RouteScope>,
    /// Path MTU metric.
    pub mtu: Option<u32>,
    /// Advertised MSS metric.
    pub advmss: Option<u32>,
}

impl Route {
    /// A route to `dst` with nothing else set.
    pub fn to(dst: IpNet) -> Self {
        Route {
            dst,
            gateway: None,
            oif: None,
            src: None,
            priority: None,
            table: None,
            scope: None,
            mtu: None,
            advmss: None,
        }
    }

    /// The address family of the destination.
    fn family(&self) -> AddressFamily {
        match self.dst {
            IpNet::V4(_) => AddressFamily::Inet,
            IpNet::V6(_) => AddressFamily::Inet6,
        }
    }

    /// Encodes the route; every address must be of the destination's family.
    fn to_message(&self) -> Result<RouteMessage, Error> {
        let family = self.family();
        let table = self.table.unwrap_or(RT_TABLE_MAIN);
        let header = RouteHeader {
            address_family: family,
            destination_prefix_length: self.dst.prefix_len(),
            protocol: RouteProtocol::Boot,
            scope: self.scope.unwrap_or(RouteScope::Universe),
            kind: RouteType::Unicast,
            // Tables above 255 go in RTA_TABLE with RT_TABLE_UNSPEC here.
            table: u8::try_from(table).unwrap_or(0),
            ..RouteHeader::default()
        };

        let mut msg = RouteMessage::default();
        msg.header = header;
        let attrs = &mut msg.attributes;
        if self.dst.prefix_len() > 0 {
            attrs.push(RouteAttribute::Destination(route_address(
                self.dst.network(),
                family,
            )?));
        }
        if let Some(gw) = self.gateway {
            attrs.push(RouteAttribute::Gateway(route_address(gw, family)?));
        }
        if let Some(src) = self.src {
            attrs.push(RouteAttribute::PrefSource(route_address(src, family)?));
        }
        if let Some(oif) = self.oif {
            attrs.push(RouteAttribute::Oif(oif));
        }
        if let Some(priority) = self.priority {
            attrs.push(RouteAttribute::Priority(priority));
        }
        if table > 255 {
            attrs.push(RouteAttribute::Table(table));
        }
        let mut metrics = Vec::new();
        if let Some(mtu) = self.mtu {
            metrics.push(RouteMetric::Mtu(mtu));
        }
        if let Some(advmss) = self.advmss {
            metrics.push(RouteMetric::Advmss(advmss));
        }
        if !metrics.is_empty() {
            attrs.push(RouteAttribute::Metrics(metrics));
        }
        Ok(msg)
    }

    fn from_message(msg: RouteMessage) -> Option<Self> {
        let header = &msg.header;
        let zero: IpAddr = match header.address_family {
            AddressFamily::Inet => std::net::Ipv4Addr::UNSPECIFIED.into(),
            AddressFamily::Inet6 => std::net::Ipv6Addr::UNSPECIFIED.into(),
            _ => return None,
        };
        let mut route = Route::to(IpNet::new(zero, header.destination_prefix_length).ok()?);
        route.scope = Some(header.scope);
        route.table = Some(u32::from(header.table));
        for attr in msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => {
                    route.dst = IpNet::new(ip_of(a)?, header.destination_prefix_length).ok()?
                }
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::PrefSource(a) => route.src = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(i),
                RouteAttribute::Priority(p) => route.priority = Some(p),
                RouteAttribute::Table(t) => route.table = Some(t),
                RouteAttribute::Metrics(metrics) => {
                    for m in metrics {
                        match m {
                            RouteMetric::Mtu(v) => route.mtu = Some(v),
                            RouteMetric::Advmss(v) => route.advmss = Some(v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(route)
    }
}

fn route_address(ip: IpAddr, family: AddressFamily) -> Result<RouteAddress, Error> {
    match (ip, family) {
        (IpAddr::V4(v4), AddressFamily::Inet) => Ok(RouteAddress::Inet(v4)),
        (IpAddr::V6(v6), AddressFamily::Inet6) => Ok(RouteAddress::Inet6(v6)),
        _ => Err(Error::InvalidArgument(format!(
            "address {ip} does not match the route's family"
        ))),
    }
}

pub(super) fn ip_of(addr: RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(v4) => Some(v4.into()),
        RouteAddress::Inet6(v6) => Some(v6.into()),
        _ => None,
    }
}

impl Handle {
    /// Adds a route with `NLM_F_CREATE` and without `NLM_F_EXCL`, so an identical destination
    /// with another next hop is appended rather than refused (the Go plugins' behaviour).
    pub fn add_route(&mut self, route: &Route) -> Result<(), Error> {
        let msg = route.to_message()?;
        self.execute(RouteNetlinkMessage::NewRoute(msg), NLM_F_CREATE)
    }

    /// Adds or replaces the route to the same destination.
    pub fn replace_route(&mut self, route: &Route) -> Result<(), Error> {
        let msg = route.to_message()?;
        self.execute(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes a route; the fields given narrow which route matches.
    pub fn delete_route(&mut self, route: &Route) -> Result<(), Error> {
        let mut msg = route.to_message()?;
        // Leave protocol, scope and type open so any matching route is removed.
        msg.header.protocol = RouteProtocol::Unspec;
        msg.header.kind = RouteType::Unspec;
        if route.scope.is_none() {
            msg.header.scope = RouteScope::NoWhere;
        }
        self.execute(RouteNetlinkMessage::DelRoute(msg), 0)
    }

    /// The unicast route messages of one family in every table, as the kernel dumps them (the
    /// one dump loop behind every route listing, here and in the overlay module).
    pub(super) fn unicast_route_messages(
        &mut self,
        ipv6: bool,
    ) -> Result<Vec<RouteMessage>, Error> {
        self.unicast_route_messages_in(ipv6, None, None)
    }

    /// [`Self::unicast_route_messages`] of one table when `table` is given, and of one
    /// protocol (`rtm_protocol`) when `protocol` is: the kernel then dumps only those
    /// (`RTA_TABLE` and the header's protocol in a strictly checked request, Linux 4.20 and
    /// later), so the node's other routes never cross the socket. Callers still check what
    /// they get: an older kernel ignores the filter and sends everything.
    pub(super) fn unicast_route_messages_in(
        &mut self,
        ipv6: bool,
        table: Option<u32>,
        protocol: Option<u8>,
    ) -> Result<Vec<RouteMessage>, Error> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        if let Some(table) = table {
            msg.attributes.push(RouteAttribute::Table(table));
        }
        if let Some(protocol) = protocol {
            msg.header.protocol = RouteProtocol::from(protocol);
        }
        let replies = self.dump(RouteNetlinkMessage::GetRoute(msg))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewRoute(msg) if msg.header.kind == RouteType::Unicast => {
                    Some(msg)
                }
                _ => None,
            })
            .collect())
    }

    /// The route the kernel picks for traffic to `addr`, as `ip route get` shows it: one
    /// `RTM_GETROUTE` request, however many routes the namespace holds. `None` when `addr` is
    /// unreachable.
    pub fn route_get(&mut self, addr: IpAddr) -> Result<Option<Route>, Error> {
        let (family, len) = match addr {
            IpAddr::V4(_) => (AddressFamily::Inet, 32),
            IpAddr::V6(_) => (AddressFamily::Inet6, 128),
        };
        let mut msg = RouteMessage::default();
        msg.header.address_family = family;
        msg.header.destination_prefix_length = len;
        msg.attributes
            .push(RouteAttribute::Destination(route_address(addr, family)?));
        let replies = match self.get(RouteNetlinkMessage::GetRoute(msg)) {
            Err(e) if matches!(e.errno(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => {
                return Ok(None)
            }
            other => other?,
        };
        Ok(replies.into_iter().find_map(|reply| match reply {
            RouteNetlinkMessage::NewRoute(msg) => Route::from_message(msg),
            _ => None,
        }))
    }

    /// Unicast routes of one family in every table.
    pub fn routes_in_all_tables(&mut self, ipv6: bool) -> Result<Vec<Route>, Error> {
        Ok(self
            .unicast_route_messages(ipv6)?
            .into_iter()
            .filter_map(Route::from_message)
            .collect())
    }

    /// Unicast routes of one family in one table (the main table when `table` is `None`).
    /// `ipv6` picks the family.
    pub fn routes(&mut self, ipv6: bool, table: Option<u32>) -> Result<Vec<Route>, Error> {
        let table = table.unwrap_or(RT_TABLE_MAIN);
        // The kernel refuses to filter by a table that does not exist (yet): no routes.
        let messages = match self.unicast_route_messages_in(ipv6, Some(table), None) {
            Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(Vec::new()),
            other => other?,
        };
        // Checked here too: a kernel that ignores the filter sends every table.
        Ok(messages
            .into_iter()
            .filter_map(Route::from_message)
            .filter(|r| r.table == Some(table))
            .collect())
    }
}
