//! Root-only: link and address operations inside throwaway namespaces, checked through the crate
//! and independently through `ip -j`.

mod common;

use std::net::IpAddr;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::MacAddr;
use common::TestNs;
use ipnet::IpNet;

fn has_flag(link: &serde_json::Value, flag: &str) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|v| v == flag))
}

#[test]
fn loopback_up_and_addresses() {
    let t = TestNs::new();
    let mut h = t.handle();
    let lo = h.link_by_name("lo").unwrap();
    assert_eq!(lo.index, 1);
    assert!(!lo.up);
    assert_eq!(h.link_by_index(1).unwrap().name, "lo");

    h.change_link(&LinkChange::of(lo.index).up()).unwrap();
    assert!(h.link_by_name("lo").unwrap().up);
    assert!(has_flag(&t.ip_link("lo"), "UP"));

    let addrs: Vec<IpNet> = h
        .addresses(Some(lo.index))
        .unwrap()
        .into_iter()
        .map(|a| a.addr)
        .collect();
    assert!(addrs.contains(&"127.0.0.1/8".parse().unwrap()), "{addrs:?}");

    h.change_link(&LinkChange::of(lo.index).down()).unwrap();
    assert!(!h.link_by_name("lo").unwrap().up);
    assert!(!has_flag(&t.ip_link("lo"), "UP"));
}

#[test]
fn missing_link_is_not_found() {
    let t = TestNs::new();
    let mut h = t.handle();
    let err = h.link_by_name("nope0").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(h.link_by_index(4242).unwrap_err().is_not_found());
    let err = h.delete_link(4242).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(h.link_by_name("bad/name").is_err());
}

#[test]
fn veth_pair_settings_rename_and_delete() {
    let t = TestNs::new();
    let mut h = t.handle();
    let mac: MacAddr = "02:42:ac:11:00:02".parse().unwrap();
    let pair = LinkAdd::veth("va0", VethPeer::named("vb0").mtu(1400))
        .mtu(1400)
        .mac(mac);
    h.add_link(&pair).unwrap();
    let err = h
        .add_link(
            &LinkAdd::veth("va0", VethPeer::named("vc0"))
                .mtu(1400)
                .mac(mac),
        )
        .unwrap_err();
    assert!(err.is_exists(), "{err}");

    let a = h.link_by_name("va0").unwrap();
    let b = h.link_by_name("vb0").unwrap();
    assert_eq!(a.kind.as_deref(), Some("veth"));
    assert_eq!(a.mtu, 1400);
    assert_eq!(b.mtu, 1400);
    assert_eq!(a.mac, Some(mac));
    assert_eq!(a.link, Some(b.index));
    let json = t.ip_link("va0");
    assert_eq!(json["address"], "02:42:ac:11:00:02");
    assert_eq!(json["mtu"], 1400);
    assert_eq!(json["linkinfo"]["info_kind"], "veth");

    h.change_link(&LinkChange::of(a.index).mtu(1300)).unwrap();
    let other: MacAddr = "02:00:00:00:00:99".parse().unwrap();
    h.change_link(&LinkChange::of(a.index).mac(other)).unwrap();
    h.change_link(&LinkChange::of(a.index).name("renamed0"))
        .unwrap();
    let json = t.ip_link("renamed0");
    assert_eq!(json["mtu"], 1300);
    assert_eq!(json["address"], "02:00:00:00:00:99");
    assert_eq!(json["ifindex"], a.index);

    h.change_link(&LinkChange::of(a.index).promisc(true))
        .unwrap();
    assert!(h.link_by_index(a.index).unwrap().promisc);
    assert!(has_flag(&t.ip_link("renamed0"), "PROMISC"));
    h.change_link(&LinkChange::of(a.index).promisc(false))
        .unwrap();
    assert!(!h.link_by_index(a.index).unwrap().promisc);

    let names: Vec<String> = h.links().unwrap().into_iter().map(|l| l.name).collect();
    assert!(names.contains(&"renamed0".to_string()) && names.contains(&"vb0".to_string()));

    h.delete_link(a.index).unwrap();
    assert!(h.link_by_name("vb0").unwrap_err().is_not_found());
    assert_eq!(t.ip_json(&["link", "show"]).as_array().unwrap().len(), 1);
}

#[test]
fn veth_peer_created_directly_in_other_namespace() {
    let container = TestNs::new();
    let host = TestNs::new();
    let mut ch = container.handle();
    let mut hh = host.handle();
    let mac: MacAddr = "0a:58:0a:00:00:05".parse().unwrap();
    let peer = VethPeer::named("veth1234").mtu(1450).netns(&host.ns);
    ch.add_link(&LinkAdd::veth("eth0", peer).mtu(1450).mac(mac))
        .unwrap();

    // The peer never exists on the container side.
    assert!(ch.link_by_name("veth1234").unwrap_err().is_not_found());
    let eth0 = ch.link_by_name("eth0").unwrap();
    let hv = hh.link_by_name("veth1234").unwrap();
    assert_eq!(hv.mtu, 1450);
    assert_eq!(eth0.link, Some(hv.index));
    assert!(eth0.link_netnsid.is_some());
    assert_eq!(host.ip_link("veth1234")["mtu"], 1450);
    assert_eq!(container.ip_link("eth0")["address"], "0a:58:0a:00:00:05");

    // Moving a link to another namespace.
    ch.add_link(&LinkAdd::veth("m0", VethPeer::named("m1")))
        .unwrap();
    let m1 = ch.link_by_name("m1").unwrap();
    ch.change_link(&LinkChange::of(m1.index).netns(&host.ns))
        .unwrap();
    assert!(ch.link_by_name("m1").unwrap_err().is_not_found());
    assert!(hh.link_by_name("m1").is_ok());

    // Deleting the container end removes the host end too.
    ch.delete_link(eth0.index).unwrap();
    assert!(hh.link_by_name("veth1234").unwrap_err().is_not_found());
    // By name, as DEL does: a second delete is a no-op, not an error.
    assert!(ch.delete_link_by_name("m0").unwrap());
    assert!(!ch.delete_link_by_name("m0").unwrap());
    assert!(hh.link_by_name("m1").unwrap_err().is_not_found());
}

