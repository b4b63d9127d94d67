//! Shared setup of the nftables feature tests (portmap, firewall, masquerade): a sandbox whose
//! host namespace has pods on a bridge made by Debian's Go bridge + host-local (the first
//! chain element), an "outside world" namespace on a veth, and readers of the ruleset.

#![allow(dead_code)]

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use cni_linux::NetNs;
use cni_testkit::{Netns, PluginCall, PluginOutput, Sandbox};
use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");
pub const GO_DIR: &str = "/usr/lib/cni";

/// False (with a message) when Debian's Go bridge + host-local, which build the pod
/// networks of these tests, are not installed: the caller then skips.
pub fn pod_plugins_available() -> bool {
    let ok = cni_testkit::go_plugins_dir().is_some_and(|d| d.join("bridge").is_file());
    if !ok {
        eprintln!("skipped: Go reference bridge/host-local not installed in {GO_DIR}");
    }
    ok
}

/// The host side address of the outside veth (the "host IP" of port mappings). The outside
/// network is 198.19.254.0/24 and 2001:2:0:254::/64: the pod networks of a lab must not
/// contain them (differential_chains' /16s are 198.18.0.0/16 for that reason).
pub const HOST_IP4: &str = "198.19.254.1";
pub const OUTSIDE_IP4: &str = "198.19.254.2";
pub const HOST_IP6: &str = "2001:2:0:254::1";
pub const OUTSIDE_IP6: &str = "2001:2:0:254::2";

pub struct Lab {
    pub sb: Sandbox,
    pub rcni_dir: PathBuf,
    pub cni_path: OsString,
}

impl Lab {
    pub fn new() -> Lab {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let rcni_dir = sb
            .link_plugins(BIN, &["portmap", "firewall"])
            .expect("plugin links");
        let cni_path = OsString::from(format!("{}:{GO_DIR}", rcni_dir.display()));
        Lab {
            sb,
            rcni_dir,
            cni_path,
        }
    }

    pub fn host(&self) -> &Netns {
        self.sb.host()
    }

    /// Runs a shell command line in `ns` and asserts it succeeded.
    #[track_caller]
    pub fn sh(&self, ns: &str, cmd: &str) -> String {
        let out = self.sb.exec_in(ns, ["sh", "-c", cmd]).expect("exec");
        assert!(out.success(), "`{cmd}` failed in {ns}:\n{out}");
        out.stdout.clone()
    }

    pub fn host_sh(&self, cmd: &str) -> String {
        self.sh(&self.host().name.clone(), cmd)
    }

    /// An "outside world" namespace on a veth: host `ext0` (HOST_IP4/6), outside `eth0`
    /// (OUTSIDE_IP4/6), with the outside using the host as default gateway.
    pub fn add_outside(&self) -> Netns {
        let out = self.sb.add_container().expect("outside namespace");
        self.host_sh(&format!(
            "ip link add ext0 type veth peer name eth0 netns {o} && \
             ip addr add {HOST_IP4}/24 dev ext0 && ip -6 addr add {HOST_IP6}/64 dev ext0 nodad && \
             ip link set ext0 up",
            o = out.name
        ));
        self.sh(
            &out.name,
            &format!(
                "ip link set lo up && ip addr add {OUTSIDE_IP4}/24 dev eth0 && \
                 ip -6 addr add {OUTSIDE_IP6}/64 dev eth0 nodad && ip link set eth0 up && \
                 ip route add default via {HOST_IP4} && ip -6 route add default via {HOST_IP6}"
            ),
        );
        out
    }

