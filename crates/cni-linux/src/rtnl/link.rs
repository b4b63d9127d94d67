//! Links as the kernel reports them ([`Link`]), look-up and listing, deletion, bridge-port
//! flags and bridge VLANs. Creating a link is [`super::link_add`]'s, changing one
//! [`super::link_change`]'s.

use netlink_packet_core::DefaultNla;
use netlink_packet_route::link::{
    AfSpecBridge, AfSpecInet, AfSpecInet6, AfSpecUnspec, BridgeFlag, BridgeVlanInfo,
    BridgeVlanInfoFlags, InfoBridge, InfoBridgePort, InfoData, InfoKind, InfoPortData,
    LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage, LinkProtoInfoBridge, State,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Error, Handle};
use crate::mac::MacAddr;

// IFLA_BRPORT_* attribute numbers used inside IFLA_PROTINFO (linux/if_link.h).
const IFLA_BRPORT_MODE: u16 = 4;
const IFLA_BRPORT_LEARNING: u16 = 8;
const IFLA_BRPORT_ISOLATED: u16 = 33;

/// The longest interface alias the kernel stores (`IFALIASZ` - 1).
pub const MAX_ALIAS_LEN: usize = 255;

/// A link as reported by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Hardware address, when the link has a 6-byte one.
    pub mac: Option<MacAddr>,
    /// MTU in bytes.
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operational state is `UP`.
    pub oper_up: bool,
    /// Promiscuous mode (`IFF_PROMISC`).
    pub promisc: bool,
    /// Receive all multicast (`IFF_ALLMULTI`).
    pub allmulti: bool,
    /// Transmit queue length (`IFLA_TXQLEN`).
    pub txqlen: u32,
    /// Link kind from `IFLA_INFO_KIND` (`"veth"`, `"bridge"`, ...); `None` for plain devices
    /// such as `lo`.
    pub kind: Option<String>,
    /// Index of the master (bridge) this link is enslaved to.
    pub master: Option<u32>,
    /// `IFLA_LINK`: for a veth, the peer's index (in the peer's namespace).
    pub link: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the namespace id of the peer, when it lives elsewhere.
    pub link_netnsid: Option<i32>,
    /// For a bridge: whether VLAN filtering is on.
    pub vlan_filtering: Option<bool>,
    /// For a bridge port: its port flags.
    pub bridge_port: Option<BridgePortInfo>,
    /// The interface alias (`IFLA_IFALIAS`), which rcni uses to tag the owner of a host link.
    pub alias: Option<String>,
    /// `net.ipv4.conf.<link>.route_localnet`, from the link's `IFLA_AF_SPEC`; `None` when the
    /// link has no IPv4 settings.
    pub ipv4_route_localnet: Option<bool>,
    /// `net.ipv6.conf.<link>.accept_ra`, from the link's `IFLA_AF_SPEC`; `None` when IPv6 is
    /// off on the link.
    pub ipv6_accept_ra: Option<i32>,
}

/// Flags of a bridge port as reported in `IFLA_INFO_SLAVE_DATA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgePortInfo {
    /// Hairpin mode (reflective relay).
    pub hairpin: bool,
    /// Port isolation.
    pub isolated: bool,
    /// MAC learning.
    pub learning: bool,
}

/// Port flags to change with [`Handle::set_bridge_port`]; `None` leaves a flag as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BridgePortOptions {
    /// Hairpin mode.
    pub hairpin: Option<bool>,
    /// Port isolation.
    pub isolated: Option<bool>,
    /// MAC learning.
    pub learning: Option<bool>,
}

/// Flags of a bridge VLAN entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VlanFlags {
    /// This VLAN is the port's PVID (untagged ingress goes to it).
    pub pvid: bool,
    /// Egress frames of this VLAN leave untagged.
    pub untagged: bool,
}

