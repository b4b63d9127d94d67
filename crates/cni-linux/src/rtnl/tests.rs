//! Unprivileged tests of request encoding and reply handling, through the fake transport.

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{
    DoneMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_MULTIPART, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeFlag, BridgeVlanInfoFlags, InfoData, InfoKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, LinkProtoInfoBridge,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMetric, RouteProtocol};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::addr::AddAddressOptions;
use super::fake::FakeTransport;
use super::link::{BridgePortOptions, VlanFlags};
use super::link_add::{LinkAdd, VethPeer};
use super::link_change::LinkChange;
use super::route::Route;
use super::{Error, Handle};
use crate::netns::NetNs;

fn handle() -> (Handle, FakeTransport) {
    let fake = FakeTransport::new();
    (Handle::with_transport(Box::new(fake.clone())), fake)
}

fn only_request(fake: &FakeTransport) -> (NetlinkHeader, RouteNetlinkMessage) {
    let mut sent = fake.sent();
    assert_eq!(sent.len(), 1, "expected exactly one request");
    let msg = sent.remove(0);
    match msg.payload {
        NetlinkPayload::InnerMessage(inner) => (msg.header, inner),
        other => panic!("unexpected payload {other:?}"),
    }
}

fn link_reply(index: u32, name: &str) -> RouteNetlinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    msg.header.flags = LinkFlags::Up;
    msg.attributes = vec![
        LinkAttribute::IfName(name.to_string()),
        LinkAttribute::Mtu(1500),
        LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
        LinkAttribute::Controller(7),
        LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
    ];
    RouteNetlinkMessage::NewLink(msg)
}

#[test]
fn set_up_is_an_acked_setlink_with_the_up_change_mask() {
    let (mut h, fake) = handle();
    fake.push_ack();
    h.change_link(&LinkChange::of(3).up()).unwrap();
    let (header, msg) = only_request(&fake);
    assert_eq!(header.flags, NLM_F_REQUEST | NLM_F_ACK);
    let RouteNetlinkMessage::SetLink(link) = msg else {
        panic!("not RTM_SETLINK: {msg:?}")
    };
    assert_eq!(link.header.index, 3);
    assert_eq!(link.header.flags, LinkFlags::Up);
    assert_eq!(link.header.change_mask, LinkFlags::Up);

    fake.push_ack();
    h.change_link(&LinkChange::of(3).down()).unwrap();
    let sent = fake.sent();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(down)) = &sent[1].payload else {
        panic!("not RTM_SETLINK")
    };
    assert!(down.header.flags.is_empty());
    assert_eq!(down.header.change_mask, LinkFlags::Up);
    assert!(sent[1].header.sequence_number > sent[0].header.sequence_number);
}

#[test]
fn link_by_name_decodes_the_reply_and_maps_enodev() {
    let (mut h, fake) = handle();
    fake.push_reply(link_reply(5, "eth0"));
    let link = h.link_by_name("eth0").unwrap();
    assert_eq!(link.index, 5);
    assert_eq!(link.name, "eth0");
    assert_eq!(link.mtu, 1500);
    assert!(link.up);
    assert_eq!(link.master, Some(7));
    assert_eq!(link.kind.as_deref(), Some("veth"));
    assert_eq!(link.mac.unwrap().to_string(), "02:00:00:00:00:01");
    let (header, msg) = only_request(&fake);
    assert_eq!(header.flags, NLM_F_REQUEST);
    let RouteNetlinkMessage::GetLink(req) = msg else {
        panic!("not RTM_GETLINK")
    };
    assert_eq!(req.attributes, vec![LinkAttribute::IfName("eth0".into())]);

    fake.push_errno(libc::ENODEV);
    let err = h.link_by_name("eth1").unwrap_err();
    assert!(
        matches!(err, Error::LinkNotFound(ref n) if n == "eth1"),
        "{err}"
    );
}

