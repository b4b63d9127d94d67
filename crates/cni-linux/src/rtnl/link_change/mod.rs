//! Changing an existing link: one builder, [`LinkChange`], for everything rcni sets on a link
//! (name, alias, MTU, MAC, up/down, promiscuity, all-multicast, transmit queue length,
//! master, namespace, and the per-interface IPv4/IPv6 settings netlink can change), sent as
//! one `RTM_SETLINK` by [`Handle::change_link`].
//!
//! Settings combined in one change are applied by the kernel in one system call, in its own
//! order whatever the order of the attributes (`do_setlink`: namespace, MAC, MTU, name, master,
//! flags, queue length, alias): so a link that is down can be renamed, tagged with its alias,
//! enslaved and brought up at once, and no process kill can leave it renamed but untagged.
//!
//! ```no_run
//! # use cni_linux::rtnl::{link_change::LinkChange, Handle};
//! # fn f(h: &mut Handle) -> Result<(), cni_linux::NetlinkError> {
//! h.change_link(&LinkChange::of(7).name("veth1234").alias("owner").master(3).up())?;
//! # Ok(()) }
//! ```
//!
//! Bridge-port flags and bridge VLANs are `AF_BRIDGE` requests of their own
//! ([`Handle::set_bridge_port`], [`Handle::add_bridge_vlan`]).

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{DefaultNla, NLA_F_NESTED};
use netlink_packet_route::link::{
    AfSpecInet, AfSpecInet6, AfSpecUnspec, In6AddrGenMode, LinkAttribute, LinkFlags, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{check_alias, check_name, link_message};
use super::{Error, Handle};
use crate::mac::MacAddr;
use crate::netns::NetNs;

// IFLA_INET_CONF inside IFLA_AF_SPEC/AF_INET (linux/if_link.h).
const IFLA_INET_CONF: u16 = 1;

/// A per-interface IPv4 setting (`net.ipv4.conf.<link>.<name>`) that [`LinkChange::ipv4_conf`]
/// changes through netlink. Reading and writing these through `/proc/sys` costs a path lookup
/// that grows with the number of namespaces on the node, netlink does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Conf {
    /// `arp_notify`: announce address changes with gratuitous ARP.
    ArpNotify,
    /// `route_localnet`: route 127.0.0.0/8 to and from this link.
    RouteLocalnet,
}

impl Ipv4Conf {
    /// The kernel's `IPV4_DEVCONF_*` number (linux/ip.h).
    fn devconf_id(self) -> u16 {
        match self {
            Ipv4Conf::ArpNotify => 22,
            Ipv4Conf::RouteLocalnet => 26,
        }
    }
}

/// Which link a [`LinkChange`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Index(u32),
    /// Selected by name (`ifi_index` 0 and `IFLA_IFNAME`): it cannot be renamed then.
    Name(String),
}

/// A change to one link: [`LinkChange::of`] (or [`LinkChange::of_name`]), then any of the
/// settings below, then [`Handle::change_link`]. Settings not given are left as they are.
#[derive(Debug, Clone)]
pub struct LinkChange<'a> {
    target: Target,
    name: Option<String>,
    alias: Option<String>,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    txqlen: Option<u32>,
    /// `Some(0)` releases the link from its master.
    master: Option<u32>,
    netns: Option<&'a NetNs>,
    flags: LinkFlags,
    change_mask: LinkFlags,
    af_spec: Vec<AfSpecUnspec>,
}

impl<'a> LinkChange<'a> {
    fn new(target: Target) -> Self {
        LinkChange {
            target,
            name: None,
            alias: None,
            mtu: None,
            mac: None,
            txqlen: None,
            master: None,
            netns: None,
            flags: LinkFlags::empty(),
            change_mask: LinkFlags::empty(),
            af_spec: Vec::new(),
        }
    }

    /// A change to the link with interface index `index`.
    pub fn of(index: u32) -> Self {
        Self::new(Target::Index(index))
    }

    /// A change to the link called `name`, which saves looking its index up (it cannot be
    /// renamed in the same change).
    pub fn of_name(name: impl Into<String>) -> Self {
        Self::new(Target::Name(name.into()))
    }

    /// Renames the link (the kernel refuses while it is up, and with EEXIST when the name is
    /// taken).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the interface alias; an empty one removes it.
    pub fn alias(mut self, alias: impl Into<String>) -> Self {
        self.alias = Some(alias.into());
        self
    }

    /// Sets the MTU.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Sets the hardware address.
    pub fn mac(mut self, mac: MacAddr) -> Self {
        self.mac = Some(mac);
        self
    }

    /// Sets the transmit queue length.
    pub fn txqlen(mut self, len: u32) -> Self {
        self.txqlen = Some(len);
        self
    }

