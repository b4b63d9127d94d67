//! What an overlay node agent programs for each remote node, beyond links and addresses:
//!
//! - bridge FDB entries on a VXLAN device (`MAC -> remote VTEP`, `NTF_SELF`, permanent), the
//!   kernel object `bridge fdb add MAC dev rcni.1 dst IP` makes;
//! - removal of a neighbour entry (the permanent ones [`Handle::add_neighbour`] adds);
//! - routes through a next hop on a given device, optionally `onlink` (the gateway need not be
//!   on a connected subnet), tagged with a routing protocol number so that the agent can list
//!   the routes it made and never touch anyone else's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::{ip_of, RT_TABLE_MAIN};
use super::{Error, Handle};
use crate::mac::MacAddr;

/// A permanent forwarding entry of a VXLAN device: frames for `mac` go to the VTEP `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FdbEntry {
    /// Remote link-layer address.
    pub mac: MacAddr,
    /// Remote VTEP address (`NDA_DST`).
    pub dst: IpAddr,
}

/// A route to `dst` through the gateway `via` on device `oif`, in the main table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHopRoute {
    /// Destination network.
    pub dst: IpNet,
    /// Gateway.
    pub via: IpAddr,
    /// Output device index.
    pub oif: u32,
    /// `RTNH_F_ONLINK`: use the gateway even though no connected subnet covers it.
    pub onlink: bool,
    /// `rtm_protocol`, the owner tag.
    pub protocol: u8,
}

fn family_of(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn fdb_message(index: u32, entry: &FdbEntry) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Bridge;
    msg.header.ifindex = index;
    msg.header.state = NeighbourState::Permanent;
    msg.header.flags = NeighbourFlags::Own;
    msg.attributes = vec![
        NeighbourAttribute::LinkLayerAddress(entry.mac.0.to_vec()),
        NeighbourAttribute::Destination(entry.dst.into()),
    ];
    msg
}

/// `NDA_DST` of a bridge-family message arrives undecoded: 4 or 16 bytes.
fn fdb_dst(addr: &NeighbourAddress) -> Option<IpAddr> {
    match addr {
        NeighbourAddress::Inet(v4) => Some((*v4).into()),
        NeighbourAddress::Inet6(v6) => Some((*v6).into()),
        NeighbourAddress::Other(bytes) => match bytes.len() {
            4 => Some(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into()),
            16 => {
                let octets: [u8; 16] = bytes.as_slice().try_into().ok()?;
                Some(Ipv6Addr::from(octets).into())
            }
            _ => None,
        },
        _ => None,
    }
}

impl NextHopRoute {
    fn to_message(self) -> Result<RouteMessage, Error> {
        let family = match self.dst {
            IpNet::V4(_) => AddressFamily::Inet,
            IpNet::V6(_) => AddressFamily::Inet6,
        };
        if family_of(self.via) != family {
            return Err(Error::InvalidArgument(format!(
                "gateway {} does not match the family of {}",
                self.via, self.dst
            )));
        }
        let mut msg = RouteMessage::default();
        msg.header = RouteHeader {
            address_family: family,
            destination_prefix_length: self.dst.prefix_len(),
            protocol: RouteProtocol::from(self.protocol),
            scope: RouteScope::Universe,
            kind: RouteType::Unicast,
            table: RouteHeader::RT_TABLE_MAIN,
            flags: if self.onlink {
                RouteFlags::Onlink
            } else {
                RouteFlags::empty()
            },
            ..RouteHeader::default()
        };
        msg.attributes = vec![
            RouteAttribute::Destination(self.dst.network().into()),
            RouteAttribute::Gateway(self.via.into()),
            RouteAttribute::Oif(self.oif),
        ];
        Ok(msg)
    }

    fn from_message(msg: RouteMessage) -> Option<Self> {
        let plen = msg.header.destination_prefix_length;
        let mut dst = None;
        let mut via = None;
        let mut oif = None;
        let mut table = u32::from(msg.header.table);
        for attr in msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst = ip_of(a),
                RouteAttribute::Gateway(a) => via = ip_of(a),
                RouteAttribute::Oif(i) => oif = Some(i),
                RouteAttribute::Table(t) => table = t,
                _ => {}
            }
        }
        if table != RT_TABLE_MAIN {
            return None;
        }
        Some(NextHopRoute {
            dst: IpNet::new(dst?, plen).ok()?,
            via: via?,
            oif: oif?,
            onlink: msg.header.flags.contains(RouteFlags::Onlink),
            protocol: u8::from(msg.header.protocol),
        })
    }
}

