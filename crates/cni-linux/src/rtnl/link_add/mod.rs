//! Creating links: one builder, [`LinkAdd`], for every kind rcni makes (veth with its peer,
//! bridge, IFB, VXLAN, macvlan, ipvlan, 802.1Q vlan, dummy, VRF, WireGuard), sent as one
//! `RTM_NEWLINK` with `NLM_F_CREATE | NLM_F_EXCL` by [`Handle::add_link`] (or
//! [`Handle::add_link_and_get`], which also returns the link as the kernel made it).
//!
//! The shape follows rust-netlink's `rtnetlink` (`LinkMessageBuilder`): a constructor per kind
//! names the link and carries what the kind needs, and settings every link takes (MTU, MAC,
//! transmit queue length, up, parent, target namespace) chain on it:
//!
//! ```no_run
//! # use cni_linux::rtnl::{link_add::{LinkAdd, VethPeer}, Handle};
//! # fn f(h: &mut Handle, pod: &cni_linux::NetNs) -> Result<(), cni_linux::NetlinkError> {
//! // A veth whose peer is made straight inside the pod's namespace.
//! h.add_link(&LinkAdd::veth("veth1234", VethPeer::named("eth0").mtu(1450).netns(pod)).mtu(1450))?;
//! # Ok(()) }
//! ```
//!
//! Tap and tun devices are not made over rtnetlink (the kernel makes them through
//! `/dev/net/tun`): see [`crate::tun`].

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_ECHO, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, InfoVrf,
    IpVlanFlags, IpVlanMode, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{check_name, link_message, Link};
use super::virt::{IpvlanFlag, IpvlanMode, MacvlanMode};
use super::vxlan::{VxlanSpec, MAX_VNI};
use super::{Error, Handle};
use crate::mac::MacAddr;
use crate::netns::NetNs;

/// What kind of link a [`LinkAdd`] makes, with the settings only that kind has.
#[derive(Debug, Clone)]
pub enum LinkKind<'a> {
    /// A veth pair; the builder's settings are those of the local end.
    Veth(VethPeer<'a>),
    /// A bridge, with VLAN filtering on or off.
    Bridge { vlan_filtering: bool },
    /// An intermediate functional block device (traffic shaping of ingress).
    Ifb,
    /// A VXLAN device.
    Vxlan(VxlanSpec),
    /// A macvlan on a parent; `bc_queue_len` 0 keeps the kernel default.
    Macvlan {
        mode: MacvlanMode,
        bc_queue_len: u32,
    },
    /// An ipvlan on a parent.
    Ipvlan { mode: IpvlanMode, flag: IpvlanFlag },
    /// An 802.1Q sub-interface of a parent, with this VLAN id (0-4094).
    Vlan { id: u16 },
    /// A dummy link.
    Dummy,
    /// A VRF device bound to routing table `table` (needs `CONFIG_NET_VRF`).
    Vrf { table: u32 },
    /// A kernel WireGuard link, configured afterwards over generic netlink.
    Wireguard,
}