/// One VLAN entry of a bridge port or bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeVlan {
    /// VLAN id.
    pub vid: u16,
    /// Its flags.
    pub flags: VlanFlags,
}

impl Link {
    pub(crate) fn from_message(msg: LinkMessage) -> Self {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            mac: None,
            mtu: 0,
            up: msg.header.flags.contains(LinkFlags::Up),
            oper_up: false,
            promisc: msg.header.flags.contains(LinkFlags::Promisc),
            allmulti: msg.header.flags.contains(LinkFlags::Allmulti),
            txqlen: 0,
            kind: None,
            master: None,
            link: None,
            link_netnsid: None,
            vlan_filtering: None,
            bridge_port: None,
            alias: None,
            ipv4_route_localnet: None,
            ipv6_accept_ra: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(name) => link.name = name,
                LinkAttribute::Address(bytes) => link.mac = MacAddr::from_slice(&bytes),
                LinkAttribute::Mtu(mtu) => link.mtu = mtu,
                LinkAttribute::TxQueueLen(len) => link.txqlen = len,
                LinkAttribute::OperState(state) => link.oper_up = state == State::Up,
                LinkAttribute::Controller(index) => link.master = Some(index),
                LinkAttribute::Link(index) => link.link = Some(index),
                LinkAttribute::LinkNetNsId(id) => link.link_netnsid = Some(id),
                LinkAttribute::LinkInfo(infos) => link.apply_link_info(infos),
                LinkAttribute::IfAlias(alias) if !alias.is_empty() => link.alias = Some(alias),
                LinkAttribute::AfSpecUnspec(specs) => link.apply_af_spec(specs),
                _ => {}
            }
        }
        link
    }

    fn apply_af_spec(&mut self, specs: Vec<AfSpecUnspec>) {
        for spec in specs {
            match spec {
                AfSpecUnspec::Inet(items) => {
                    for item in items {
                        if let AfSpecInet::DevConf(conf) = item {
                            self.ipv4_route_localnet = Some(conf.route_localnet != 0);
                        }
                    }
                }
                AfSpecUnspec::Inet6(items) => {
                    for item in items {
                        if let AfSpecInet6::DevConf(conf) = item {
                            self.ipv6_accept_ra = Some(conf.accept_ra);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn apply_link_info(&mut self, infos: Vec<LinkInfo>) {
        for info in infos {
            match info {
                LinkInfo::Kind(kind) => self.kind = Some(kind.to_string()),
                LinkInfo::Data(InfoData::Bridge(opts)) => {
                    self.vlan_filtering = opts.iter().find_map(|o| match o {
                        InfoBridge::VlanFiltering(on) => Some(*on),
                        _ => None,
                    });
                }
                LinkInfo::PortData(InfoPortData::BridgePort(opts)) => {
                    let mut port = BridgePortInfo::default();
                    for opt in opts {
                        match opt {
                            InfoBridgePort::HairpinMode(on) => port.hairpin = on,
                            InfoBridgePort::Isolated(on) => port.isolated = on,
                            InfoBridgePort::Learning(on) => port.learning = on,
                            _ => {}
                        }
                    }
                    self.bridge_port = Some(port);
                }
                _ => {}
            }
        }
    }
}

pub(crate) fn link_message(index: u32, attributes: Vec<LinkAttribute>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.attributes = attributes;
    msg
}

fn bool_nla(kind: u16, on: bool) -> LinkProtoInfoBridge {
    LinkProtoInfoBridge::Other(DefaultNla::new(kind, vec![u8::from(on)]))
}

/// The kernel stores at most [`MAX_ALIAS_LEN`] bytes of an alias.
pub(crate) fn check_alias(alias: &str) -> Result<(), Error> {
    if alias.len() > MAX_ALIAS_LEN {
        return Err(Error::InvalidArgument(format!(
            "interface alias longer than {MAX_ALIAS_LEN} bytes"
        )));
    }
    Ok(())
}

/// Checks an interface name the way the kernel does (1 to 15 bytes, no `/`, `:` or spaces).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "invalid interface name {name:?}"
        )))
    }
}

