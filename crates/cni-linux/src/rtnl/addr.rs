//! Address operations: list, add (IPv4/IPv6, optionally without DAD), delete.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Error, Handle};

/// An address configured on a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Index of the link carrying the address.
    pub index: u32,
    /// The address with its prefix length (host bits kept, as in `198.18.0.2/24`).
    pub addr: IpNet,
    /// Address scope (`0` universe, `253` link, `254` host).
    pub scope: u8,
    /// Still tentative (IPv6 DAD in progress).
    pub tentative: bool,
    /// IPv6 duplicate address detection failed.
    pub dad_failed: bool,
}

/// Options of [`Handle::add_address`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddAddressOptions {
    /// Skip IPv6 duplicate address detection (`IFA_F_NODAD`).
    pub nodad: bool,
}

fn family_of(addr: &IpNet) -> AddressFamily {
    match addr {
        IpNet::V4(_) => AddressFamily::Inet,
        IpNet::V6(_) => AddressFamily::Inet6,
    }
}

/// The message identifying `addr` on link `index`, as used for add and delete.
fn address_message(index: u32, addr: &IpNet) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = family_of(addr);
    msg.header.prefix_len = addr.prefix_len();
    msg.header.index = index;
    msg.attributes.push(AddressAttribute::Local(addr.addr()));
    msg.attributes.push(AddressAttribute::Address(addr.addr()));
    msg
}

/// The IPv4 broadcast address for prefixes shorter than /31, as the Go netlink library adds it.
fn ipv4_broadcast(addr: &IpNet) -> Option<Ipv4Addr> {
    match addr {
        IpNet::V4(net) if net.prefix_len() < 31 => Some(Ipv4Net::broadcast(net)),
        _ => None,
    }
}

impl Address {
    fn from_message(msg: AddressMessage) -> Option<Self> {
        let mut local = None;
        let mut address = None;
        let mut flags = AddressFlags::from_bits_retain(u32::from(msg.header.flags.bits()));
        for attr in msg.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(ip),
                AddressAttribute::Address(ip) => address = Some(ip),
                AddressAttribute::Flags(f) => flags = f,
                _ => {}
            }
        }
        // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point
        // links, so prefer IFA_LOCAL when both are present.
        let ip: IpAddr = local.or(address)?;
        let addr = IpNet::new(ip, msg.header.prefix_len).ok()?;
        Some(Address {
            index: msg.header.index,
            addr,
            scope: u8::from(msg.header.scope),
            tentative: flags.contains(AddressFlags::Tentative),
            dad_failed: flags.contains(AddressFlags::Dadfailed),
        })
    }
}

impl Handle {
    /// Addresses of link `index`, or of every link when `index` is `None`, both families.
    pub fn addresses(&mut self, index: Option<u32>) -> Result<Vec<Address>, Error> {
        let mut request = AddressMessage::default();
        // With strict checking the kernel filters the dump by index itself.
        request.header.index = index.unwrap_or(0);
        let replies = self.dump(RouteNetlinkMessage::GetAddress(request))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewAddress(msg) => Address::from_message(msg),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.index == i))
            .collect())
    }

    /// Adds `addr` (with its prefix length) to link `index`. Fails with EEXIST if present.
    pub fn add_address(
        &mut self,
        index: u32,
        addr: IpNet,
        opts: AddAddressOptions,
    ) -> Result<(), Error> {
        let mut msg = address_message(index, &addr);
        if let Some(brd) = ipv4_broadcast(&addr) {
            msg.attributes.push(AddressAttribute::Broadcast(brd));
        }
        if opts.nodad {
            msg.header.flags = AddressHeaderFlags::Nodad;
        }
        msg.header.scope = AddressScope::Universe;
        self.execute(
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Removes `addr` (with its prefix length) from link `index`.
    pub fn delete_address(&mut self, index: u32, addr: IpNet) -> Result<(), Error> {
        self.execute(
            RouteNetlinkMessage::DelAddress(address_message(index, &addr)),
            0,
        )
    }
}