impl LinkKind<'_> {
    /// Whether the kind is stacked on a parent link ([`LinkAdd::parent`] is then required).
    pub fn needs_parent(&self) -> bool {
        matches!(
            self,
            LinkKind::Macvlan { .. } | LinkKind::Ipvlan { .. } | LinkKind::Vlan { .. }
        )
    }

    /// The `IFLA_INFO_KIND` string.
    pub fn kind_name(&self) -> &'static str {
        match self {
            LinkKind::Veth(_) => "veth",
            LinkKind::Bridge { .. } => "bridge",
            LinkKind::Ifb => "ifb",
            LinkKind::Vxlan(_) => "vxlan",
            LinkKind::Macvlan { .. } => "macvlan",
            LinkKind::Ipvlan { .. } => "ipvlan",
            LinkKind::Vlan { .. } => "vlan",
            LinkKind::Dummy => "dummy",
            LinkKind::Vrf { .. } => "vrf",
            LinkKind::Wireguard => "wireguard",
        }
    }

    /// Refuses settings the kernel would refuse, before anything is sent.
    fn check(&self) -> Result<(), Error> {
        match self {
            LinkKind::Veth(peer) => check_name(&peer.name),
            LinkKind::Vlan { id } if *id > 4094 => Err(Error::InvalidArgument(format!(
                "VLAN id {id} outside 0-4094"
            ))),
            LinkKind::Vxlan(spec) if spec.vni > MAX_VNI => Err(Error::InvalidArgument(format!(
                "VNI {} above the 24-bit maximum {MAX_VNI}",
                spec.vni
            ))),
            _ => Ok(()),
        }
    }

    /// The `IFLA_LINKINFO` attributes: the kind, then its data.
    pub(crate) fn link_info(&self) -> Vec<LinkInfo> {
        let (kind, data) = match self {
            LinkKind::Veth(peer) => (
                InfoKind::Veth,
                Some(InfoData::Veth(InfoVeth::Peer(peer.message()))),
            ),
            LinkKind::Bridge { vlan_filtering } => (
                InfoKind::Bridge,
                vlan_filtering.then(|| InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)])),
            ),
            LinkKind::Ifb => (InfoKind::Ifb, None),
            LinkKind::Vxlan(spec) => (InfoKind::Vxlan, Some(InfoData::Vxlan(spec.info_data()))),
            LinkKind::Macvlan { mode, bc_queue_len } => {
                (InfoKind::MacVlan, Some(macvlan_data(*mode, *bc_queue_len)))
            }
            LinkKind::Ipvlan { mode, flag } => (InfoKind::IpVlan, Some(ipvlan_data(*mode, *flag))),
            LinkKind::Vlan { id } => (
                InfoKind::Vlan,
                Some(InfoData::Vlan(vec![InfoVlan::Id(*id)])),
            ),
            LinkKind::Dummy => (InfoKind::Dummy, None),
            LinkKind::Vrf { table } => (
                InfoKind::Vrf,
                Some(InfoData::Vrf(vec![InfoVrf::TableId(*table)])),
            ),
            LinkKind::Wireguard => (InfoKind::Wireguard, None),
        };
        let mut info = vec![LinkInfo::Kind(kind)];
        info.extend(data.map(LinkInfo::Data));
        info
    }
}

fn macvlan_data(mode: MacvlanMode, bc_queue_len: u32) -> InfoData {
    let mut data = vec![InfoMacVlan::Mode(match mode {
        MacvlanMode::Bridge => MacVlanMode::Bridge,
        MacvlanMode::Private => MacVlanMode::Private,
        MacvlanMode::Vepa => MacVlanMode::Vepa,
        MacvlanMode::Passthru => MacVlanMode::Passthrough,
    })];
    if bc_queue_len > 0 {
        data.push(InfoMacVlan::BcQueueLen(bc_queue_len));
    }
    InfoData::MacVlan(data)
}

fn ipvlan_data(mode: IpvlanMode, flag: IpvlanFlag) -> InfoData {
    let mode = match mode {
        IpvlanMode::L2 => IpVlanMode::L2,
        IpvlanMode::L3 => IpVlanMode::L3,
        IpvlanMode::L3s => IpVlanMode::L3S,
    };
    let flags = match flag {
        IpvlanFlag::Bridge => IpVlanFlags::empty(),
        IpvlanFlag::Private => IpVlanFlags::Private,
        IpvlanFlag::Vepa => IpVlanFlags::Vepa,
    };
    InfoData::IpVlan(vec![InfoIpVlan::Mode(mode), InfoIpVlan::Flags(flags)])
}

/// The far end of a new veth pair: its name and optional MTU, MAC and namespace (it is created
/// there directly, never visible in the namespace of the handle).
#[derive(Debug, Clone)]
pub struct VethPeer<'a> {
    name: String,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    netns: Option<&'a NetNs>,
}