impl Handle {
    /// Looks a link up by name. A missing link is [`Error::LinkNotFound`].
    pub fn link_by_name(&mut self, name: &str) -> Result<Link, Error> {
        check_name(name)?;
        let msg = link_message(0, vec![LinkAttribute::IfName(name.to_string())]);
        self.get_one_link(msg, name.to_string())
    }

    /// Looks a link up by index. A missing link is [`Error::LinkNotFound`].
    pub fn link_by_index(&mut self, index: u32) -> Result<Link, Error> {
        if index == 0 {
            return Err(Error::LinkNotFound("index 0".to_string()));
        }
        self.get_one_link(link_message(index, vec![]), format!("index {index}"))
    }

    fn get_one_link(&mut self, msg: LinkMessage, what: String) -> Result<Link, Error> {
        let replies = match self.get(RouteNetlinkMessage::GetLink(msg)) {
            Err(e) if e.is_not_found() => return Err(Error::LinkNotFound(what)),
            other => other?,
        };
        replies
            .into_iter()
            .find_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(link) => Some(Link::from_message(link)),
                _ => None,
            })
            .ok_or_else(|| Error::Unexpected(format!("no link in reply for {what}")))
    }

    /// All links of the namespace.
    pub fn links(&mut self) -> Result<Vec<Link>, Error> {
        self.dump_links(LinkMessage::default())
    }

    /// The links a `RTM_GETLINK` dump request `msg` returns.
    fn dump_links(&mut self, msg: LinkMessage) -> Result<Vec<Link>, Error> {
        let replies = self.dump(RouteNetlinkMessage::GetLink(msg))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(link) => Some(Link::from_message(link)),
                _ => None,
            })
            .collect())
    }

    /// The links of one kind (`"veth"`, `"bridge"`, ...): a dump the kernel filters itself
    /// (an `IFLA_LINKINFO` holding only `IFLA_INFO_KIND`, Linux 4.15 and later), so the links of
    /// other kinds never cross the socket. The kind is checked here too: a kernel that ignores
    /// the filter answers the same, only slower.
    pub fn links_of_kind(&mut self, kind: &str) -> Result<Vec<Link>, Error> {
        let filter = LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::from(kind))]);
        let mut links = self.dump_links(link_message(0, vec![filter]))?;
        links.retain(|link| link.kind.as_deref() == Some(kind));
        Ok(links)
    }

    /// Sends an `AF_BRIDGE` `RTM_SETLINK` (bridge-port flags, bridge VLANs).
    fn set_bridge_link(&mut self, msg: LinkMessage) -> Result<(), Error> {
        self.execute(RouteNetlinkMessage::SetLink(msg), 0)
    }

    /// Deletes a link (for a veth, both ends go).
    pub fn delete_link(&mut self, index: u32) -> Result<(), Error> {
        self.execute(RouteNetlinkMessage::DelLink(link_message(index, vec![])), 0)
    }

    /// Deletes the link called `name` if it exists; returns whether a link was deleted.
    /// Meant for DEL paths, where a missing link is success.
    pub fn delete_link_by_name(&mut self, name: &str) -> Result<bool, Error> {
        let link = match self.link_by_name(name) {
            Ok(link) => link,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        match self.delete_link(link.index) {
            Ok(()) => Ok(true),
            // Removed concurrently (for example with its veth peer).
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Changes bridge-port flags of an enslaved link (`IFLA_PROTINFO` in an `AF_BRIDGE`
    /// request, as `bridge link set` does). Does nothing when no flag is given.
    pub fn set_bridge_port(&mut self, index: u32, opts: &BridgePortOptions) -> Result<(), Error> {
        let mut nlas = Vec::new();
        if let Some(on) = opts.hairpin {
            nlas.push(bool_nla(IFLA_BRPORT_MODE, on));
        }
        if let Some(on) = opts.learning {
            nlas.push(bool_nla(IFLA_BRPORT_LEARNING, on));
        }
        if let Some(on) = opts.isolated {
            nlas.push(bool_nla(IFLA_BRPORT_ISOLATED, on));
        }
        if nlas.is_empty() {
            return Ok(());
        }
        let mut msg = link_message(index, vec![LinkAttribute::ProtoInfoBridge(nlas)]);
        msg.header.interface_family = AddressFamily::Bridge;
        self.set_bridge_link(msg)
    }

    fn bridge_vlan_message(index: u32, vid: u16, flags: VlanFlags, on_self: bool) -> LinkMessage {
        let mut info_flags = BridgeVlanInfoFlags::empty();
        if flags.pvid {
            info_flags |= BridgeVlanInfoFlags::Pvid;
        }
        if flags.untagged {
            info_flags |= BridgeVlanInfoFlags::Untagged;
        }
        let target = if on_self {
            BridgeFlag::LowerDev
        } else {
            BridgeFlag::Controller
        };
        let mut msg = link_message(
            index,
            vec![LinkAttribute::AfSpecBridge(vec![
                AfSpecBridge::Flags(target),
                AfSpecBridge::VlanInfo(BridgeVlanInfo {
                    flags: info_flags,
                    vid,
                }),
            ])],
        );
        msg.header.interface_family = AddressFamily::Bridge;
        msg
    }

    /// Adds VLAN `vid` to a bridge port, or to the bridge device itself when `on_self` is true
    /// (like `bridge vlan add ... [self]`).
    pub fn add_bridge_vlan(
        &mut self,
        index: u32,
        vid: u16,
        flags: VlanFlags,
        on_self: bool,
    ) -> Result<(), Error> {
        check_vid(vid)?;
        let msg = Self::bridge_vlan_message(index, vid, flags, on_self);
        self.set_bridge_link(msg)
    }

    /// Removes VLAN `vid` from a bridge port, or from the bridge itself when `on_self` is true.
    pub fn del_bridge_vlan(&mut self, index: u32, vid: u16, on_self: bool) -> Result<(), Error> {
        check_vid(vid)?;
        // An AF_BRIDGE RTM_DELLINK removes VLAN entries; it never deletes the link.
        let msg = Self::bridge_vlan_message(index, vid, VlanFlags::default(), on_self);
        self.execute(RouteNetlinkMessage::DelLink(msg), 0)
    }

    /// VLAN entries of a bridge port (or of the bridge itself, given the bridge's index).
    pub fn bridge_vlans(&mut self, index: u32) -> Result<Vec<BridgeVlan>, Error> {
        let mut msg = link_message(
            0,
            vec![LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan])],
        );
        msg.header.interface_family = AddressFamily::Bridge;
        let replies = self.dump(RouteNetlinkMessage::GetLink(msg))?;
        let mut vlans = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(link) = reply else {
                continue;
            };
            if link.header.index != index {
                continue;
            }
            for attr in link.attributes {
                let LinkAttribute::AfSpecBridge(specs) = attr else {
                    continue;
                };
                vlans.extend(specs.into_iter().filter_map(|spec| match spec {
                    AfSpecBridge::VlanInfo(info) => Some(BridgeVlan {
                        vid: info.vid,
                        flags: VlanFlags {
                            pvid: info.flags.contains(BridgeVlanInfoFlags::Pvid),
                            untagged: info.flags.contains(BridgeVlanInfoFlags::Untagged),
                        },
                    }),
                    _ => None,
                }));
            }
        }
        Ok(vlans)
    }
}

fn check_vid(vid: u16) -> Result<(), Error> {
    if (1..=4094).contains(&vid) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "VLAN id {vid} outside 1-4094"
        )))
    }
}
