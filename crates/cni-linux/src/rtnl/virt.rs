//! The modes of the links stacked on a parent that the CNI interface plugins make (macvlan,
//! ipvlan; created with [`super::link_add::LinkAdd`]), and the kind-specific settings of an
//! existing macvlan, ipvlan, 802.1Q vlan or VRF link, read back by [`Handle::virt_details`].

use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoMacVlan, InfoVlan, InfoVrf, IpVlanMode, LinkAttribute, LinkInfo,
    MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::link_message;
use super::{Error, Handle};

/// macvlan modes (`MACVLAN_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MacvlanMode {
    /// Ports of one parent talk to each other directly.
    #[default]
    Bridge,
    /// No traffic between ports of one parent.
    Private,
    /// Traffic between ports goes through the external switch.
    Vepa,
    /// The single port takes over the parent.
    Passthru,
}

/// ipvlan modes (`IPVLAN_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpvlanMode {
    #[default]
    L2,
    L3,
    L3s,
}

/// ipvlan flags (`IPVLAN_F_*`); `bridge` is the kernel default (no flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpvlanFlag {
    #[default]
    Bridge,
    Private,
    Vepa,
}

/// Kind-specific settings of an existing link, as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VirtDetails {
    /// For a macvlan: its mode (`None` for a mode this crate does not model, e.g. source).
    pub macvlan_mode: Option<MacvlanMode>,
    /// For an ipvlan: its mode.
    pub ipvlan_mode: Option<IpvlanMode>,
    /// For a vlan: its id.
    pub vlan_id: Option<u16>,
    /// For a VRF: its routing table.
    pub vrf_table: Option<u32>,
}

impl VirtDetails {
    pub(crate) fn from_link_info(infos: Vec<LinkInfo>) -> Self {
        let mut d = VirtDetails::default();
        for info in infos {
            match info {
                LinkInfo::Data(InfoData::MacVlan(opts)) => {
                    d.macvlan_mode = opts.iter().find_map(|o| match o {
                        InfoMacVlan::Mode(MacVlanMode::Bridge) => Some(MacvlanMode::Bridge),
                        InfoMacVlan::Mode(MacVlanMode::Private) => Some(MacvlanMode::Private),
                        InfoMacVlan::Mode(MacVlanMode::Vepa) => Some(MacvlanMode::Vepa),
                        InfoMacVlan::Mode(MacVlanMode::Passthrough) => Some(MacvlanMode::Passthru),
                        _ => None,
                    });
                }
                LinkInfo::Data(InfoData::IpVlan(opts)) => {
                    d.ipvlan_mode = opts.iter().find_map(|o| match o {
                        InfoIpVlan::Mode(IpVlanMode::L2) => Some(IpvlanMode::L2),
                        InfoIpVlan::Mode(IpVlanMode::L3) => Some(IpvlanMode::L3),
                        InfoIpVlan::Mode(IpVlanMode::L3S) => Some(IpvlanMode::L3s),
                        _ => None,
                    });
                }
                LinkInfo::Data(InfoData::Vrf(opts)) => {
                    d.vrf_table = opts.iter().find_map(|o| match o {
                        InfoVrf::TableId(t) => Some(*t),
                        _ => None,
                    });
                }
                LinkInfo::Data(InfoData::Vlan(opts)) => {
                    d.vlan_id = opts.iter().find_map(|o| match o {
                        InfoVlan::Id(id) => Some(*id),
                        _ => None,
                    });
                }
                _ => {}
            }
        }
        d
    }
}

impl Handle {
    /// The kind-specific settings (macvlan/ipvlan mode, VLAN id) of the link with `index`.
    pub fn virt_details(&mut self, index: u32) -> Result<VirtDetails, Error> {
        let replies = match self.get(RouteNetlinkMessage::GetLink(link_message(index, vec![]))) {
            Err(e) if e.is_not_found() => {
                return Err(Error::LinkNotFound(format!("index {index}")))
            }
            other => other?,
        };
        for reply in replies {
            if let RouteNetlinkMessage::NewLink(msg) = reply {
                let info = msg.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::LinkInfo(infos) => Some(infos),
                    _ => None,
                });
                return Ok(VirtDetails::from_link_info(info.unwrap_or_default()));
            }
        }
        Err(Error::Unexpected(format!(
            "no link in reply for index {index}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtnl::fake::FakeTransport;

    #[test]
    fn details_of_a_missing_link_is_not_found() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_errno(19);
        assert!(matches!(h.virt_details(5), Err(Error::LinkNotFound(_))));
    }
}
