//! ipMasq (common::masquerade) and macspoofchk (common::spoofcheck) against the kernel: the API
//! is called inside the sandbox's host namespace, pods come from Debian's Go bridge (with its
//! own ipMasq off), and an "outside world" namespace reports the source address it sees.

mod nft_common;

use std::net::SocketAddr;

use cni_attribution::AttachmentId;
use cni_linux::NetNs;
use cni_plugins::common::{masquerade, spoofcheck};
use ipnet::IpNet;
use nft_common::*;

const NET: &str = "masqnet";

fn in_host<T: Send>(lab: &Lab, f: impl FnOnce() -> T + Send) -> T {
    NetNs::open(&lab.host().path).unwrap().run(f).unwrap()
}

fn pod_net(res: &serde_json::Value) -> IpNet {
    res["ips"][0]["address"].as_str().unwrap().parse().unwrap()
}

/// Connects from the pod to the outside probe and returns the source address it saw.
fn seen_source(
    lab: &Lab,
    pod: &cni_testkit::Netns,
    outside: &cni_testkit::Netns,
    port: u16,
) -> Option<SocketAddr> {
    let _ = lab;
    let target: SocketAddr = format!("{OUTSIDE_IP4}:{port}").parse().unwrap();
    let probe = peer_probe(outside, target);
    let conn = eventually("pod -> outside", || Ok(tcp_connect(pod, target)?));
    drop(conn);
    probe.join().unwrap()
}

#[test]
fn pod_traffic_leaves_with_the_host_address_until_teardown() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let outside = lab.add_outside();
    let conf = lab.bridge_conf(NET, "cni0", "198.18.88.0/24", None);
    let (pod, res) = lab.add_pod("m1", &conf);
    let addr = pod_net(&res);

    // Without masquerading the outside sees the pod's own address.
    let peer = seen_source(&lab, &pod, &outside, 7001).unwrap();
    assert_eq!(peer.ip(), addr.addr());

    in_host(&lab, || {
        masquerade::setup_masquerade(NET, "m1", "eth0", &[addr])
    })
    .unwrap();
    // Idempotent: a second setup replaces the rule.
    in_host(&lab, || {
        masquerade::setup_masquerade(NET, "m1", "eth0", &[addr])
    })
    .unwrap();
    let host = lab.host().name.clone();
    assert_eq!(
        rules_with(&host, masquerade::TABLE, "id: m1"),
        1,
        "{:#?}",
        rules(&host)
    );
    assert_eq!(
        chain_rules(&host, "inet", masquerade::TABLE, "postrouting"),
        3
    );

    let peer = seen_source(&lab, &pod, &outside, 7002).unwrap();
    assert_eq!(
        peer.ip().to_string(),
        HOST_IP4,
        "masqueraded to the host address"
    );
    // Teardown needs no addresses and no netns.
    lab.sb.remove_container(&pod).unwrap();
    in_host(&lab, || masquerade::teardown_masquerade(NET, "m1", "eth0")).unwrap();
    assert_eq!(rules_with(&host, masquerade::TABLE, "id: m1"), 0);
    in_host(&lab, || masquerade::teardown_masquerade(NET, "m1", "eth0")).unwrap();
}

#[test]
fn gc_keeps_valid_attachments_and_other_networks() {
    let lab = Lab::new();
    let ip = |s: &str| -> IpNet { s.parse().unwrap() };
    in_host(&lab, || {
        masquerade::setup_masquerade(
            NET,
            "keep",
            "eth0",
            &[ip("198.18.1.2/24"), ip("2001:2:0:1::2/64")],
        )?;
        masquerade::setup_masquerade(NET, "gone", "eth0", &[ip("198.18.1.3/24")])?;
        masquerade::setup_masquerade("other", "gone", "eth0", &[ip("198.18.2.3/24")])
    })
    .unwrap();
    let host = lab.host().name.clone();
    let valid = vec![AttachmentId::new(NET, "keep", "eth0")];
    in_host(&lab, || masquerade::gc_masquerade(NET, &valid)).unwrap();
    assert_eq!(rules_with(&host, masquerade::TABLE, "id: keep"), 2);
    assert_eq!(
        rules_with(
            &host,
            masquerade::TABLE,
            &format!("net: {NET}, if: eth0, id: gone")
        ),
        0
    );
    assert_eq!(
        rules_with(&host, masquerade::TABLE, "net: other, if: eth0, id: gone"),
        1
    );
}