impl Handle {
    /// Adds or replaces the permanent FDB entry `entry.mac -> entry.dst` on the VXLAN device
    /// `index`.
    pub fn replace_fdb_entry(&mut self, index: u32, entry: &FdbEntry) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::NewNeighbour(fdb_message(index, entry)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes the FDB entry `entry` from device `index`; a missing entry is an `ENOENT`
    /// kernel error.
    pub fn delete_fdb_entry(&mut self, index: u32, entry: &FdbEntry) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::DelNeighbour(fdb_message(index, entry)),
            0,
        )
    }

    /// The permanent FDB entries with a remote destination on device `index`.
    pub fn fdb_entries(&mut self, index: u32) -> Result<Vec<FdbEntry>, Error> {
        let mut request = NeighbourMessage::default();
        request.header.family = AddressFamily::Bridge;
        request.attributes.push(NeighbourAttribute::IfIndex(index));
        let replies = self.dump(RouteNetlinkMessage::GetNeighbour(request))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewNeighbour(msg) = reply else {
                continue;
            };
            if msg.header.ifindex != index || msg.header.state != NeighbourState::Permanent {
                continue;
            }
            let mut mac = None;
            let mut dst = None;
            for attr in &msg.attributes {
                match attr {
                    NeighbourAttribute::LinkLayerAddress(b) => mac = MacAddr::from_slice(b),
                    NeighbourAttribute::Destination(a) => dst = fdb_dst(a),
                    _ => {}
                }
            }
            if let (Some(mac), Some(dst)) = (mac, dst) {
                out.push(FdbEntry { mac, dst });
            }
        }
        Ok(out)
    }

    /// Deletes the neighbour entry for `ip` on link `index`; a missing entry is an `ENOENT`
    /// kernel error.
    pub fn delete_neighbour(&mut self, index: u32, ip: IpAddr) -> Result<(), Error> {
        let mut msg = NeighbourMessage::default();
        msg.header.family = family_of(ip);
        msg.header.ifindex = index;
        msg.attributes = vec![NeighbourAttribute::Destination(ip.into())];
        self.execute(RouteNetlinkMessage::DelNeighbour(msg), 0)
    }

    /// Adds or replaces the route to `route.dst` in the main table.
    pub fn replace_nexthop_route(&mut self, route: &NextHopRoute) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::NewRoute(route.to_message()?),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes exactly this route (destination, gateway, device and protocol must match).
    pub fn delete_nexthop_route(&mut self, route: &NextHopRoute) -> Result<(), Error> {
        let mut msg = route.to_message()?;
        msg.header.scope = RouteScope::NoWhere;
        msg.header.flags = RouteFlags::empty();
        self.execute(RouteNetlinkMessage::DelRoute(msg), 0)
    }

    /// The main-table routes through a gateway whose protocol is `protocol`, of one family.
    /// The kernel filters the dump by protocol, so its cost follows the routes of that
    /// protocol (one per remote node for the node agent), not the node's pod routes.
    pub fn nexthop_routes(&mut self, ipv6: bool, protocol: u8) -> Result<Vec<NextHopRoute>, Error> {
        Ok(self
            .unicast_route_messages_in(ipv6, None, Some(protocol))?
            .into_iter()
            .filter(|msg| u8::from(msg.header.protocol) == protocol)
            .filter_map(NextHopRoute::from_message)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};

    use netlink_packet_route::route::RouteAddress;

    use super::*;
    use crate::rtnl::fake::FakeTransport;

    fn handle() -> (Handle, FakeTransport) {
        let fake = FakeTransport::new();
        (Handle::with_transport(Box::new(fake.clone())), fake)
    }

    fn entry() -> FdbEntry {
        FdbEntry {
            mac: MacAddr([0x0e, 1, 2, 3, 4, 5]),
            dst: Ipv4Addr::new(198, 18, 0, 3).into(),
        }
    }

    #[test]
    fn fdb_entry_is_a_bridge_family_permanent_self_neighbour_with_nda_dst() {
        let (mut h, fake) = handle();
        fake.push_ack();
        h.replace_fdb_entry(9, &entry()).unwrap();
        let sent = fake.sent();
        assert_eq!(
            sent[0].header.flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
        );
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n)) = &sent[0].payload
        else {
            panic!("not RTM_NEWNEIGH")
        };
        assert_eq!(n.header.family, AddressFamily::Bridge);
        assert_eq!(n.header.ifindex, 9);
        assert_eq!(n.header.state, NeighbourState::Permanent);
        assert_eq!(n.header.flags, NeighbourFlags::Own);
        assert!(n
            .attributes
            .contains(&NeighbourAttribute::LinkLayerAddress(vec![
                0x0e, 1, 2, 3, 4, 5
            ])));
        // Decoded back as a bridge-family message, NDA_DST is raw bytes.
        let dst = n.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::Destination(d) => fdb_dst(d),
            _ => None,
        });
        assert_eq!(dst, Some(Ipv4Addr::new(198, 18, 0, 3).into()));
    }

    #[test]
    fn bridge_family_dst_bytes_decode_to_addresses() {
        assert_eq!(
            fdb_dst(&NeighbourAddress::Other(vec![198, 18, 0, 3])),
            Some(Ipv4Addr::new(198, 18, 0, 3).into())
        );
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(
            fdb_dst(&NeighbourAddress::Other(v6.octets().to_vec())),
            Some(v6.into())
        );
        assert_eq!(fdb_dst(&NeighbourAddress::Other(vec![1, 2])), None);
    }

    #[test]
    fn nexthop_routes_ask_the_kernel_for_one_protocol_and_still_check_it() {
        let (mut h, fake) = handle();
        let ours = NextHopRoute {
            dst: "198.19.2.0/24".parse().unwrap(),
            via: Ipv4Addr::new(198, 18, 0, 2).into(),
            oif: 5,
            onlink: false,
            protocol: 0x7c,
        };
        let theirs = NextHopRoute {
            protocol: 4,
            dst: "198.19.3.0/24".parse().unwrap(),
            ..ours
        };
        // What an old kernel that ignores the filter would send: both routes.
        let reply = |r: &NextHopRoute| RouteNetlinkMessage::NewRoute(r.to_message().unwrap());
        fake.push_dump(vec![reply(&ours), reply(&theirs)]);
        assert_eq!(h.nexthop_routes(false, 0x7c).unwrap(), vec![ours]);
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetRoute(q)) =
            &fake.sent()[0].payload
        else {
            panic!("not RTM_GETROUTE")
        };
        assert_eq!(u8::from(q.header.protocol), 0x7c);
        assert_eq!(q.header.address_family, AddressFamily::Inet);
    }

    #[test]
    fn onlink_route_carries_the_flag_the_protocol_and_replaces() {
        let (mut h, fake) = handle();
        fake.push_ack();
        let route = NextHopRoute {
            dst: "198.19.2.0/24".parse().unwrap(),
            via: Ipv4Addr::new(198, 19, 2, 0).into(),
            oif: 5,
            onlink: true,
            protocol: 0x7c,
        };
        h.replace_nexthop_route(&route).unwrap();
        let sent = fake.sent();
        assert_eq!(
            sent[0].header.flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
        );
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) = &sent[0].payload
        else {
            panic!("not RTM_NEWROUTE")
        };
        assert_eq!(r.header.flags, RouteFlags::Onlink);
        assert_eq!(u8::from(r.header.protocol), 0x7c);
        assert_eq!(r.header.destination_prefix_length, 24);
        assert!(r.attributes.contains(&RouteAttribute::Oif(5)));
        assert!(r
            .attributes
            .contains(&RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(
                198, 19, 2, 0
            )))));
        // and it reads back as the same route
        assert_eq!(NextHopRoute::from_message(r.clone()), Some(route));
    }

    #[test]
    fn a_gateway_of_the_other_family_is_refused() {
        let (mut h, fake) = handle();
        let route = NextHopRoute {
            dst: "198.19.2.0/24".parse().unwrap(),
            via: "2001:db8::1".parse().unwrap(),
            oif: 5,
            onlink: false,
            protocol: 0x7c,
        };
        assert!(matches!(
            h.replace_nexthop_route(&route),
            Err(Error::InvalidArgument(_))
        ));
        assert!(fake.sent().is_empty());
    }
}
