//! Encoding of [`LinkAdd`] requests, through the fake transport.

use std::net::Ipv4Addr;

use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, InfoVrf,
    InfoVxlan, IpVlanFlags, IpVlanMode, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
    MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::*;
use crate::rtnl::fake::FakeTransport;
use crate::rtnl::virt::VirtDetails;
use crate::rtnl::vxlan::VxlanDetails;

fn handle() -> (Handle, FakeTransport) {
    let fake = FakeTransport::new();
    (Handle::with_transport(Box::new(fake.clone())), fake)
}

/// Sends `request` and returns the single `RTM_NEWLINK` it made, with its header flags.
fn sent(request: &LinkAdd<'_>) -> (u16, LinkMessage) {
    let (mut h, fake) = handle();
    fake.push_ack();
    h.add_link(request).unwrap();
    let mut sent = fake.sent();
    assert_eq!(sent.len(), 1, "one request");
    let msg = sent.remove(0);
    match msg.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => {
            (msg.header.flags, link)
        }
        other => panic!("not RTM_NEWLINK: {other:?}"),
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

fn has_parent(link: &LinkMessage) -> bool {
    link.attributes
        .iter()
        .any(|a| matches!(a, LinkAttribute::Link(_)))
}

/// The error `request` is refused with, before anything is sent.
fn refused(request: &LinkAdd<'_>) -> Error {
    let (mut h, fake) = handle();
    let err = h.add_link(request).unwrap_err();
    assert!(fake.sent().is_empty(), "nothing sent for {request:?}");
    err
}

#[test]
fn every_setting_composes_into_one_exclusive_newlink() {
    let ns = NetNs::current().unwrap();
    let request = LinkAdd::macvlan_for_test()
        .mtu(1400)
        .mac(MacAddr([2, 0, 0, 0, 0, 9]))
        .txqlen(500)
        .up()
        .parent(7)
        .netns(&ns);
    let (flags, link) = sent(&request);
    assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    assert_eq!(link.header.index, 0);
    assert_eq!(link.header.flags, LinkFlags::Up);
    assert_eq!(link.header.change_mask, LinkFlags::Up);
    let attrs = &link.attributes;
    assert!(attrs.contains(&LinkAttribute::IfName("vethabcdef01".into())));
    assert!(attrs.contains(&LinkAttribute::Mtu(1400)));
    assert!(attrs.contains(&LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9])));
    assert!(attrs.contains(&LinkAttribute::TxQueueLen(500)));
    assert!(attrs.contains(&LinkAttribute::Link(7)));
    assert!(attrs.contains(&LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd())));
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

impl LinkAdd<'static> {
    fn macvlan_for_test() -> Self {
        LinkAdd::new(
            "vethabcdef01",
            LinkKind::Macvlan {
                mode: MacvlanMode::Vepa,
                bc_queue_len: 100,
            },
        )
    }
}

#[test]
fn settings_not_given_are_not_sent() {
    let (_, link) = sent(&LinkAdd::dummy("d0"));
    assert_eq!(link.attributes.len(), 2, "{:?}", link.attributes);
    assert!(link.header.change_mask.is_empty());
    assert!(!has_parent(&link));
    assert_eq!(link_info(&link), vec![LinkInfo::Kind(InfoKind::Dummy)]);
    // `None` from a caller's optional setting is the same as not setting it.
    let (_, same) = sent(
        &LinkAdd::dummy("d0")
            .mtu(None)
            .mac(None)
            .netns(None)
            .parent(None),
    );
    assert_eq!(same, link);
}

#[test]
fn veth_peer_carries_its_own_name_mtu_mac_and_namespace() {
    let ns = NetNs::current().unwrap();
    let peer = VethPeer::named("eth0")
        .mtu(1450)
        .mac(MacAddr([0x0a, 0x58, 0, 0, 0, 5]))
        .netns(&ns);
    let (_, link) = sent(&LinkAdd::veth("veth1234", peer).mtu(1450));
    assert!(link
        .attributes
        .contains(&LinkAttribute::IfName("veth1234".into())));
    assert!(!link
        .attributes
        .iter()
        .any(|a| matches!(a, LinkAttribute::NetNsFd(_))));
    let info = link_info(&link);
    assert_eq!(info[0], LinkInfo::Kind(InfoKind::Veth));
    let LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))) = &info[1] else {
        panic!("no veth peer: {info:?}")
    };
    assert_eq!(
        peer.attributes,
        vec![
            LinkAttribute::IfName("eth0".into()),
            LinkAttribute::Mtu(1450),
            LinkAttribute::Address(vec![0x0a, 0x58, 0, 0, 0, 5]),
            LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()),
        ]
    );
    assert!(matches!(
        refused(&LinkAdd::veth("v0", VethPeer::named("bad/name"))),
        Error::InvalidArgument(_)
    ));
}

#[test]
fn bridge_vlan_filtering_is_sent_only_when_on() {
    let (_, plain) = sent(&LinkAdd::bridge("cni0"));
    assert_eq!(link_info(&plain), vec![LinkInfo::Kind(InfoKind::Bridge)]);
    let (_, filtering) = sent(&LinkAdd::bridge("cni0").vlan_filtering(true));
    assert_eq!(
        link_info(&filtering)[1],
        LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)]))
    );
}

#[test]
fn ifb_is_up_with_its_queue_length() {
    let (_, link) = sent(&LinkAdd::ifb("bwp0").mtu(1400).txqlen(1000).up());
    assert_eq!(link.header.flags, LinkFlags::Up);
    assert!(link.attributes.contains(&LinkAttribute::TxQueueLen(1000)));
    assert_eq!(link_info(&link), vec![LinkInfo::Kind(InfoKind::Ifb)]);
}