    fn call(&self, command: &str, cid: &str, netns: &str, ifname: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command)
            .container_id(cid)
            .netns(netns)
            .ifname(ifname)
            .path(&self.cni_path)
            .stdin(stdin)
    }

    /// Runs a Go reference plugin.
    pub fn go(
        &self,
        plugin: &str,
        command: &str,
        cid: &str,
        netns: &str,
        stdin: &str,
    ) -> PluginOutput {
        self.sb
            .run_plugin(
                PathBuf::from(GO_DIR).join(plugin),
                &self.call(command, cid, netns, "eth0", stdin),
            )
            .expect("run Go plugin")
    }

    /// Runs an rcni plugin (ifname `eth0`).
    pub fn rcni(
        &self,
        plugin: &str,
        command: &str,
        cid: &str,
        netns: &str,
        stdin: &str,
    ) -> PluginOutput {
        self.sb
            .run_plugin(
                self.rcni_dir.join(plugin),
                &self.call(command, cid, netns, "eth0", stdin),
            )
            .expect("run rcni plugin")
    }

    /// Runs GC of an rcni plugin (no attachment variables, as libcni sends it).
    pub fn rcni_gc(&self, plugin: &str, stdin: &str) -> PluginOutput {
        self.sb
            .run_plugin(
                self.rcni_dir.join(plugin),
                &PluginCall::new("GC").path(&self.cni_path).stdin(stdin),
            )
            .expect("run rcni plugin")
    }

    /// The Go bridge config of a pod network (gateway, hairpin, no ipMasq).
    pub fn bridge_conf(
        &self,
        net: &str,
        bridge: &str,
        subnet4: &str,
        subnet6: Option<&str>,
    ) -> Value {
        let mut ranges = vec![json!([{ "subnet": subnet4 }])];
        if let Some(s6) = subnet6 {
            ranges.push(json!([{ "subnet": s6 }]));
        }
        json!({
            "cniVersion": "1.0.0",
            "name": net,
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "hairpinMode": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": ranges,
                "routes": [{ "dst": "0.0.0.0/0" }, { "dst": "::/0" }],
                "dataDir": self.sb.dir().join("ipam").display().to_string()
            }
        })
    }

    /// A new pod namespace attached by the Go bridge; returns it and the bridge result.
    pub fn add_pod(&self, cid: &str, bridge_conf: &Value) -> (Netns, Value) {
        let pod = self.sb.add_container().expect("pod namespace");
        let out = self.go(
            "bridge",
            "ADD",
            cid,
            &pod.path.display().to_string(),
            &bridge_conf.to_string(),
        );
        out.assert_success();
        self.sh(&pod.name, "ip link set lo up");
        (pod, out.json().expect("bridge result"))
    }
}

/// Asserts that `out` is a CNI error with `code` on stdout and a failing exit.
#[track_caller]
pub fn assert_code(out: &PluginOutput, code: u64) -> String {
    assert!(!out.success(), "{out}");
    let v = out.json().unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["code"].as_u64(), Some(code), "{out}");
    v["msg"].as_str().unwrap_or_default().to_string()
}

/// A chained plugin config: `plugin` keys over `{cniVersion, name, type}`, with prevResult
/// and runtimeConfig.
pub fn chained(net: &str, plugin: Value, prev: Option<&Value>, runtime: Option<Value>) -> String {
    let mut conf = json!({ "cniVersion": "1.0.0", "name": net });
    let obj = conf.as_object_mut().unwrap();
    for (k, v) in plugin.as_object().expect("plugin keys").clone() {
        obj.insert(k, v);
    }
    if let Some(p) = prev {
        obj.insert("prevResult".into(), p.clone());
    }
    if let Some(rc) = runtime {
        obj.insert("runtimeConfig".into(), rc);
    }
    conf.to_string()
}

/// The container's first address of a family from a result.
pub fn result_ip(result: &Value, v6: bool) -> String {
    result["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["address"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string()
        })
        .find(|a| a.contains(':') == v6)
        .expect("address of the family")
}

/// Every rule of `ns` as `(family, table, chain, comment)`.
pub fn rules(ns: &str) -> Vec<(String, String, String, String)> {
    let doc = cni_testkit::nft_json(ns)
        .expect("nft -j")
        .expect("the nft tool is installed");
    doc["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("rule"))
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("family"), s("table"), s("chain"), s("comment"))
        })
        .collect()
}

/// Rules of table `table` whose comment contains `needle`.
pub fn rules_with(ns: &str, table: &str, needle: &str) -> usize {
    rules(ns)
        .iter()
        .filter(|(_, t, _, c)| t == table && c.contains(needle))
        .count()
}

/// Every set or map element of `ns` as `(family, table, set, comment)`.
pub fn elements(ns: &str) -> Vec<(String, String, String, String)> {
    let doc = cni_testkit::nft_json(ns)
        .expect("nft -j")
        .expect("the nft tool is installed");
    let mut out = Vec::new();
    for o in doc["nftables"].as_array().unwrap() {
        let Some(set) = o.get("set").or_else(|| o.get("map")) else {
            continue;
        };
        let s = |k: &str| set[k].as_str().unwrap_or_default().to_string();
        for item in set["elem"].as_array().into_iter().flatten() {
            // A map element is `[key, value]`; a key with a comment is `{"elem": {..}}`.
            let key = item.as_array().and_then(|a| a.first()).unwrap_or(item);
            let comment = key["elem"]["comment"].as_str().unwrap_or_default();
            out.push((s("family"), s("table"), s("name"), comment.to_string()));
        }
    }
    out
}

