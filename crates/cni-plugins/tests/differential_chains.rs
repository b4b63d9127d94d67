//! Differential test: the same conflist run through Debian's Go plugins
//! (bridge, portmap, firewall and tuning, with iptables inside the sandbox) and through
//! rcni's (nftables over netlink) must give the same reachability matrix, measured with real
//! traffic: podman's 0.4.0 `bridge → portmap → firewall → tuning` chain and containerd's
//! `bridge → portmap`. Each implementation gets its own sandbox (host namespace, "outside"
//! namespace, two pods), driven by the rcni runtime (ADD in order with prevResult threading,
//! DEL in reverse) from inside the sandbox's host namespace. After DEL, rcni must leave no
//! rules, links, leases or cache entries for the pods. Needs root.

mod attach;
mod nft_common;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use cni_linux::NetNs;
use cni_runtime::{Attachment, CniResult, Network, Runtime};
use cni_testkit::{http_get, http_server, HttpServer, Netns};
use nft_common::{
    rules, source_seen, Lab, BIN, GO_DIR, HOST_IP4, HOST_IP6, OUTSIDE_IP4, OUTSIDE_IP6,
};
use serde_json::{json, Value};

/// The port pod A's HTTP server listens on, and the host port mapped to it.
const POD_PORT: u16 = 80;
const HOST_PORT: u16 = 8080;
/// A server in the host namespace, for pod → host.
const HOST_SERVICE_PORT: u16 = 9090;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Impl {
    Go,
    Rcni,
}

/// The plugins a chain uses; all must exist for the Go side, or the test is skipped.
const CHAIN_PLUGINS: [&str; 5] = ["bridge", "host-local", "portmap", "firewall", "tuning"];

fn go_plugins_or_skip() -> bool {
    let dir = PathBuf::from(GO_DIR);
    let missing: Vec<&str> = CHAIN_PLUGINS
        .into_iter()
        .filter(|p| !dir.join(p).is_file())
        .collect();
    if !missing.is_empty() {
        eprintln!("skipped: Go reference plugins {missing:?} not installed in {GO_DIR}");
    }
    missing.is_empty()
}

/// podman's `87-podman-bridge.conflist` with a unique name, bridge and subnet.
fn podman_conflist(data_dir: &str) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "podman-diff",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni-pdiff0",
                "isGateway": true,
                "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "ranges": [[{"subnet": "198.18.0.0/16", "gateway": "198.18.0.1"}]],
                    "dataDir": data_dir
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": "iptables"},
            {"type": "tuning"}
        ]
    })
}

/// containerd's `10-containerd-net.conflist` with a unique name, bridge and
/// test-range subnets of its prefix lengths. The IPv4 /16 is podman's: the other /16 of
/// 198.18.0.0/15 holds the lab's outside network, and each chain runs in its own lab.
fn containerd_conflist(data_dir: &str) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "containerd-diff",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni-cdiff0",
                "isGateway": true,
                "ipMasq": true,
                "promiscMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "198.18.0.0/16"}], [{"subnet": "2001:2:0:189::/64"}]],
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                    "dataDir": data_dir
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// One attached pod.
struct Pod {
    ns: Netns,
    att: Attachment,
    result: CniResult,
}

impl Pod {
    fn ip(&self, v6: bool) -> Option<IpAddr> {
        self.result
            .ips
            .iter()
            .map(|i| i.address.addr())
            .find(|a| a.is_ipv6() == v6)
    }

    fn gateway(&self) -> IpAddr {
        self.result
            .ips
            .iter()
            .find_map(|i| i.gateway.filter(|g| g.is_ipv4()))
            .expect("IPv4 gateway in the result")
    }
}

/// One implementation's sandbox with the network attached to pods A and B.
struct World {
    imp: Impl,
    lab: Lab,
    outside: Netns,
    rt: Runtime,
    net: Network,
    data_dir: PathBuf,
    a: Pod,
    b: Pod,
    _servers: Vec<HttpServer>,
}

fn host_ns(lab: &Lab) -> NetNs {
    NetNs::open(&lab.host().path).expect("open the sandbox host namespace")
}

