//! Neighbour (ARP/NDP) entries: add a permanent entry, list a link's entries.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Error, Handle};
use crate::mac::MacAddr;

/// A neighbour entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Link index.
    pub index: u32,
    /// Protocol address.
    pub ip: IpAddr,
    /// Link-layer address, when known.
    pub mac: Option<MacAddr>,
    /// `NUD_PERMANENT`.
    pub permanent: bool,
}

impl Handle {
    /// Adds (or replaces) a permanent neighbour entry `ip -> mac` on link `index`.
    pub fn add_neighbour(&mut self, index: u32, ip: IpAddr, mac: MacAddr) -> Result<(), Error> {
        let mut msg = NeighbourMessage::default();
        msg.header.family = match ip {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        msg.header.ifindex = index;
        msg.header.state = NeighbourState::Permanent;
        let dst = match ip {
            IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
            IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
        };
        msg.attributes = vec![
            NeighbourAttribute::Destination(dst),
            NeighbourAttribute::LinkLayerAddress(mac.0.to_vec()),
        ];
        self.execute(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Neighbour entries (IPv4 and IPv6) of link `index`.
    pub fn neighbours(&mut self, index: u32) -> Result<Vec<Neighbour>, Error> {
        // Strict checking wants the index filter as NDA_IFINDEX, not in the header.
        let mut request = NeighbourMessage::default();
        request.attributes.push(NeighbourAttribute::IfIndex(index));
        let replies = self.dump(RouteNetlinkMessage::GetNeighbour(request))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewNeighbour(msg) = reply else {
                continue;
            };
            if msg.header.ifindex != index {
                continue;
            }
            let mut ip = None;
            let mut mac = None;
            for attr in &msg.attributes {
                match attr {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                        ip = Some(IpAddr::V4(*v4))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                        ip = Some(IpAddr::V6(*v6))
                    }
                    NeighbourAttribute::LinkLayerAddress(bytes) => mac = MacAddr::from_slice(bytes),
                    _ => {}
                }
            }
            if let Some(ip) = ip {
                out.push(Neighbour {
                    index: msg.header.ifindex,
                    ip,
                    mac,
                    permanent: msg.header.state == NeighbourState::Permanent,
                });
            }
        }
        Ok(out)
    }
}