#[test]
fn allmulti_and_txqlen_are_decoded_and_set() {
    let (mut h, fake) = handle();
    let RouteNetlinkMessage::NewLink(mut reply) = link_reply(5, "eth0") else {
        unreachable!()
    };
    reply.header.flags = LinkFlags::Up | LinkFlags::Allmulti;
    reply.attributes.push(LinkAttribute::TxQueueLen(1000));
    fake.push_reply(RouteNetlinkMessage::NewLink(reply));
    let link = h.link_by_name("eth0").unwrap();
    assert!(link.allmulti && !link.promisc);
    assert_eq!(link.txqlen, 1000);

    fake.push_ack();
    fake.push_ack();
    h.change_link(&LinkChange::of(5).allmulti(false)).unwrap();
    h.change_link(&LinkChange::of(5).txqlen(42)).unwrap();
    let sent: Vec<_> = fake.sent().into_iter().skip(1).collect();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(off)) = &sent[0].payload else {
        panic!("not RTM_SETLINK")
    };
    assert_eq!(off.header.change_mask, LinkFlags::Allmulti);
    assert!(off.header.flags.is_empty());
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(len)) = &sent[1].payload else {
        panic!("not RTM_SETLINK")
    };
    assert_eq!(len.header.index, 5);
    assert_eq!(len.attributes, vec![LinkAttribute::TxQueueLen(42)]);
}

#[test]
fn kernel_errors_carry_errno_and_request() {
    let (mut h, fake) = handle();
    fake.push_errno(libc::EEXIST);
    let err = h.add_link(&LinkAdd::bridge("cni0")).unwrap_err();
    assert!(err.is_exists());
    assert_eq!(err.errno(), Some(libc::EEXIST));
    assert!(err.to_string().starts_with("RTM_NEWLINK: "), "{err}");
}

#[test]
fn veth_peer_goes_straight_into_the_target_namespace() {
    let (mut h, fake) = handle();
    fake.push_ack();
    let ns = NetNs::open(format!("/proc/{}/ns/net", std::process::id())).unwrap();
    let peer = VethPeer::named("veth0abc").mtu(1400).netns(&ns);
    let mac: crate::MacAddr = "0a:58:00:00:00:01".parse().unwrap();
    h.add_link(&LinkAdd::veth("eth0", peer).mtu(1400).mac(mac))
        .unwrap();
    let (header, msg) = only_request(&fake);
    assert_eq!(
        header.flags,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    );
    let RouteNetlinkMessage::NewLink(link) = msg else {
        panic!("not RTM_NEWLINK")
    };
    assert!(link
        .attributes
        .contains(&LinkAttribute::IfName("eth0".into())));
    assert!(link.attributes.contains(&LinkAttribute::Mtu(1400)));
    assert!(link
        .attributes
        .contains(&LinkAttribute::Address(vec![0x0a, 0x58, 0, 0, 0, 1])));
    let info = link
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::LinkInfo(info) => Some(info.clone()),
            _ => None,
        })
        .expect("IFLA_LINKINFO");
    assert_eq!(info[0], LinkInfo::Kind(InfoKind::Veth));
    let LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))) = &info[1] else {
        panic!("no veth peer: {info:?}")
    };
    assert!(peer_msg
        .attributes
        .contains(&LinkAttribute::IfName("veth0abc".into())));
    assert!(peer_msg.attributes.contains(&LinkAttribute::Mtu(1400)));
    assert!(peer_msg
        .attributes
        .contains(&LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd())));
}

#[test]
fn bridge_with_vlan_filtering() {
    let (mut h, fake) = handle();
    fake.push_ack();
    h.add_link(&LinkAdd::bridge("cni0").mtu(9000).vlan_filtering(true))
        .unwrap();
    let (_, msg) = only_request(&fake);
    let RouteNetlinkMessage::NewLink(link) = msg else {
        panic!("not RTM_NEWLINK")
    };
    assert!(link.attributes.contains(&LinkAttribute::Mtu(9000)));
    let info = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(info) => Some(info.clone()),
        _ => None,
    });
    let info = info.expect("IFLA_LINKINFO");
    assert_eq!(info[0], LinkInfo::Kind(InfoKind::Bridge));
    assert!(matches!(&info[1], LinkInfo::Data(InfoData::Bridge(opts)) if opts.len() == 1));
}