fn vxlan_spec() -> VxlanSpec {
    VxlanSpec {
        vni: 1,
        local: Some(Ipv4Addr::new(198, 18, 0, 2).into()),
        port: Some(8472),
        learning: false,
        underlay: Some(4),
    }
}

#[test]
fn vxlan_carries_vni_vtep_port_learning_and_dev() {
    let (_, link) = sent(&LinkAdd::vxlan("rcni.1", vxlan_spec()).mtu(1450));
    assert!(link.attributes.contains(&LinkAttribute::Mtu(1450)));
    let info = link_info(&link);
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
    let LinkInfo::Data(InfoData::Vxlan(data)) = info[1].clone() else {
        unreachable!()
    };
    assert!(VxlanDetails::from_info_data(data).matches(&vxlan_spec()));
    let too_big = VxlanSpec {
        vni: MAX_VNI + 1,
        ..vxlan_spec()
    };
    assert!(matches!(
        refused(&LinkAdd::vxlan("rcni.1", too_big)),
        Error::InvalidArgument(_)
    ));
}

#[test]
fn every_macvlan_mode_encodes_and_decodes_back() {
    for (mode, wire) in [
        (MacvlanMode::Bridge, MacVlanMode::Bridge),
        (MacvlanMode::Private, MacVlanMode::Private),
        (MacvlanMode::Vepa, MacVlanMode::Vepa),
        (MacvlanMode::Passthru, MacVlanMode::Passthrough),
    ] {
        let kind = LinkKind::Macvlan {
            mode,
            bc_queue_len: 0,
        };
        assert_eq!(
            kind.link_info()[1],
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(wire)]))
        );
        let d = VirtDetails::from_link_info(kind.link_info());
        assert_eq!(d.macvlan_mode, Some(mode));
    }
}

#[test]
fn ipvlan_encodes_mode_and_flags() {
    let kind = LinkKind::Ipvlan {
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
fn vlan_encodes_its_id_and_refuses_one_out_of_range() {
    let (_, link) = sent(&LinkAdd::new("v0", LinkKind::Vlan { id: 100 }).parent(3));
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
    let bad = LinkAdd::new("v1", LinkKind::Vlan { id: 4095 }).parent(3);
    assert!(matches!(refused(&bad), Error::InvalidArgument(_)));
}

#[test]
fn stacked_kinds_need_a_parent_and_the_others_refuse_one() {
    for parent in [None, Some(0)] {
        let request = LinkAdd::new(
            "m0",
            LinkKind::Macvlan {
                mode: MacvlanMode::Bridge,
                bc_queue_len: 0,
            },
        )
        .parent(parent);
        assert!(matches!(refused(&request), Error::InvalidArgument(_)));
    }
    assert!(matches!(
        refused(&LinkAdd::dummy("d0").parent(2)),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        refused(&LinkAdd::dummy("bad/name")),
        Error::InvalidArgument(_)
    ));
}

#[test]
fn vrf_encodes_its_table_without_a_parent() {
    let kind = LinkKind::Vrf { table: 1001 };
    assert!(!kind.needs_parent());
    assert_eq!(kind.kind_name(), "vrf");
    let (_, link) = sent(&LinkAdd::new("red", kind));
    assert!(!has_parent(&link));
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
fn wireguard_is_a_newlink_of_kind_wireguard_with_its_mtu() {
    let (_, link) = sent(&LinkAdd::wireguard("rcni-wg").mtu(1440));
    assert_eq!(link_info(&link), vec![LinkInfo::Kind(InfoKind::Wireguard)]);
    assert!(link.attributes.contains(&LinkAttribute::Mtu(1440)));
    assert!(matches!(
        refused(&LinkAdd::wireguard("a-name-far-too-long")),
        Error::InvalidArgument(_)
    ));
}

#[test]
fn kernel_errors_surface_with_their_errno() {
    let (mut h, fake) = handle();
    fake.push_errno(libc::EOPNOTSUPP);
    let kind = LinkKind::Ipvlan {
        mode: IpvlanMode::L2,
        flag: IpvlanFlag::Bridge,
    };
    let err = h.add_link(&LinkAdd::new("i0", kind).parent(2)).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EOPNOTSUPP));
}

fn new_link_reply(index: u32, name: &str) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.attributes = vec![LinkAttribute::IfName(name.to_string())];
    RouteNetlinkMessage::NewLink(msg)
}

#[test]
fn add_and_get_takes_the_echo_or_looks_the_link_up() {
    // Linux 6.1 and later echo the new link before the ACK: one round trip.
    let (mut h, fake) = handle();
    fake.push_reply(new_link_reply(11, "veth1234"));
    fake.push_ack();
    let request = LinkAdd::veth("veth1234", VethPeer::named("eth0"));
    let link = h.add_link_and_get(&request).unwrap();
    assert_eq!((link.index, link.name.as_str()), (11, "veth1234"));
    let sent = fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].header.flags,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL | netlink_packet_core::NLM_F_ECHO
    );
    assert_eq!(fake.pending_replies(), 0);

    // An older kernel only ACKs: the link is looked up by name, in a second round trip.
    let (mut h, fake) = handle();
    fake.push_ack();
    fake.push_reply(new_link_reply(12, "veth1234"));
    let link = h.add_link_and_get(&request).unwrap();
    assert_eq!(link.index, 12);
    let sent = fake.sent();
    assert_eq!(sent.len(), 2);
    assert!(matches!(
        sent[1].payload,
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetLink(_))
    ));
}
