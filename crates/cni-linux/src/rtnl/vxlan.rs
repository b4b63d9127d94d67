//! VXLAN links as an overlay node agent makes them: one device per VNI with a local VTEP
//! address, a UDP port, learning off and an underlay device ([`VxlanSpec`], created with
//! [`super::link_add::LinkAdd::vxlan`]), read back with [`Handle::vxlan_details`] so an agent
//! can tell whether an existing device is the one it wants.

use std::net::IpAddr;

use netlink_packet_route::link::{InfoData, InfoVxlan, LinkAttribute, LinkInfo};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::link_message;
use super::{Error, Handle};

/// The highest VXLAN network identifier (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// The VXLAN settings of a new device (its name, MTU and MAC are the [`LinkAdd`]'s).
///
/// [`LinkAdd`]: super::link_add::LinkAdd
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// VXLAN network identifier (`IFLA_VXLAN_ID`), 0 to [`MAX_VNI`].
    pub vni: u32,
    /// Local VTEP address, the source of encapsulated packets (`IFLA_VXLAN_LOCAL[6]`).
    pub local: Option<IpAddr>,
    /// Destination UDP port (`IFLA_VXLAN_PORT`); the kernel default (8472) when `None`.
    pub port: Option<u16>,
    /// Learn remote MACs from received packets (`IFLA_VXLAN_LEARNING`).
    pub learning: bool,
    /// Underlay device index the tunnel is bound to (`IFLA_VXLAN_LINK`).
    pub underlay: Option<u32>,
}

impl VxlanSpec {
    /// The attributes of `IFLA_INFO_DATA`.
    pub(crate) fn info_data(&self) -> Vec<InfoVxlan> {
        let mut data = vec![InfoVxlan::Id(self.vni)];
        match self.local {
            Some(IpAddr::V4(v4)) => data.push(InfoVxlan::Local(v4)),
            Some(IpAddr::V6(v6)) => data.push(InfoVxlan::Local6(v6)),
            None => {}
        }
        if let Some(port) = self.port {
            data.push(InfoVxlan::Port(port));
        }
        data.push(InfoVxlan::Learning(self.learning));
        if let Some(index) = self.underlay {
            data.push(InfoVxlan::Link(index));
        }
        data
    }
}

/// The VXLAN settings of an existing device, as the kernel reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VxlanDetails {
    /// VXLAN network identifier.
    pub vni: u32,
    /// Local VTEP address.
    pub local: Option<IpAddr>,
    /// Destination UDP port.
    pub port: u16,
    /// Learning on.
    pub learning: bool,
    /// Underlay device index.
    pub underlay: Option<u32>,
}

impl VxlanDetails {
    pub(crate) fn from_info_data(data: Vec<InfoVxlan>) -> Self {
        let mut d = VxlanDetails::default();
        for opt in data {
            match opt {
                InfoVxlan::Id(vni) => d.vni = vni,
                InfoVxlan::Local(v4) => d.local = Some(v4.into()),
                InfoVxlan::Local6(v6) => d.local = Some(v6.into()),
                InfoVxlan::Port(port) => d.port = port,
                InfoVxlan::Learning(on) => d.learning = on,
                InfoVxlan::Link(index) if index > 0 => d.underlay = Some(index),
                _ => {}
            }
        }
        d
    }

    /// Whether an existing device has what `spec` asks for (the MTU and MAC aside).
    pub fn matches(&self, spec: &VxlanSpec) -> bool {
        self.vni == spec.vni
            && self.local == spec.local
            && self.port == spec.port.unwrap_or(self.port)
            && self.learning == spec.learning
            && (spec.underlay.is_none() || self.underlay == spec.underlay)
    }
}

impl Handle {
    /// The VXLAN settings of the link with `index`; `None` when it is not a VXLAN device.
    pub fn vxlan_details(&mut self, index: u32) -> Result<Option<VxlanDetails>, Error> {
        let replies = match self.get(RouteNetlinkMessage::GetLink(link_message(index, vec![]))) {
            Err(e) if e.is_not_found() => {
                return Err(Error::LinkNotFound(format!("index {index}")))
            }
            other => other?,
        };
        for reply in replies {
            let RouteNetlinkMessage::NewLink(msg) = reply else {
                continue;
            };
            for attr in msg.attributes {
                let LinkAttribute::LinkInfo(infos) = attr else {
                    continue;
                };
                for info in infos {
                    if let LinkInfo::Data(InfoData::Vxlan(data)) = info {
                        return Ok(Some(VxlanDetails::from_info_data(data)));
                    }
                }
            }
            return Ok(None);
        }
        Err(Error::Unexpected(format!(
            "no link in reply for index {index}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn spec() -> VxlanSpec {
        VxlanSpec {
            vni: 1,
            local: Some(Ipv4Addr::new(198, 18, 0, 2).into()),
            port: Some(8472),
            learning: false,
            underlay: Some(4),
        }
    }

    #[test]
    fn details_match_the_spec_they_were_made_from() {
        let d = VxlanDetails::from_info_data(spec().info_data());
        assert!(d.matches(&spec()));
        let mut other = spec();
        other.vni = 2;
        assert!(!d.matches(&other));
        other = spec();
        other.learning = true;
        assert!(!d.matches(&other));
    }
}