#[test]
fn bridge_port_flags_use_af_bridge_protinfo() {
    let (mut h, fake) = handle();
    // No flag: nothing is sent.
    h.set_bridge_port(4, &BridgePortOptions::default()).unwrap();
    assert!(fake.sent().is_empty());

    fake.push_ack();
    h.set_bridge_port(
        4,
        &BridgePortOptions {
            hairpin: Some(true),
            isolated: Some(false),
            learning: Some(true),
        },
    )
    .unwrap();
    let (_, msg) = only_request(&fake);
    let RouteNetlinkMessage::SetLink(link) = msg else {
        panic!("not RTM_SETLINK")
    };
    assert_eq!(link.header.interface_family, AddressFamily::Bridge);
    let LinkAttribute::ProtoInfoBridge(nlas) = &link.attributes[0] else {
        panic!("no IFLA_PROTINFO")
    };
    let kinds: Vec<(u16, Vec<u8>)> = nlas
        .iter()
        .map(|n| match n {
            LinkProtoInfoBridge::Other(d) => {
                let mut v = vec![0u8; netlink_packet_core::Nla::value_len(d)];
                netlink_packet_core::Nla::emit_value(d, &mut v);
                (netlink_packet_core::Nla::kind(d), v)
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, vec![(4, vec![1]), (8, vec![1]), (33, vec![0])]);
}

#[test]
fn bridge_vlan_delete_is_af_bridge_so_it_never_deletes_the_link() {
    let (mut h, fake) = handle();
    fake.push_ack();
    fake.push_ack();
    h.add_bridge_vlan(
        6,
        100,
        VlanFlags {
            pvid: true,
            untagged: true,
        },
        false,
    )
    .unwrap();
    h.del_bridge_vlan(6, 100, true).unwrap();
    let sent = fake.sent();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(add)) = &sent[0].payload else {
        panic!("add is not RTM_SETLINK")
    };
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(del)) = &sent[1].payload else {
        panic!("del is not RTM_DELLINK")
    };
    for (msg, target) in [(add, BridgeFlag::Controller), (del, BridgeFlag::LowerDev)] {
        assert_eq!(msg.header.interface_family, AddressFamily::Bridge);
        assert_eq!(msg.header.index, 6);
        let LinkAttribute::AfSpecBridge(spec) = &msg.attributes[0] else {
            panic!("no IFLA_AF_SPEC")
        };
        assert_eq!(spec[0], AfSpecBridge::Flags(target));
        let AfSpecBridge::VlanInfo(info) = &spec[1] else {
            panic!("no vlan info")
        };
        assert_eq!(info.vid, 100);
    }
    let AfSpecBridge::VlanInfo(info) = (match &add.attributes[0] {
        LinkAttribute::AfSpecBridge(s) => s[1].clone(),
        _ => unreachable!(),
    }) else {
        unreachable!()
    };
    assert_eq!(
        info.flags,
        BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged
    );
    assert!(matches!(
        h.add_bridge_vlan(6, 4095, VlanFlags::default(), false),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn ipv4_address_gets_local_address_and_broadcast() {
    let (mut h, fake) = handle();
    fake.push_ack();
    fake.push_ack();
    h.add_address(
        2,
        "198.18.2.3/24".parse().unwrap(),
        AddAddressOptions::default(),
    )
    .unwrap();
    h.add_address(
        2,
        "2001:2::3/64".parse().unwrap(),
        AddAddressOptions { nodad: true },
    )
    .unwrap();
    let sent = fake.sent();
    assert_eq!(
        sent[0].header.flags,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    );
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(v4)) = &sent[0].payload else {
        panic!("not RTM_NEWADDR")
    };
    assert_eq!(v4.header.family, AddressFamily::Inet);
    assert_eq!(v4.header.prefix_len, 24);
    assert_eq!(v4.header.index, 2);
    let ip: std::net::IpAddr = "198.18.2.3".parse().unwrap();
    assert!(v4.attributes.contains(&AddressAttribute::Local(ip)));
    assert!(v4.attributes.contains(&AddressAttribute::Address(ip)));
    assert!(v4.attributes.contains(&AddressAttribute::Broadcast(
        "198.18.2.255".parse().unwrap()
    )));
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(v6)) = &sent[1].payload else {
        panic!("not RTM_NEWADDR")
    };
    assert_eq!(v6.header.family, AddressFamily::Inet6);
    assert!(v6.header.flags.contains(AddressHeaderFlags::Nodad));
    assert!(!v6
        .attributes
        .iter()
        .any(|a| matches!(a, AddressAttribute::Broadcast(_))));
}

#[test]
fn route_add_appends_and_encodes_every_field() {
    let (mut h, fake) = handle();
    fake.push_ack();
    let mut route = Route::to("198.19.0.0/16".parse().unwrap());
    route.gateway = Some("198.18.0.1".parse().unwrap());
    route.oif = Some(3);
    route.priority = Some(100);
    route.table = Some(1000);
    route.mtu = Some(1400);
    route.advmss = Some(1360);
    h.add_route(&route).unwrap();
    let (header, msg) = only_request(&fake);
    // NLM_F_CREATE without NLM_F_EXCL: duplicates are appended, as in the Go plugins.
    assert_eq!(header.flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE);
    let RouteNetlinkMessage::NewRoute(r) = msg else {
        panic!("not RTM_NEWROUTE")
    };
    assert_eq!(r.header.destination_prefix_length, 16);
    assert_eq!(r.header.table, 0);
    assert_eq!(r.header.protocol, RouteProtocol::Boot);
    let a = &r.attributes;
    assert!(a.contains(&RouteAttribute::Destination(RouteAddress::Inet(
        "198.19.0.0".parse().unwrap()
    ))));
    assert!(a.contains(&RouteAttribute::Gateway(RouteAddress::Inet(
        "198.18.0.1".parse().unwrap()
    ))));
    assert!(a.contains(&RouteAttribute::Oif(3)));
    assert!(a.contains(&RouteAttribute::Priority(100)));
    assert!(a.contains(&RouteAttribute::Table(1000)));
    assert!(a.contains(&RouteAttribute::Metrics(vec![
        RouteMetric::Mtu(1400),
        RouteMetric::Advmss(1360)
    ])));
}

#[test]
fn route_replace_and_family_mismatch() {
    let (mut h, fake) = handle();
    fake.push_ack();
    let mut route = Route::to("::/0".parse().unwrap());
    route.gateway = Some("2001:2::1".parse().unwrap());
    h.replace_route(&route).unwrap();
    let (header, msg) = only_request(&fake);
    assert_eq!(
        header.flags,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
    );
    let RouteNetlinkMessage::NewRoute(r) = msg else {
        panic!("not RTM_NEWROUTE")
    };
    assert_eq!(r.header.address_family, AddressFamily::Inet6);
    assert_eq!(r.header.table, 254);
    // A default route carries no RTA_DST.
    assert!(!r
        .attributes
        .iter()
        .any(|a| matches!(a, RouteAttribute::Destination(_))));

    route.gateway = Some("198.18.0.1".parse().unwrap());
    assert!(matches!(
        h.add_route(&route),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn dumps_are_plain_dump_requests_and_collect_every_message() {
    let (mut h, fake) = handle();
    fake.push_dump(vec![link_reply(1, "lo"), link_reply(2, "eth0")]);
    let links = h.links().unwrap();
    assert_eq!(links.len(), 2);
    assert_eq!(links[1].name, "eth0");
    let (header, _) = only_request(&fake);
    assert_eq!(header.flags, NLM_F_REQUEST | NLM_F_DUMP);
}

#[test]
fn interrupted_dumps_are_retried_then_given_up() {
    let (mut h, fake) = handle();
    fake.push_interrupted_dump(vec![link_reply(1, "lo")]);
    fake.push_interrupted_dump(vec![link_reply(1, "lo")]);
    fake.push_dump(vec![link_reply(1, "lo"), link_reply(2, "eth0")]);
    assert_eq!(h.links().unwrap().len(), 2);
    assert_eq!(fake.sent().len(), 3);

    let (mut h, fake) = handle();
    for _ in 0..super::DUMP_ATTEMPTS {
        fake.push_interrupted_dump(vec![]);
    }
    assert!(matches!(
        h.links(),
        Err(Error::DumpInterrupted { attempts }) if attempts == super::DUMP_ATTEMPTS
    ));
    assert_eq!(fake.sent().len(), super::DUMP_ATTEMPTS);
    assert_eq!(fake.pending_replies(), 0);
}

fn raw_message(seq: u32, flags: u16, payload: NetlinkPayload<RouteNetlinkMessage>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.sequence_number = seq;
    header.flags = flags;
    let mut msg = NetlinkMessage::new(header, payload);
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

#[test]
fn replies_with_a_foreign_sequence_number_are_skipped() {
    let (mut h, fake) = handle();
    // A stale reply to some earlier request, then the real ACK.
    fake.push_raw(raw_message(
        9999,
        NLM_F_MULTIPART,
        NetlinkPayload::InnerMessage(link_reply(9, "stale")),
    ));
    fake.push_ack();
    h.delete_link(9).unwrap();
    assert_eq!(fake.pending_replies(), 0);
}

#[test]
fn failed_dump_reports_the_done_error_code() {
    let (mut h, fake) = handle();
    let mut done = DoneMessage::default();
    done.code = -libc::EINVAL;
    // The handle's first request gets sequence number 1.
    fake.push_raw(raw_message(1, NLM_F_MULTIPART, NetlinkPayload::Done(done)));
    let err = h.links().unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL));
    assert!(err.to_string().starts_with("RTM_GETLINK"), "{err}");
}

#[test]
fn missing_reply_is_an_io_error_not_a_hang() {
    let (mut h, _fake) = handle();
    assert!(matches!(
        h.change_link(&LinkChange::of(1).up()),
        Err(Error::Io(_))
    ));
}

#[test]
fn delete_by_name_treats_a_missing_link_as_done() {
    let (mut h, fake) = handle();
    fake.push_errno(libc::ENODEV);
    assert!(!h.delete_link_by_name("gone0").unwrap());
    assert_eq!(fake.sent().len(), 1);

    fake.push_reply(link_reply(8, "eth0"));
    fake.push_ack();
    assert!(h.delete_link_by_name("eth0").unwrap());
    let sent = fake.sent();
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(del)) = &sent[2].payload else {
        panic!("not RTM_DELLINK")
    };
    assert_eq!(del.header.index, 8);
    assert_eq!(del.header.interface_family, AddressFamily::Unspec);

    fake.push_errno(libc::EPERM);
    assert_eq!(
        h.delete_link_by_name("eth0").unwrap_err().errno(),
        Some(libc::EPERM)
    );
}

fn garbage_link_entry(seq: u32) -> Vec<u8> {
    // A well-formed header (RTM_NEWLINK, multipart) around a payload too short for ifinfomsg.
    let mut raw = Vec::new();
    raw.extend_from_slice(&20u32.to_ne_bytes());
    raw.extend_from_slice(&16u16.to_ne_bytes());
    raw.extend_from_slice(&NLM_F_MULTIPART.to_ne_bytes());
    raw.extend_from_slice(&seq.to_ne_bytes());
    raw.extend_from_slice(&0u32.to_ne_bytes());
    raw.extend_from_slice(&[1, 2, 3, 4]);
    raw
}

#[test]
fn an_undecodable_dump_entry_is_skipped_not_fatal() {
    let (mut h, fake) = handle();
    let mut datagram = garbage_link_entry(1);
    datagram.extend(raw_message(
        1,
        NLM_F_MULTIPART,
        NetlinkPayload::InnerMessage(link_reply(2, "eth0")),
    ));
    datagram.extend(raw_message(
        1,
        NLM_F_MULTIPART,
        NetlinkPayload::Done(DoneMessage::default()),
    ));
    fake.push_raw(datagram);
    let links = h.links().unwrap();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].name, "eth0");
}