impl<'a> VethPeer<'a> {
    /// A peer called `name`, with the kernel's defaults, beside the local end.
    pub fn named(name: impl Into<String>) -> Self {
        VethPeer {
            name: name.into(),
            mtu: None,
            mac: None,
            netns: None,
        }
    }

    /// Sets the MTU; `None` keeps the kernel default.
    pub fn mtu(mut self, mtu: impl Into<Option<u32>>) -> Self {
        self.mtu = mtu.into();
        self
    }

    /// Sets the hardware address; `None` lets the kernel pick one.
    pub fn mac(mut self, mac: impl Into<Option<MacAddr>>) -> Self {
        self.mac = mac.into();
        self
    }

    /// Creates the peer in `ns`; `None` keeps it beside the local end.
    pub fn netns(mut self, ns: impl Into<Option<&'a NetNs>>) -> Self {
        self.netns = ns.into();
        self
    }

    fn message(&self) -> LinkMessage {
        let mut attrs = common_attributes(&self.name, self.mtu, self.mac);
        if let Some(ns) = self.netns {
            attrs.push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        }
        link_message(0, attrs)
    }
}

/// A request to create one link: [`LinkAdd::new`] or a constructor per kind, then any of the
/// settings below, then [`Handle::add_link`]. Everything goes in one `RTM_NEWLINK`.
#[derive(Debug, Clone)]
pub struct LinkAdd<'a> {
    name: String,
    kind: LinkKind<'a>,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    txqlen: Option<u32>,
    up: bool,
    parent: Option<u32>,
    netns: Option<&'a NetNs>,
}

impl<'a> LinkAdd<'a> {
    /// A link called `name` of `kind`, with the kernel's defaults for everything else.
    pub fn new(name: impl Into<String>, kind: LinkKind<'a>) -> Self {
        LinkAdd {
            name: name.into(),
            kind,
            mtu: None,
            mac: None,
            txqlen: None,
            up: false,
            parent: None,
            netns: None,
        }
    }

    /// A veth pair: this end called `name`, the other `peer`.
    pub fn veth(name: impl Into<String>, peer: VethPeer<'a>) -> Self {
        Self::new(name, LinkKind::Veth(peer))
    }

    /// A bridge, VLAN filtering off (see [`LinkAdd::vlan_filtering`]).
    pub fn bridge(name: impl Into<String>) -> Self {
        Self::new(
            name,
            LinkKind::Bridge {
                vlan_filtering: false,
            },
        )
    }

    /// An IFB device.
    pub fn ifb(name: impl Into<String>) -> Self {
        Self::new(name, LinkKind::Ifb)
    }

    /// A VXLAN device.
    pub fn vxlan(name: impl Into<String>, spec: VxlanSpec) -> Self {
        Self::new(name, LinkKind::Vxlan(spec))
    }

    /// A dummy link.
    pub fn dummy(name: impl Into<String>) -> Self {
        Self::new(name, LinkKind::Dummy)
    }

    /// A kernel WireGuard link.
    pub fn wireguard(name: impl Into<String>) -> Self {
        Self::new(name, LinkKind::Wireguard)
    }

    /// For a bridge: turns VLAN filtering on or off; ignored for other kinds.
    pub fn vlan_filtering(mut self, on: bool) -> Self {
        if let LinkKind::Bridge { vlan_filtering } = &mut self.kind {
            *vlan_filtering = on;
        }
        self
    }

    /// Sets the MTU; `None` keeps the kernel default.
    pub fn mtu(mut self, mtu: impl Into<Option<u32>>) -> Self {
        self.mtu = mtu.into();
        self
    }

    /// Sets the hardware address; `None` lets the kernel pick one.
    pub fn mac(mut self, mac: impl Into<Option<MacAddr>>) -> Self {
        self.mac = mac.into();
        self
    }

    /// Sets the transmit queue length.
    pub fn txqlen(mut self, len: u32) -> Self {
        self.txqlen = Some(len);
        self
    }