impl World {
    fn new(imp: Impl, conflist: fn(&str) -> Value, tag: &str) -> World {
        let lab = Lab::new();
        let outside = lab.add_outside();
        let bin_dir = match imp {
            Impl::Go => PathBuf::from(GO_DIR),
            Impl::Rcni => lab
                .sb
                .link_plugins(BIN, &CHAIN_PLUGINS)
                .expect("plugin links"),
        };
        let data_dir = lab.sb.dir().join("ipam");
        let conf = conflist(data_dir.to_str().unwrap());
        let net = Network::from_list_bytes(conf.to_string().as_bytes()).expect("conflist");
        let rt = Runtime::new(vec![bin_dir], lab.sb.dir().join("cache"));
        let pid = std::process::id();
        let mappings =
            json!([{"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "tcp"}]);
        let a = attach(&lab, &rt, &net, &format!("{tag}a{pid}"), mappings);
        let b = attach(&lab, &rt, &net, &format!("{tag}b{pid}"), json!([]));
        let any = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
        // `[::]` accepts IPv4 too (bindv6only is 0 in a new namespace).
        let servers = vec![
            http_server(&a.ns.name, any, POD_PORT).expect("server in pod A"),
            http_server(&b.ns.name, any, POD_PORT).expect("server in pod B"),
            http_server(&lab.host().name, any, HOST_SERVICE_PORT).expect("server on the host"),
        ];
        World {
            imp,
            lab,
            outside,
            rt,
            net,
            data_dir,
            a,
            b,
            _servers: servers,
        }
    }

    /// DEL of both pods (the chain in reverse), as the runtime does it.
    fn del_all(&self) {
        for pod in [&self.b, &self.a] {
            host_ns(&self.lab)
                .run(|| self.rt.del(&self.net, &pod.att))
                .unwrap()
                .unwrap_or_else(|e| panic!("{:?} DEL of {}: {e}", self.imp, pod.att.container_id));
        }
    }
}

fn attach(lab: &Lab, rt: &Runtime, net: &Network, cid: &str, mappings: Value) -> Pod {
    let ns = lab.sb.add_container().expect("pod namespace");
    lab.sh(&ns.name, "ip link set lo up");
    let att = Attachment::new(cid, ns.path.to_str().unwrap(), "eth0")
        .with_capability("portMappings", mappings);
    // The plugins are children of a thread inside the host namespace, so they run there.
    let result = host_ns(lab)
        .run(|| rt.add(net, &att))
        .unwrap()
        .unwrap_or_else(|e| panic!("ADD of {cid}: {e}"));
    Pod { ns, att, result }
}

/// A reachability verdict, retried a few times so address and neighbour set-up settle.
fn reach(from: &str, url: &str) -> String {
    for attempt in 0..3 {
        match http_get(from, url) {
            Ok(_) => return "reachable".into(),
            Err(e) if attempt == 2 => return format!("unreachable ({})", short(&e)),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(300)),
        }
    }
    unreachable!()
}

/// The kind of failure, without addresses (which differ between the two sandboxes).
fn short(e: &anyhow::Error) -> &'static str {
    let text = format!("{e:#}");
    if text.contains("refused") {
        "refused"
    } else if text.contains("timed out") || text.contains("Timeout") {
        "timeout"
    } else if text.contains("unreachable") {
        "no route"
    } else {
        "error"
    }
}

fn url(ip: IpAddr, port: u16) -> String {
    format!("http://{}/", SocketAddr::new(ip, port))
}

/// The source address the outside namespace sees for a TCP connection from `pod`, named by
/// role so the two sandboxes compare.
fn outside_sees(w: &World, pod: &Pod, v6: bool, port: u16) -> String {
    let (target, host_ip) = match v6 {
        false => (OUTSIDE_IP4, HOST_IP4),
        true => (OUTSIDE_IP6, HOST_IP6),
    };
    let target = SocketAddr::new(target.parse().unwrap(), port);
    match source_seen(&pod.ns, &w.outside, target) {
        None => "unreachable".into(),
        Some(ip) if ip.to_string() == host_ip => "host address".into(),
        Some(ip) if Some(ip) == pod.ip(v6) => "pod address".into(),
        Some(ip) => format!("other address {ip}"),
    }
}

/// Runs `f` with the hairpin flag on `pod`'s host veth port, then turns it off again.
fn with_hairpin(w: &World, pod: &Pod, f: impl FnOnce() -> String) -> String {
    let veth = pod
        .result
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_empty() && i.name.starts_with("veth"))
        .expect("host veth in the result")
        .name
        .clone();
    let set = |on: &str| {
        w.lab.host_sh(&format!(
            "ip link set {veth} type bridge_slave hairpin {on}"
        ))
    };
    set("on");
    let verdict = f();
    set("off");
    verdict
}