#[test]
fn an_undecodable_single_reply_or_truncated_datagram_is_an_error() {
    let (mut h, fake) = handle();
    let mut single = garbage_link_entry(1);
    single[6..8].copy_from_slice(&0u16.to_ne_bytes());
    fake.push_raw(single);
    assert!(matches!(h.link_by_index(2), Err(Error::Decode(_))));

    let (mut h, fake) = handle();
    let mut truncated = garbage_link_entry(1);
    truncated[0..4].copy_from_slice(&400u32.to_ne_bytes());
    fake.push_raw(truncated);
    assert!(matches!(h.links(), Err(Error::Decode(_))));
}

#[test]
fn links_of_kind_asks_the_kernel_to_filter_and_checks_the_kind_itself() {
    let (mut h, fake) = handle();
    let mut bridge = LinkMessage::default();
    bridge.header.index = 3;
    bridge.attributes = vec![
        LinkAttribute::IfName("br0".to_string()),
        LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]),
    ];
    // A kernel that ignores the filter sends every link; only the veth comes back.
    fake.push_dump(vec![
        link_reply(2, "veth1"),
        RouteNetlinkMessage::NewLink(bridge),
    ]);
    let links = h.links_of_kind("veth").unwrap();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].name, "veth1");
    let (header, msg) = only_request(&fake);
    assert_eq!(header.flags, NLM_F_REQUEST | NLM_F_DUMP);
    let RouteNetlinkMessage::GetLink(req) = msg else {
        panic!("not a GETLINK: {msg:?}");
    };
    assert_eq!(
        req.attributes,
        vec![LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Veth
        )])]
    );
}

