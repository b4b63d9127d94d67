//! Kernel test: a masquerade rule and a DNAT rule built over netlink really translate traffic
//! between two throwaway namespaces joined by a veth pair.
//!
//! ```text
//!  ns A (client)                                   ns B (server)
//!  a0: 198.18.99.1/24, 198.18.98.5/24  <--- veth --->  b0: 198.18.99.2/24, 198.18.99.3/24
//!  postrouting: ip saddr 198.18.98.5                 prerouting: ip daddr 198.18.99.2
//!    ip daddr != 198.18.98.0/24 masquerade             udp dport 8080 dnat to 198.18.99.3:9090
//! ```
//! A sends from 198.18.98.5 to 198.18.99.2:8080. B's server on 198.18.99.3:9090 must see the
//! masqueraded source 198.18.99.1, and its reply must come back to A's socket as if from
//! 198.18.99.2:8080 (both translations undone by conntrack).

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, L4Proto, Rule};
use common::TestNs;

fn nat_chain(family: Family, table: &str, name: &str, hook: Hook, prio: i32) -> Batch {
    let mut b = Batch::new();
    b.add_table(family, table).unwrap();
    b.add_chain(&Chain::base(
        family,
        table,
        name,
        ChainType::Nat,
        hook,
        prio,
    ))
    .unwrap();
    b
}

#[test]
fn masquerade_and_dnat_translate_real_traffic() {
    let Some(a) = TestNs::new() else { return };
    let Some(b) = TestNs::new() else { return };
    a.ip(&[
        "link", "add", "a0", "type", "veth", "peer", "name", "b0", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "198.18.99.1/24", "dev", "a0"]);
    a.ip(&["addr", "add", "198.18.98.5/24", "dev", "a0"]);
    a.ip(&["link", "set", "a0", "up"]);
    b.ip(&["addr", "add", "198.18.99.2/24", "dev", "b0"]);
    b.ip(&["addr", "add", "198.18.99.3/24", "dev", "b0"]);
    b.ip(&["link", "set", "b0", "up"]);

    let mut masq = nat_chain(
        Family::Ip,
        "cni_masq",
        "postrouting",
        Hook::Postrouting,
        priority::SRCNAT,
    );
    masq.add_rule(
        &Rule::builder(Family::Ip, "cni_masq", "postrouting")
            .saddr("198.18.98.5".parse::<std::net::IpAddr>().unwrap())
            .daddr_not("198.18.98.0/24".parse::<ipnet::IpNet>().unwrap())
            .masquerade()
            .comment("masq test")
            .build()
            .unwrap(),
    );
    a.nft().commit(&masq).unwrap();

    let mut dnat = nat_chain(
        Family::Ip,
        "cni_hostport",
        "prerouting",
        Hook::Prerouting,
        priority::DSTNAT,
    );
    dnat.add_rule(
        &Rule::builder(Family::Ip, "cni_hostport", "prerouting")
            .daddr("198.18.99.2".parse::<std::net::IpAddr>().unwrap())
            .dport(L4Proto::Udp, 8080)
            .dnat("198.18.99.3".parse().unwrap(), Some(9090))
            .comment("dnat test")
            .build()
            .unwrap(),
    );
    b.nft().commit(&dnat).unwrap();

    let server = b.run(|| UdpSocket::bind("198.18.99.3:9090").unwrap());
    let client = a.run(|| UdpSocket::bind("198.18.98.5:0").unwrap());
    for s in [&server, &client] {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    }
    client.connect("198.18.99.2:8080").unwrap();
    client.send(b"ping").unwrap();

    let mut buf = [0u8; 16];
    let (n, from) = server
        .recv_from(&mut buf)
        .expect("DNAT delivered the datagram");
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(
        from.ip().to_string(),
        "198.18.99.1",
        "source was masqueraded"
    );
    server.send_to(b"pong", from).unwrap();

    // The connected socket only accepts datagrams from 198.18.99.2:8080: the reply arriving
    // proves conntrack undid the DNAT (and the masquerade, since it reached 198.18.98.5).
    let n = client.recv(&mut buf).expect("reply translated back");
    assert_eq!(&buf[..n], b"pong");
}
