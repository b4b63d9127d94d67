//! Kernel test: conntrack entries are listed and deleted by protocol and port inside a
//! throwaway namespace, and the `conntrack` tool (an independent reader) agrees.

mod common;

use std::net::UdpSocket;

use cni_nft::{ct_state, Batch, Chain, ChainType, ConntrackFilter, Family, Hook, L4Proto, Rule};
use common::TestNs;

/// A `ct` rule makes the kernel track connections in this namespace.
fn enable_conntrack(ns: &TestNs) {
    let mut nft = ns.nft();
    let mut b = Batch::new();
    b.add_table(Family::Inet, "ct_on").unwrap();
    b.add_chain(&Chain::base(
        Family::Inet,
        "ct_on",
        "out",
        ChainType::Filter,
        Hook::Output,
        0,
    ))
    .unwrap();
    b.add_rule(
        &Rule::builder(Family::Inet, "ct_on", "out")
            .ct_state(ct_state::NEW)
            .counter()
            .build()
            .unwrap(),
    );
    nft.commit(&b).unwrap();
}

/// Sends one datagram to each port on `addr` from inside the namespace.
fn send_udp(ns: &TestNs, addr: &str, ports: &[u16]) {
    let addr = addr.to_string();
    let ports = ports.to_vec();
    ns.run(move || {
        let sock = UdpSocket::bind((addr.as_str(), 0)).unwrap();
        for port in ports {
            sock.send_to(b"ping", (addr.as_str(), port)).unwrap();
        }
    });
}

fn conntrack_tool(ns: &TestNs, family: &str) -> String {
    // conntrack -L prints its summary on stderr and the entries on stdout.
    ns.exec_ok(&["conntrack", "-L", "-f", family, "-p", "udp"])
}

#[test]
fn udp_entries_are_deleted_by_destination_port() {
    let Some(ns) = TestNs::new() else { return };
    if std::process::Command::new("conntrack")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: the conntrack tool (package conntrack) is not installed");
        return;
    }
    enable_conntrack(&ns);
    send_udp(&ns, "127.0.0.1", &[5353, 5354]);
    send_udp(&ns, "::1", &[5353]);

    let mut nft = ns.nft();
    let before = nft.list_conntrack(Family::Ip).unwrap();
    let ports: Vec<Option<u16>> = before
        .iter()
        .filter(|e| e.protocol == 17)
        .map(|e| e.dst_port)
        .collect();
    assert!(
        ports.contains(&Some(5353)) && ports.contains(&Some(5354)),
        "{before:?}"
    );
    let tool = conntrack_tool(&ns, "ipv4");
    assert!(
        tool.contains("dport=5353") && tool.contains("dport=5354"),
        "{tool}"
    );

    let filter = ConntrackFilter::new(Family::Ip)
        .protocol(L4Proto::Udp)
        .dst_port(5353);
    assert_eq!(nft.delete_conntrack(&filter).unwrap(), 1);
    let tool = conntrack_tool(&ns, "ipv4");
    assert!(!tool.contains("dport=5353"), "{tool}");
    assert!(tool.contains("dport=5354"), "{tool}");
    // The IPv6 entry for the same port is another family's and stays.
    assert!(conntrack_tool(&ns, "ipv6").contains("dport=5353"));
    // Nothing left to match: deleting again is a no-op, not an error.
    assert_eq!(nft.delete_conntrack(&filter).unwrap(), 0);

    let filter6 = ConntrackFilter::new(Family::Ip6)
        .protocol(L4Proto::Udp)
        .dst("::1".parse().unwrap())
        .dst_port(5353);
    assert_eq!(nft.delete_conntrack(&filter6).unwrap(), 1);
    assert!(!conntrack_tool(&ns, "ipv6").contains("dport=5353"));
}