#[test]
fn macspoofchk_drops_frames_with_a_foreign_source_mac() {
    if !pod_plugins_available() {
        return;
    }
    let lab = Lab::new();
    let conf = lab.bridge_conf(NET, "cni0", "198.18.88.0/24", None);
    let (pod, res) = lab.add_pod("s1", &conf);
    let ifaces = res["interfaces"].as_array().unwrap();
    let host_veth = ifaces[1]["name"].as_str().unwrap().to_string();
    let mac = ifaces[2]["mac"].as_str().unwrap().to_string();
    let gw: std::net::IpAddr = "198.18.88.1".parse().unwrap();
    assert!(cni_testkit::ping(&pod.name, gw));

    in_host(&lab, || {
        spoofcheck::setup_spoofcheck("s1", "eth0", &host_veth, &mac)
    })
    .unwrap();
    in_host(&lab, || {
        spoofcheck::setup_spoofcheck("s1", "eth0", &host_veth, &mac)
    })
    .unwrap();
    let host = lab.host().name.clone();
    assert_eq!(
        rules_with(&host, spoofcheck::TABLE, "macspoofchk-s1-eth0"),
        4
    );
    assert!(cni_testkit::ping(&pod.name, gw), "the real MAC passes");

    lab.sh(&pod.name, "ip link set eth0 address 02:00:00:00:be:ef");
    assert!(
        !cni_testkit::ping(&pod.name, gw),
        "a spoofed MAC is dropped"
    );

    in_host(&lab, || spoofcheck::teardown_spoofcheck("s1", "eth0")).unwrap();
    assert_eq!(
        rules_with(&host, spoofcheck::TABLE, "macspoofchk-s1-eth0"),
        0
    );
    let doc = cni_testkit::nft_json(&host).unwrap().unwrap().to_string();
    assert!(!doc.contains("cni-br-iface-s1-eth0"), "chains removed");
    assert!(cni_testkit::ping(&pod.name, gw), "no check after teardown");
    in_host(&lab, || spoofcheck::teardown_spoofcheck("s1", "eth0")).unwrap();
}

#[test]
fn concurrent_setup_and_teardown_keep_one_rule_per_live_attachment() {
    let lab = Lab::new();
    let host_ns = &lab.host().path;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..60u32)
            .map(|i| {
                scope.spawn(move || {
                    let ns = NetNs::open(host_ns).unwrap();
                    let net = if i % 3 == 0 { "masq-a" } else { "masq-b" };
                    let cid = format!("c{i}");
                    let ip: IpNet = format!("198.19.{}.{}/16", i / 200, 2 + i % 200)
                        .parse()
                        .unwrap();
                    ns.run(|| {
                        masquerade::setup_masquerade(net, &cid, "eth0", &[ip])?;
                        if i % 2 == 0 {
                            masquerade::teardown_masquerade(net, &cid, "eth0")?;
                        }
                        Ok::<(), cni_types::CniError>(())
                    })
                    .unwrap()
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap().unwrap();
        }
    });
    let host = lab.host().name.clone();
    let all = rules(&host);
    for i in 0..60 {
        let n = all
            .iter()
            .filter(|(_, _, _, c)| c.ends_with(&format!("id: c{i}")))
            .count();
        assert_eq!(n, usize::from(i % 2 == 1), "c{i}");
    }
    assert_eq!(
        chain_rules(&host, "inet", masquerade::TABLE, "postrouting"),
        3
    );
}
