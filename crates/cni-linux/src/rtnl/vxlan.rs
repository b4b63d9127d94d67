//! VXLAN links as an overlay node agent makes them: one device per VNI with a local VTEP
//! address, a UDP port, learning off and an underlay device, read back with
//! [`Handle::vxlan_details`] so an agent can tell whether an existing device is the one it wants.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{check_name, link_message, spec_attributes, LinkSpec};
use super::{Error, Handle};

/// The highest VXLAN network identifier (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// Settings of a new VXLAN device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// Name, MTU and MAC of the device.
    pub link: LinkSpec,
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
    fn info_data(&self) -> Vec<InfoVxlan> {
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
    fn from_info_data(data: Vec<InfoVxlan>) -> Self {
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
    /// Creates a VXLAN device. Fails with EEXIST if the name (or, in the kernel's eyes, the same
    /// VNI, port and local address) is taken, and with EOPNOTSUPP when the kernel has no
    /// `CONFIG_VXLAN`.
    pub fn create_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), Error> {
        check_name(&spec.link.name)?;
        if spec.vni > MAX_VNI {
            return Err(Error::InvalidArgument(format!(
                "VNI {} above the 24-bit maximum {MAX_VNI}",
                spec.vni
            )));
        }
        let mut attrs = spec_attributes(&spec.link);
        attrs.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vxlan),
            LinkInfo::Data(InfoData::Vxlan(spec.info_data())),
        ]));
        self.execute(
            RouteNetlinkMessage::NewLink(link_message(0, attrs)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

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

    use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};

    use super::*;
    use crate::rtnl::fake::FakeTransport;

    fn spec() -> VxlanSpec {
        VxlanSpec {
            link: LinkSpec {
                name: "rcni.1".into(),
                mtu: Some(1450),
                mac: None,
            },
            vni: 1,
            local: Some(Ipv4Addr::new(198, 18, 0, 2).into()),
            port: Some(8472),
            learning: false,
            underlay: Some(4),
        }
    }

    #[test]
    fn create_vxlan_is_an_exclusive_newlink_with_vni_vtep_port_learning_and_dev() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_ack();
        h.create_vxlan(&spec()).unwrap();
        let sent = fake.sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(
            sent[0].header.flags,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        );
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) = &sent[0].payload
        else {
            panic!("not RTM_NEWLINK")
        };
        assert!(link
            .attributes
            .contains(&LinkAttribute::IfName("rcni.1".into())));
        assert!(link.attributes.contains(&LinkAttribute::Mtu(1450)));
        let info = link
            .attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::LinkInfo(i) => Some(i.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(info[0], LinkInfo::Kind(InfoKind::Vxlan));
        assert_eq!(
            info[1],
            LinkInfo::Data(InfoData::Vxlan(vec![
                InfoVxlan::Id(1),
                InfoVxlan::Local(Ipv4Addr::new(198, 18, 0, 2)),
                InfoVxlan::Port(8472),
                InfoVxlan::Learning(false),
                InfoVxlan::Link(4),
            ]))
        );
    }

    #[test]
    fn a_vni_above_24_bits_is_refused_before_anything_is_sent() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        let mut s = spec();
        s.vni = MAX_VNI + 1;
        assert!(matches!(h.create_vxlan(&s), Err(Error::InvalidArgument(_))));
        assert!(fake.sent().is_empty());
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