#[test]
fn add_list_and_delete_addresses() {
    let t = TestNs::new();
    let mut h = t.handle();
    h.add_link(&LinkAdd::veth("a0", VethPeer::named("a1")))
        .unwrap();
    let a0 = h.link_by_name("a0").unwrap();
    let v4: IpNet = "198.18.22.5/24".parse().unwrap();
    let v6: IpNet = "2001:2:0:22::5/64".parse().unwrap();
    h.add_address(a0.index, v4, AddAddressOptions::default())
        .unwrap();
    h.add_address(a0.index, v6, AddAddressOptions { nodad: true })
        .unwrap();
    let err = h
        .add_address(a0.index, v4, AddAddressOptions::default())
        .unwrap_err();
    assert!(err.is_exists(), "{err}");

    let addrs = h.addresses(Some(a0.index)).unwrap();
    let nets: Vec<IpNet> = addrs.iter().map(|a| a.addr).collect();
    assert!(nets.contains(&v4) && nets.contains(&v6), "{nets:?}");
    assert!(addrs.iter().all(|a| a.index == a0.index));
    assert!(addrs.iter().filter(|a| a.addr == v6).all(|a| !a.tentative));

    let json = t.ip_json(&["addr", "show", "dev", "a0"]);
    let infos = json[0]["addr_info"].as_array().unwrap();
    let find = |ip: &str| infos.iter().find(|i| i["local"] == ip).cloned();
    let v4j = find("198.18.22.5").expect("v4 address visible to ip");
    assert_eq!(v4j["prefixlen"], 24);
    assert_eq!(v4j["broadcast"], "198.18.22.255");
    let v6j = find("2001:2:0:22::5").expect("v6 address visible to ip");
    assert_eq!(v6j["prefixlen"], 64);
    assert_eq!(v6j["nodad"], true);

    h.delete_address(a0.index, v4).unwrap();
    let err = h.delete_address(a0.index, v4).unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let nets: Vec<IpAddr> = h
        .addresses(Some(a0.index))
        .unwrap()
        .iter()
        .map(|a| a.addr.addr())
        .collect();
    assert!(!nets.contains(&v4.addr()));
    assert!(nets.contains(&v6.addr()));
}

/// `net.ipv4.conf.<link>.<key>` inside the test namespace, read by `sysctl` itself.
fn sysctl_in(t: &TestNs, key: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &t.name, "sysctl", "-n", key])
        .output()
        .expect("run sysctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn ipv4_settings_through_netlink_match_the_sysctls() {
    use cni_linux::rtnl::link_change::Ipv4Conf;
    let t = TestNs::new();
    let mut h = t.handle();
    h.add_link(&LinkAdd::veth("ca0", VethPeer::named("cb0")))
        .unwrap();
    let (a, b) = (
        h.link_by_name("ca0").unwrap(),
        h.link_by_name("cb0").unwrap(),
    );
    // A new link reports the kernel defaults.
    assert_eq!(a.ipv4_route_localnet, Some(false));
    assert_eq!(a.ipv6_accept_ra, Some(1));

    h.change_link(&LinkChange::of(a.index).ipv4_conf(Ipv4Conf::ArpNotify, 1))
        .unwrap();
    h.change_link(&LinkChange::of(a.index).ipv4_conf(Ipv4Conf::RouteLocalnet, 1))
        .unwrap();
    assert_eq!(sysctl_in(&t, "net.ipv4.conf.ca0.arp_notify"), "1");
    assert_eq!(sysctl_in(&t, "net.ipv4.conf.ca0.route_localnet"), "1");
    assert_eq!(
        h.link_by_name("ca0").unwrap().ipv4_route_localnet,
        Some(true)
    );
    // Only the named setting of the named link changes.
    assert_eq!(
        sysctl_in(&t, "net.ipv4.conf.ca0.rp_filter"),
        sysctl_in(&t, "net.ipv4.conf.cb0.rp_filter")
    );
    assert_eq!(sysctl_in(&t, "net.ipv4.conf.cb0.arp_notify"), "0");
    assert_eq!(
        h.link_by_index(b.index).unwrap().ipv4_route_localnet,
        Some(false)
    );

    // Back to 0, and a value written through /proc/sys is what netlink reports.
    h.change_link(&LinkChange::of(a.index).ipv4_conf(Ipv4Conf::RouteLocalnet, 0))
        .unwrap();
    assert_eq!(sysctl_in(&t, "net.ipv4.conf.ca0.route_localnet"), "0");
    let set = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.name,
            "sysctl",
            "-qw",
            "net.ipv6.conf.cb0.accept_ra=0",
        ])
        .status()
        .unwrap();
    assert!(set.success());
    assert_eq!(h.link_by_index(b.index).unwrap().ipv6_accept_ra, Some(0));
    assert!(h
        .change_link(&LinkChange::of(9999).ipv4_conf(Ipv4Conf::ArpNotify, 1))
        .unwrap_err()
        .is_not_found());
}