/// Rules and elements of table `table` whose comment contains `needle`.
pub fn owned_with(ns: &str, table: &str, needle: &str) -> usize {
    rules_with(ns, table, needle)
        + elements(ns)
            .iter()
            .filter(|(_, t, _, c)| t == table && c.contains(needle))
            .count()
}

/// Rules of `family table chain`.
pub fn chain_rules(ns: &str, family: &str, table: &str, chain: &str) -> usize {
    rules(ns)
        .iter()
        .filter(|(f, t, ch, _)| f == family && t == table && ch == chain)
        .count()
}

/// Retries `f` for up to ~5 s (addresses and neighbours settle).
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> anyhow::Result<T>) -> T {
    let mut last = None;
    for _ in 0..25 {
        match f() {
            Ok(v) => return v,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: {:#}", last.unwrap());
}

fn open(ns: &Netns) -> NetNs {
    NetNs::open(&ns.path).expect("open namespace")
}

/// A TCP listener in `ns` that accepts one connection and reports its peer address.
pub fn peer_probe(ns: &Netns, addr: SocketAddr) -> JoinHandle<Option<SocketAddr>> {
    let listener = open(ns)
        .run(move || TcpListener::bind(addr))
        .expect("enter namespace")
        .expect("bind probe");
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        for _ in 0..100 {
            if let Ok((_, peer)) = listener.accept() {
                return Some(peer);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    })
}

/// Connects from `ns` to `addr` (one attempt, 2 s).
pub fn tcp_connect(ns: &Netns, addr: SocketAddr) -> std::io::Result<TcpStream> {
    open(ns)
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(2)))
        .expect("enter namespace")
}

/// The source address a listener at `target` in `outside` sees for a TCP connection from
/// `from` (a few attempts while neighbours settle); `None` when no connection arrives.
pub fn source_seen(from: &Netns, outside: &Netns, target: SocketAddr) -> Option<std::net::IpAddr> {
    let probe = peer_probe(outside, target);
    for _ in 0..3 {
        if tcp_connect(from, target).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    probe.join().expect("probe thread").map(|peer| peer.ip())
}

/// A UDP echo server in `ns`; runs until the test process ends.
pub fn udp_echo(ns: &Netns, addr: SocketAddr) {
    let sock = open(ns)
        .run(move || UdpSocket::bind(addr))
        .expect("enter namespace")
        .expect("bind udp");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], peer);
        }
    });
}

/// Sends `msg` over UDP from `ns` to `addr` and returns the echo.
pub fn udp_roundtrip(ns: &Netns, addr: SocketAddr, msg: &str) -> anyhow::Result<String> {
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse()?
    } else {
        "0.0.0.0:0".parse()?
    };
    let sock = open(ns)
        .run(move || UdpSocket::bind(bind))
        .expect("enter")?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))?;
    sock.send_to(msg.as_bytes(), addr)?;
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A UDP client socket in `ns` bound to a fixed local address, reused across sends so the
/// kernel keeps one conntrack entry for it.
pub fn udp_client(ns: &Netns, bind: SocketAddr) -> UdpSocket {
    let sock = open(ns)
        .run(move || UdpSocket::bind(bind))
        .expect("enter namespace")
        .expect("bind udp client");
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    sock
}

/// Sends `msg` from `sock` to `to` and waits for the echo.
pub fn udp_exchange(sock: &UdpSocket, to: SocketAddr, msg: &str) -> anyhow::Result<String> {
    sock.send_to(msg.as_bytes(), to)?;
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A prevResult for a fabricated container address (portmap only reads its addresses).
pub fn fake_result(ip: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "interfaces": [{ "name": "cni0" }, { "name": "eth0", "sandbox": "/run/netns/fake" }],
        "ips": [{ "address": format!("{ip}/20"), "interface": 1, "gateway": "198.19.144.1" }]
    })
}

/// A lab with a bridge routing 198.19.144.0/20 (for route_localnet) and one empty pod
/// namespace whose path the fabricated attachments use as CNI_NETNS.
pub fn fake_lab() -> (Lab, String) {
    let lab = Lab::new();
    lab.host_sh(
        "ip link add cni0 type bridge && ip addr add 198.19.144.1/20 dev cni0 && ip link set cni0 up",
    );
    let ns = lab.sb.add_container().unwrap().path.display().to_string();
    (lab, ns)
}
