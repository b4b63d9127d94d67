//! Encoding of [`LinkChange`] requests, through the fake transport.

use netlink_packet_core::{NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use netlink_packet_route::link::{AfSpecInet6, AfSpecUnspec, LinkAttribute};

use super::*;
use crate::rtnl::fake::FakeTransport;

fn handle() -> (Handle, FakeTransport) {
    let fake = FakeTransport::new();
    (Handle::with_transport(Box::new(fake.clone())), fake)
}

/// Sends `change` and returns the single `RTM_SETLINK` it made.
fn sent(change: &LinkChange<'_>) -> LinkMessage {
    let (mut h, fake) = handle();
    fake.push_ack();
    h.change_link(change).unwrap();
    let mut sent = fake.sent();
    assert_eq!(sent.len(), 1, "one request");
    let msg = sent.remove(0);
    assert_eq!(msg.header.flags, NLM_F_REQUEST | NLM_F_ACK);
    match msg.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::SetLink(link)) => link,
        other => panic!("not RTM_SETLINK: {other:?}"),
    }
}

/// The error `change` is refused with, before anything is sent.
fn refused(change: &LinkChange<'_>) -> Error {
    let (mut h, fake) = handle();
    let err = h.change_link(change).unwrap_err();
    assert!(fake.sent().is_empty(), "nothing sent for {change:?}");
    err
}

#[test]
fn rename_alias_master_and_up_go_in_one_setlink() {
    let link = sent(
        &LinkChange::of(7)
            .name("veth1234")
            .alias("owner")
            .master(3)
            .up(),
    );
    assert_eq!(link.header.index, 7);
    assert_eq!(link.header.flags, LinkFlags::Up);
    assert_eq!(link.header.change_mask, LinkFlags::Up);
    assert_eq!(
        link.attributes,
        vec![
            LinkAttribute::IfName("veth1234".into()),
            LinkAttribute::IfAlias("owner".into()),
            LinkAttribute::Controller(3),
        ]
    );
}

#[test]
fn only_the_settings_given_are_sent() {
    let link = sent(&LinkChange::of(4));
    assert!(link.attributes.is_empty());
    assert!(link.header.change_mask.is_empty());
    let link = sent(&LinkChange::of(4).mtu(1400));
    assert_eq!(link.attributes, vec![LinkAttribute::Mtu(1400)]);
    let mac = MacAddr([2, 0, 0, 0, 0, 7]);
    let link = sent(&LinkChange::of(4).mac(mac).txqlen(42));
    assert_eq!(
        link.attributes,
        vec![
            LinkAttribute::Address(mac.0.to_vec()),
            LinkAttribute::TxQueueLen(42)
        ]
    );
}

#[test]
fn flags_compose_and_only_their_bits_are_in_the_change_mask() {
    let link = sent(&LinkChange::of(5).up().promisc(true).allmulti(false));
    assert_eq!(link.header.flags, LinkFlags::Up | LinkFlags::Promisc);
    assert_eq!(
        link.header.change_mask,
        LinkFlags::Up | LinkFlags::Promisc | LinkFlags::Allmulti
    );
    let link = sent(&LinkChange::of(5).down());
    assert!(link.header.flags.is_empty());
    assert_eq!(link.header.change_mask, LinkFlags::Up);
    // The last word on one flag wins.
    let link = sent(&LinkChange::of(5).up().down());
    assert!(link.header.flags.is_empty());
}

#[test]
fn nomaster_is_controller_zero() {
    let link = sent(&LinkChange::of(5).nomaster());
    assert_eq!(link.attributes, vec![LinkAttribute::Controller(0)]);
}

#[test]
fn a_link_selected_by_name_moves_with_its_alias_in_one_request() {
    let ns = NetNs::current().unwrap();
    let link = sent(&LinkChange::of_name("dev0").netns(&ns).alias("owner"));
    assert_eq!(link.header.index, 0);
    assert_eq!(
        link.attributes,
        vec![
            LinkAttribute::IfName("dev0".into()),
            LinkAttribute::NetNsFd(ns.as_fd().as_raw_fd()),
            LinkAttribute::IfAlias("owner".into()),
        ]
    );
    assert!(matches!(
        refused(&LinkChange::of_name("dev0").name("dev1")),
        Error::InvalidArgument(_)
    ));
}

#[test]
fn names_and_aliases_the_kernel_would_refuse_are_refused_here() {
    assert!(matches!(
        refused(&LinkChange::of(3).name("a-name-far-too-long")),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        refused(&LinkChange::of_name("bad/name")),
        Error::InvalidArgument(_)
    ));
    let long = "x".repeat(super::super::link::MAX_ALIAS_LEN + 1);
    assert!(matches!(
        refused(&LinkChange::of(3).alias(long)),
        Error::InvalidArgument(_)
    ));
    // An empty alias removes it.
    let link = sent(&LinkChange::of(3).alias(""));
    assert_eq!(link.attributes, vec![LinkAttribute::IfAlias(String::new())]);
}

#[test]
fn ipv4_conf_is_a_nested_inet_conf_entry() {
    let (mut h, fake) = handle();
    fake.push_ack();
    h.change_link(&LinkChange::of(9).ipv4_conf(Ipv4Conf::RouteLocalnet, 1))
        .unwrap();
    // The library decodes IFLA_INET_CONF as a whole `DevConf`, so the one setting sent is
    // checked in the raw request: IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF { 26: 1 } } }.
    let raw = fake.sent_raw().remove(0);
    let mut inet_conf = Vec::new();
    inet_conf.extend_from_slice(&12u16.to_ne_bytes());
    inet_conf.extend_from_slice(&(IFLA_INET_CONF | NLA_F_NESTED).to_ne_bytes());
    inet_conf.extend_from_slice(&8u16.to_ne_bytes());
    inet_conf.extend_from_slice(&26u16.to_ne_bytes());
    inet_conf.extend_from_slice(&1u32.to_ne_bytes());
    assert!(
        raw.windows(inet_conf.len()).any(|w| w == inet_conf),
        "no IFLA_INET_CONF entry in {raw:?}"
    );
}

#[test]
fn ipv4_and_ipv6_settings_share_one_af_spec() {
    let link = sent(
        &LinkChange::of(9)
            .ipv4_conf(Ipv4Conf::ArpNotify, 1)
            .no_ipv6_link_local(),
    );
    let [LinkAttribute::AfSpecUnspec(specs)] = link.attributes.as_slice() else {
        panic!("{:?}", link.attributes)
    };
    assert_eq!(specs.len(), 2);
    assert_eq!(
        specs[1],
        AfSpecUnspec::Inet6(vec![AfSpecInet6::AddrGenMode(In6AddrGenMode::None)])
    );
}