#[test]
fn route_get_is_one_getroute_for_the_full_length_address() {
    let (mut h, fake) = handle();
    let mut reply = netlink_packet_route::route::RouteMessage::default();
    reply.header.address_family = AddressFamily::Inet;
    reply.header.destination_prefix_length = 32;
    reply.attributes = vec![
        RouteAttribute::Destination(RouteAddress::Inet("198.18.5.9".parse().unwrap())),
        RouteAttribute::Oif(7),
    ];
    fake.push_reply(RouteNetlinkMessage::NewRoute(reply));
    let route = h.route_get("198.18.5.9".parse().unwrap()).unwrap().unwrap();
    assert_eq!(route.oif, Some(7));
    let (header, msg) = only_request(&fake);
    assert_eq!(header.flags, NLM_F_REQUEST);
    let RouteNetlinkMessage::GetRoute(req) = msg else {
        panic!("not a GETROUTE: {msg:?}");
    };
    assert_eq!(req.header.destination_prefix_length, 32);
    assert_eq!(
        req.attributes,
        vec![RouteAttribute::Destination(RouteAddress::Inet(
            "198.18.5.9".parse().unwrap()
        ))]
    );

    let (mut h, fake) = handle();
    fake.push_errno(libc::ENETUNREACH);
    assert_eq!(h.route_get("198.18.5.9".parse().unwrap()).unwrap(), None);
}