type Matrix = Vec<(&'static str, String)>;

/// Every cell of the matrix, IPv4; with `v6` also the IPv6 cells.
fn measure(w: &World, v6: bool) -> Matrix {
    let host = w.lab.host().name.as_str();
    let (a, b) = (&w.a, &w.b);
    let host_ip: IpAddr = HOST_IP4.parse().unwrap();
    let b_ip = b.ip(false).expect("pod B IPv4");
    let mut m: Matrix = vec![
        (
            "pod A -> pod B (HTTP)",
            reach(&a.ns.name, &url(b_ip, POD_PORT)),
        ),
        (
            "pod A -> host gateway address",
            reach(&a.ns.name, &url(a.gateway(), HOST_SERVICE_PORT)),
        ),
        (
            "pod A -> host external address",
            reach(&a.ns.name, &url(host_ip, HOST_SERVICE_PORT)),
        ),
        (
            "host -> hostIP:hostPort",
            reach(host, &url(host_ip, HOST_PORT)),
        ),
        (
            "outside -> hostIP:hostPort",
            reach(&w.outside.name, &url(host_ip, HOST_PORT)),
        ),
        (
            "pod B -> hostIP:hostPort",
            reach(&b.ns.name, &url(host_ip, HOST_PORT)),
        ),
        // Neither conflist sets hairpinMode: with bridge netfilter on (the default in a new
        // namespace) the DNATed frame is bridged back out of the port it came in on, which a
        // port without the hairpin flag refuses. Both implementations agree on that, and
        // with the flag set by hand both deliver (their hairpin masquerade works).
        (
            "pod A (hairpin) -> its own hostIP:hostPort",
            reach(&a.ns.name, &url(host_ip, HOST_PORT)),
        ),
        (
            "pod A (hairpin, port flag set by hand) -> own hostPort",
            with_hairpin(w, a, || reach(&a.ns.name, &url(host_ip, HOST_PORT))),
        ),
        (
            "host -> 127.0.0.1:hostPort",
            reach(host, &url("127.0.0.1".parse().unwrap(), HOST_PORT)),
        ),
        (
            "pod A -> outside: source seen",
            outside_sees(w, a, false, 7101),
        ),
    ];
    if v6 {
        let host_ip6: IpAddr = HOST_IP6.parse().unwrap();
        let b_ip6 = b.ip(true).expect("pod B IPv6");
        m.extend([
            (
                "pod A -> pod B (HTTP, IPv6)",
                reach(&a.ns.name, &url(b_ip6, POD_PORT)),
            ),
            (
                "outside -> [hostIP6]:hostPort",
                reach(&w.outside.name, &url(host_ip6, HOST_PORT)),
            ),
            (
                "pod A -> outside IPv6: source seen",
                outside_sees(w, a, true, 7102),
            ),
        ]);
    }
    m
}

fn render(m: &Matrix) -> String {
    m.iter()
        .map(|(cell, v)| format!("  {cell:<55} {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What rcni must have removed after DEL: the pods' rules, host veths, leases, cache entries.
fn assert_rcni_left_nothing(w: &World) {
    let host = &w.lab.host().name;
    for pod in [&w.a, &w.b] {
        let cid = &pod.att.container_id;
        let tagged: Vec<_> = rules(host)
            .into_iter()
            .filter(|(_, _, _, comment)| comment.contains(cid.as_str()))
            .collect();
        assert!(tagged.is_empty(), "rules of {cid} left: {tagged:#?}");
        assert!(
            cni_testkit::link(&pod.ns.name, "eth0").unwrap().is_none(),
            "eth0 of {cid} left"
        );
        assert!(
            w.rt.cached_attachments(Some(cid)).is_empty(),
            "cache entry of {cid} left"
        );
    }
    let veths: Vec<String> = attach::link_names(host)
        .into_iter()
        .filter(|n| n.starts_with("veth"))
        .collect();
    assert!(veths.is_empty(), "host veths left: {veths:?}");
    let leases = attach::leases_in(&w.data_dir, w.net.name());
    assert!(leases.is_empty(), "leases left: {leases:?}");
}

/// Builds both worlds, compares their matrices, tears both down.
fn differential(conflist: fn(&str) -> Value, tag: &str, v6: bool) {
    if !go_plugins_or_skip() {
        return;
    }
    let go = World::new(Impl::Go, conflist, tag);
    let go_matrix = measure(&go, v6);
    go.del_all();
    drop(go);

    let rcni = World::new(Impl::Rcni, conflist, tag);
    let rcni_matrix = measure(&rcni, v6);
    rcni.del_all();
    assert_rcni_left_nothing(&rcni);

    eprintln!(
        "{tag}: Go plugins\n{}\n{tag}: rcni\n{}",
        render(&go_matrix),
        render(&rcni_matrix)
    );
    assert_eq!(
        go_matrix,
        rcni_matrix,
        "reachability differs\nGo:\n{}\nrcni:\n{}",
        render(&go_matrix),
        render(&rcni_matrix)
    );
}

#[test]
fn podman_bridge_portmap_firewall_tuning() {
    differential(podman_conflist, "pd", false);
}

#[test]
fn containerd_bridge_portmap() {
    differential(containerd_conflist, "cd", true);
}