    /// Creates the link administratively up.
    pub fn up(mut self) -> Self {
        self.up = true;
        self
    }

    /// The parent link (by index in the handle's namespace) a macvlan, ipvlan or vlan is
    /// stacked on; other kinds must not have one.
    pub fn parent(mut self, index: impl Into<Option<u32>>) -> Self {
        self.parent = index.into();
        self
    }

    /// Creates the link in `ns` instead of the handle's namespace (`IFLA_NET_NS_FD`): it never
    /// appears in the handle's namespace.
    pub fn netns(mut self, ns: impl Into<Option<&'a NetNs>>) -> Self {
        self.netns = ns.into();
        self
    }

    /// The name of the link this request makes.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `RTM_NEWLINK` message, after the checks the kernel would otherwise fail with.
    pub(crate) fn message(&self) -> Result<LinkMessage, Error> {
        check_name(&self.name)?;
        self.kind.check()?;
        let mut attrs = common_attributes(&self.name, self.mtu, self.mac);
        match (self.kind.needs_parent(), self.parent) {
            (true, Some(index)) if index > 0 => attrs.push(LinkAttribute::Link(index)),
            (true, _) => {
                return Err(Error::InvalidArgument(format!(
                    "a {} link needs a parent link",
                    self.kind.kind_name()
                )))
            }
            (false, None) => {}
            (false, Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "a {} link has no parent link",
                    self.kind.kind_name()
                )))
            }
        }
        if let Some(len) = self.txqlen {
            attrs.push(LinkAttribute::TxQueueLen(len));
        }
        if let Some(ns) = self.netns {
            attrs.push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        }
        attrs.push(LinkAttribute::LinkInfo(self.kind.link_info()));
        let mut msg = link_message(0, attrs);
        if self.up {
            msg.header.flags = LinkFlags::Up;
            msg.header.change_mask = LinkFlags::Up;
        }
        Ok(msg)
    }
}

/// The name, MTU and MAC attributes every new link (and a veth peer) starts with.
fn common_attributes(name: &str, mtu: Option<u32>, mac: Option<MacAddr>) -> Vec<LinkAttribute> {
    let mut attrs = vec![LinkAttribute::IfName(name.to_string())];
    attrs.extend(mtu.map(LinkAttribute::Mtu));
    attrs.extend(mac.map(|mac| LinkAttribute::Address(mac.0.to_vec())));
    attrs
}

impl Handle {
    /// Creates the link `request` describes, in one request. Fails with EEXIST (see
    /// [`Error::is_exists`]) if a name is taken (for a VXLAN device, also when the kernel sees
    /// the same VNI, port and local address), and with EOPNOTSUPP when the kernel lacks the
    /// link kind.
    pub fn add_link(&mut self, request: &LinkAdd<'_>) -> Result<(), Error> {
        let msg = request.message()?;
        self.execute(RouteNetlinkMessage::NewLink(msg), NLM_F_CREATE | NLM_F_EXCL)
    }

    /// [`Handle::add_link`] that also returns the link as the kernel made it (for a veth, the
    /// local end), saving the look-up a caller would need for its index. The kernel echoes a
    /// new link to a request with `NLM_F_ECHO` since Linux 6.1; on older kernels (no echo) it
    /// is looked up by name, in a second round trip (so the link must be made in the handle's
    /// namespace).
    pub fn add_link_and_get(&mut self, request: &LinkAdd<'_>) -> Result<Link, Error> {
        let msg = RouteNetlinkMessage::NewLink(request.message()?);
        let reply = self.exchange(msg, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK | NLM_F_ECHO)?;
        let echoed = reply.messages.into_iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(link) => {
                Some(Link::from_message(link)).filter(|l| l.name == request.name)
            }
            _ => None,
        });
        match echoed {
            Some(link) => Ok(link),
            None => self.link_by_name(&request.name),
        }
    }
}

#[cfg(test)]
mod tests;
