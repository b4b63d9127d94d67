//! Routes straight through a device, with no gateway (`ip route replace 198.19.2.0/24 dev
//! rcni-wg proto 124`): what a point-to-point tunnel such as WireGuard needs per remote subnet,
//! tagged with a routing protocol number so that the agent lists only its own.

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::{ip_of, RT_TABLE_MAIN};
use super::{Error, Handle};

/// A main-table route to `dst` through device `oif` (link scope for IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRoute {
    /// Destination network.
    pub dst: IpNet,
    /// Output device index.
    pub oif: u32,
    /// `rtm_protocol`, the owner tag.
    pub protocol: u8,
}

impl DeviceRoute {
    fn to_message(self) -> RouteMessage {
        let (family, scope) = match self.dst {
            IpNet::V4(_) => (AddressFamily::Inet, RouteScope::Link),
            // The kernel keeps every IPv6 route at universe scope.
            IpNet::V6(_) => (AddressFamily::Inet6, RouteScope::Universe),
        };
        let mut msg = RouteMessage::default();
        msg.header = RouteHeader {
            address_family: family,
            destination_prefix_length: self.dst.prefix_len(),
            protocol: RouteProtocol::from(self.protocol),
            scope,
            kind: RouteType::Unicast,
            table: RouteHeader::RT_TABLE_MAIN,
            ..RouteHeader::default()
        };
        msg.attributes = vec![
            RouteAttribute::Destination(self.dst.network().into()),
            RouteAttribute::Oif(self.oif),
        ];
        msg
    }

    /// The route a message describes, if it is one: main table, a device, no gateway.
    fn from_message(msg: RouteMessage) -> Option<Self> {
        let plen = msg.header.destination_prefix_length;
        let mut dst = None;
        let mut oif = None;
        let mut table = u32::from(msg.header.table);
        for attr in msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst = ip_of(a),
                RouteAttribute::Oif(i) => oif = Some(i),
                RouteAttribute::Table(t) => table = t,
                RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_) => return None,
                _ => {}
            }
        }
        (table == RT_TABLE_MAIN).then_some(())?;
        Some(DeviceRoute {
            dst: IpNet::new(dst?, plen).ok()?,
            oif: oif?,
            protocol: u8::from(msg.header.protocol),
        })
    }
}

impl Handle {
    /// Adds or replaces the route to `route.dst` in the main table.
    pub fn replace_device_route(&mut self, route: &DeviceRoute) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::NewRoute(route.to_message()),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes exactly this route (destination, device and protocol must match).
    pub fn delete_device_route(&mut self, route: &DeviceRoute) -> Result<(), Error> {
        let mut msg = route.to_message();
        msg.header.scope = RouteScope::NoWhere;
        self.execute(RouteNetlinkMessage::DelRoute(msg), 0)
    }

    /// The main-table device routes (no gateway) of one family whose protocol is `protocol`
    /// (the kernel filters the dump by protocol; checked here too).
    pub fn device_routes(&mut self, ipv6: bool, protocol: u8) -> Result<Vec<DeviceRoute>, Error> {
        Ok(self
            .unicast_route_messages_in(ipv6, None, Some(protocol))?
            .into_iter()
            .filter(|msg| u8::from(msg.header.protocol) == protocol)
            .filter_map(DeviceRoute::from_message)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NetlinkPayload;
    use netlink_packet_route::route::RouteAddress;

    use super::*;
    use crate::rtnl::fake::FakeTransport;

    #[test]
    fn a_device_route_has_no_gateway_reads_back_and_skips_gateway_routes() {
        let fake = FakeTransport::new();
        fake.push_ack();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        let route = DeviceRoute {
            dst: "198.19.2.0/24".parse().unwrap(),
            oif: 7,
            protocol: 124,
        };
        h.replace_device_route(&route).unwrap();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(m)) =
            &fake.sent()[0].payload
        else {
            panic!("not RTM_NEWROUTE")
        };
        assert_eq!(m.header.scope, RouteScope::Link);
        assert!(!m
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Gateway(_))));
        let mut v6 = DeviceRoute {
            dst: "2001:2:1:2::/64".parse().unwrap(),
            ..route
        }
        .to_message();
        assert_eq!(v6.header.scope, RouteScope::Universe);
        let mut via = route.to_message();
        via.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(
                "198.18.0.12".parse().unwrap(),
            )));
        let mut other = route.to_message();
        other.header.protocol = RouteProtocol::Boot;
        v6.header.protocol = RouteProtocol::from(124);
        fake.push_dump(vec![
            RouteNetlinkMessage::NewRoute(route.to_message()),
            RouteNetlinkMessage::NewRoute(via),
            RouteNetlinkMessage::NewRoute(other),
        ]);
        assert_eq!(h.device_routes(false, 124).unwrap(), vec![route]);
    }
}
