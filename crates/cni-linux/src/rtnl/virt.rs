//! Links stacked on a parent or standing alone, as the CNI interface plugins make them:
//! macvlan, ipvlan, 802.1Q vlan and dummy. Each can be created straight into another namespace
//! (`IFLA_NET_NS_FD`), so it never appears in the namespace of the handle; the parent is
//! named by its index in the handle's namespace.

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVlan, InfoVrf, IpVlanFlags, IpVlanMode,
    LinkAttribute, LinkInfo, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::link::{check_name, link_message, spec_attributes, LinkSpec};
use super::{Error, Handle};
use crate::netns::NetNs;

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

/// What kind of link [`Handle::create_virt_link`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtKind {
    /// A macvlan on a parent; `bc_queue_len` 0 keeps the kernel default.
    Macvlan {
        mode: MacvlanMode,
        bc_queue_len: u32,
    },
    /// An ipvlan on a parent.
    Ipvlan { mode: IpvlanMode, flag: IpvlanFlag },
    /// An 802.1Q sub-interface with this VLAN id (0-4094).
    Vlan { id: u16 },
    /// A dummy link (no parent).
    Dummy,
    /// A VRF device (no parent) bound to routing table `table` (needs `CONFIG_NET_VRF`).
    Vrf { table: u32 },
}

impl VirtKind {
    /// Whether the kind is stacked on a parent link.
    pub fn needs_parent(&self) -> bool {
        !matches!(self, VirtKind::Dummy | VirtKind::Vrf { .. })
    }