    /// Enslaves the link to `master` (a bridge or a VRF).
    pub fn master(mut self, master: u32) -> Self {
        self.master = Some(master);
        self
    }

    /// Releases the link from its master.
    pub fn nomaster(mut self) -> Self {
        self.master = Some(0);
        self
    }

    /// Moves the link into `ns`; it disappears from the handle's namespace (and the kernel
    /// refuses with EEXIST when `ns` has a link of the same name).
    pub fn netns(mut self, ns: &'a NetNs) -> Self {
        self.netns = Some(ns);
        self
    }

    fn flag(mut self, flag: LinkFlags, on: bool) -> Self {
        self.change_mask |= flag;
        self.flags.set(flag, on);
        self
    }

    /// Sets the link administratively up.
    pub fn up(self) -> Self {
        self.flag(LinkFlags::Up, true)
    }

    /// Sets the link administratively down.
    pub fn down(self) -> Self {
        self.flag(LinkFlags::Up, false)
    }

    /// Turns promiscuous mode on or off.
    pub fn promisc(self, on: bool) -> Self {
        self.flag(LinkFlags::Promisc, on)
    }

    /// Turns all-multicast reception on or off.
    pub fn allmulti(self, on: bool) -> Self {
        self.flag(LinkFlags::Allmulti, on)
    }

    /// Sets the IPv4 setting `conf` to `value`, as writing `net.ipv4.conf.<link>.<setting>`
    /// would (`IFLA_AF_SPEC`/`AF_INET`/`IFLA_INET_CONF`).
    pub fn ipv4_conf(mut self, conf: Ipv4Conf, value: u32) -> Self {
        // One nested attribute: its type is the IPV4_DEVCONF_* number, its payload the value.
        let mut setting = Vec::with_capacity(8);
        setting.extend_from_slice(&8u16.to_ne_bytes());
        setting.extend_from_slice(&conf.devconf_id().to_ne_bytes());
        setting.extend_from_slice(&value.to_ne_bytes());
        let inet_conf = DefaultNla::new(IFLA_INET_CONF | NLA_F_NESTED, setting);
        self.af_spec
            .push(AfSpecUnspec::Inet(vec![AfSpecInet::Other(inet_conf)]));
        self
    }

    /// Stops the kernel from giving the link an IPv6 link-local (or any autoconfigured)
    /// address when it comes up: `IFLA_INET6_ADDR_GEN_MODE` none, what `ip link set addrgenmode
    /// none` and systemd-networkd's `LinkLocalAddressing=no` do. IPv6 stays on: addresses can
    /// still be added. The kernel refuses the change when it has no IPv6.
    pub fn no_ipv6_link_local(mut self) -> Self {
        self.af_spec
            .push(AfSpecUnspec::Inet6(vec![AfSpecInet6::AddrGenMode(
                In6AddrGenMode::None,
            )]));
        self
    }

    /// The `RTM_SETLINK` message, after the checks the kernel would otherwise fail with.
    pub(crate) fn message(&self) -> Result<LinkMessage, Error> {
        let mut attrs = Vec::new();
        let index = match &self.target {
            Target::Index(index) => *index,
            Target::Name(name) => {
                check_name(name)?;
                if self.name.is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "link {name:?} is selected by name and cannot be renamed in the same change"
                    )));
                }
                attrs.push(LinkAttribute::IfName(name.clone()));
                0
            }
        };
        if let Some(name) = &self.name {
            check_name(name)?;
            attrs.push(LinkAttribute::IfName(name.clone()));
        }
        if let Some(ns) = self.netns {
            attrs.push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        }
        if let Some(alias) = &self.alias {
            check_alias(alias)?;
            attrs.push(LinkAttribute::IfAlias(alias.clone()));
        }
        attrs.extend(self.mtu.map(LinkAttribute::Mtu));
        attrs.extend(self.mac.map(|mac| LinkAttribute::Address(mac.0.to_vec())));
        attrs.extend(self.txqlen.map(LinkAttribute::TxQueueLen));
        attrs.extend(self.master.map(LinkAttribute::Controller));
        if !self.af_spec.is_empty() {
            attrs.push(LinkAttribute::AfSpecUnspec(self.af_spec.clone()));
        }
        let mut msg = link_message(index, attrs);
        msg.header.flags = self.flags;
        msg.header.change_mask = self.change_mask;
        Ok(msg)
    }
}

impl Handle {
    /// Applies `change` in one request. A missing link is an ENODEV kernel error (see
    /// [`Error::is_not_found`]).
    pub fn change_link(&mut self, change: &LinkChange<'_>) -> Result<(), Error> {
        let msg = change.message()?;
        self.execute(RouteNetlinkMessage::SetLink(msg), 0)
    }
}

#[cfg(test)]
mod tests;