    /// The `IFLA_INFO_KIND` string.
    pub fn kind_name(&self) -> &'static str {
        match self {
            VirtKind::Macvlan { .. } => "macvlan",
            VirtKind::Ipvlan { .. } => "ipvlan",
            VirtKind::Vlan { .. } => "vlan",
            VirtKind::Dummy => "dummy",
            VirtKind::Vrf { .. } => "vrf",
        }
    }

    fn link_info(&self) -> Vec<LinkInfo> {
        match *self {
            VirtKind::Macvlan { mode, bc_queue_len } => {
                let mut data = vec![InfoMacVlan::Mode(match mode {
                    MacvlanMode::Bridge => MacVlanMode::Bridge,
                    MacvlanMode::Private => MacVlanMode::Private,
                    MacvlanMode::Vepa => MacVlanMode::Vepa,
                    MacvlanMode::Passthru => MacVlanMode::Passthrough,
                })];
                if bc_queue_len > 0 {
                    data.push(InfoMacVlan::BcQueueLen(bc_queue_len));
                }
                vec![
                    LinkInfo::Kind(InfoKind::MacVlan),
                    LinkInfo::Data(InfoData::MacVlan(data)),
                ]
            }
            VirtKind::Ipvlan { mode, flag } => {
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
                vec![
                    LinkInfo::Kind(InfoKind::IpVlan),
                    LinkInfo::Data(InfoData::IpVlan(vec![
                        InfoIpVlan::Mode(mode),
                        InfoIpVlan::Flags(flags),
                    ])),
                ]
            }
            VirtKind::Vlan { id } => vec![
                LinkInfo::Kind(InfoKind::Vlan),
                LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(id)])),
            ],
            VirtKind::Dummy => vec![LinkInfo::Kind(InfoKind::Dummy)],
            VirtKind::Vrf { table } => vec![
                LinkInfo::Kind(InfoKind::Vrf),
                LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
            ],
        }
    }
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
    fn from_link_info(infos: Vec<LinkInfo>) -> Self {
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
    /// Creates a link of `kind` named by `spec` on the parent with index `parent` (in this
    /// handle's namespace; ignored for dummy), placed into `target` when given, else here.
    /// Fails with EEXIST (see [`Error::is_exists`]) if the name is taken in the target, and
    /// with EOPNOTSUPP when the kernel lacks the link kind.
    pub fn create_virt_link(
        &mut self,
        spec: &LinkSpec,
        kind: VirtKind,
        parent: Option<u32>,
        target: Option<&NetNs>,
    ) -> Result<(), Error> {
        check_name(&spec.name)?;
        if let VirtKind::Vlan { id } = kind {
            if id > 4094 {
                return Err(Error::InvalidArgument(format!(
                    "VLAN id {id} outside 0-4094"
                )));
            }
        }
        let mut attrs = spec_attributes(spec);
        match (kind.needs_parent(), parent) {
            (true, Some(index)) if index > 0 => attrs.push(LinkAttribute::Link(index)),
            (true, _) => {
                return Err(Error::InvalidArgument(format!(
                    "a {} link needs a parent link",
                    kind.kind_name()
                )))
            }
            (false, _) => {}
        }
        if let Some(ns) = target {
            attrs.push(LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()));
        }
        attrs.push(LinkAttribute::LinkInfo(kind.link_info()));
        self.execute(
            RouteNetlinkMessage::NewLink(link_message(0, attrs)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

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
    use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
    use netlink_packet_route::link::LinkMessage;

    use super::*;
    use crate::mac::MacAddr;
    use crate::rtnl::fake::FakeTransport;

    fn handle() -> (Handle, FakeTransport) {
        let fake = FakeTransport::new();
        (Handle::with_transport(Box::new(fake.clone())), fake)
    }

    /// The single NewLink request sent, with its header flags.
    fn sent_newlink(fake: &FakeTransport) -> (u16, LinkMessage) {
        let mut sent = fake.sent();
        assert_eq!(sent.len(), 1);
        let msg = sent.remove(0);
        match msg.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => {
                (msg.header.flags, link)
            }
            other => panic!("unexpected payload {other:?}"),
        }
    }

    fn link_info(link: &LinkMessage) -> Vec<LinkInfo> {
        link.attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::LinkInfo(i) => Some(i.clone()),
                _ => None,
            })
            .expect("IFLA_LINKINFO present")
    }

    #[test]
    fn macvlan_carries_parent_mtu_mac_mode_and_queue_len() {
        let (mut h, fake) = handle();
        fake.push_ack();
        let spec = LinkSpec {
            name: "vethabcdef01".into(),
            mtu: Some(1400),
            mac: Some(MacAddr([2, 0, 0, 0, 0, 9])),
        };
        let kind = VirtKind::Macvlan {
            mode: MacvlanMode::Vepa,
            bc_queue_len: 100,
        };
        h.create_virt_link(&spec, kind, Some(7), None).unwrap();
        let (flags, link) = sent_newlink(&fake);
        assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
        let attrs = &link.attributes;
        assert!(attrs.contains(&LinkAttribute::IfName("vethabcdef01".into())));
        assert!(attrs.contains(&LinkAttribute::Mtu(1400)));
        assert!(attrs.contains(&LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9])));
        assert!(attrs.contains(&LinkAttribute::Link(7)));
        assert!(!attrs.iter().any(|a| matches!(a, LinkAttribute::NetNsFd(_))));
        assert_eq!(
            link_info(&link),
            vec![
                LinkInfo::Kind(InfoKind::MacVlan),
                LinkInfo::Data(InfoData::MacVlan(vec![
                    InfoMacVlan::Mode(MacVlanMode::Vepa),
                    InfoMacVlan::BcQueueLen(100),
                ])),
            ]
        );
    }

    #[test]
    fn every_macvlan_mode_encodes() {
        for (mode, wire) in [
            (MacvlanMode::Bridge, MacVlanMode::Bridge),
            (MacvlanMode::Private, MacVlanMode::Private),
            (MacvlanMode::Vepa, MacVlanMode::Vepa),
            (MacvlanMode::Passthru, MacVlanMode::Passthrough),
        ] {
            let kind = VirtKind::Macvlan {
                mode,
                bc_queue_len: 0,
            };
            assert_eq!(
                kind.link_info()[1],
                LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(wire)]))
            );
            // And decodes back.
            let d = VirtDetails::from_link_info(kind.link_info());
            assert_eq!(d.macvlan_mode, Some(mode));
        }
    }

    #[test]
    fn ipvlan_encodes_mode_and_flags() {
        let kind = VirtKind::Ipvlan {
            mode: IpvlanMode::L3s,
            flag: IpvlanFlag::Private,
        };
        assert_eq!(
            kind.link_info(),
            vec![
                LinkInfo::Kind(InfoKind::IpVlan),
                LinkInfo::Data(InfoData::IpVlan(vec![
                    InfoIpVlan::Mode(IpVlanMode::L3S),
                    InfoIpVlan::Flags(IpVlanFlags::Private),
                ])),
            ]
        );
        assert_eq!(
            VirtDetails::from_link_info(kind.link_info()).ipvlan_mode,
            Some(IpvlanMode::L3s)
        );
    }

    #[test]
    fn vlan_encodes_id_and_rejects_out_of_range() {
        let (mut h, fake) = handle();
        fake.push_ack();
        let kind = VirtKind::Vlan { id: 100 };
        h.create_virt_link(&LinkSpec::named("v0"), kind, Some(3), None)
            .unwrap();
        let (_, link) = sent_newlink(&fake);
        assert_eq!(
            link_info(&link),
            vec![
                LinkInfo::Kind(InfoKind::Vlan),
                LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(100)])),
            ]
        );
        assert_eq!(
            VirtDetails::from_link_info(link_info(&link)).vlan_id,
            Some(100)
        );
        let err = h
            .create_virt_link(
                &LinkSpec::named("v1"),
                VirtKind::Vlan { id: 4095 },
                Some(3),
                None,
            )
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        assert_eq!(fake.sent().len(), 1, "nothing sent for a bad id");
    }

    #[test]
    fn dummy_has_no_parent_and_stacked_kinds_need_one() {
        let (mut h, fake) = handle();
        fake.push_ack();
        h.create_virt_link(&LinkSpec::named("d0"), VirtKind::Dummy, None, None)
            .unwrap();
        let (_, link) = sent_newlink(&fake);
        assert!(!link
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::Link(_))));
        assert_eq!(link_info(&link), vec![LinkInfo::Kind(InfoKind::Dummy)]);

        let kind = VirtKind::Macvlan {
            mode: MacvlanMode::Bridge,
            bc_queue_len: 0,
        };
        for parent in [None, Some(0)] {
            let err = h
                .create_virt_link(&LinkSpec::named("m0"), kind, parent, None)
                .unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)));
        }
        let err = h
            .create_virt_link(&LinkSpec::named("bad/name"), VirtKind::Dummy, None, None)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
    }

    #[test]
    fn target_namespace_is_sent_as_fd_and_kernel_errors_surface() {
        let (mut h, fake) = handle();
        let ns = NetNs::current().unwrap();
        fake.push_errno(95);
        let err = h
            .create_virt_link(
                &LinkSpec::named("i0"),
                VirtKind::Ipvlan {
                    mode: IpvlanMode::L2,
                    flag: IpvlanFlag::Bridge,
                },
                Some(2),
                Some(&ns),
            )
            .unwrap_err();
        assert_eq!(err.errno(), Some(95));
        let (_, link) = sent_newlink(&fake);
        assert!(link
            .attributes
            .contains(&LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd())));
    }

    #[test]
    fn vrf_encodes_its_table_without_a_parent() {
        let (mut h, fake) = handle();
        fake.push_ack();
        let kind = VirtKind::Vrf { table: 1001 };
        assert!(!kind.needs_parent());
        assert_eq!(kind.kind_name(), "vrf");
        h.create_virt_link(&LinkSpec::named("red"), kind, None, None)
            .unwrap();
        let (flags, link) = sent_newlink(&fake);
        assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
        assert!(!link
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::Link(_))));
        assert_eq!(
            link_info(&link),
            vec![
                LinkInfo::Kind(InfoKind::Vrf),
                LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(1001)])),
            ]
        );
        assert_eq!(
            VirtDetails::from_link_info(link_info(&link)).vrf_table,
            Some(1001)
        );
    }

    #[test]
    fn details_of_a_missing_link_is_not_found() {
        let (mut h, fake) = handle();
        fake.push_errno(19);
        assert!(matches!(h.virt_details(5), Err(Error::LinkNotFound(_))));
    }
}
