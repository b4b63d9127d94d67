//! The node the repair tests disrupt: a throwaway host namespace with
//! - network `web` (rcni bridge `rp0` with ipMasq and macspoofchk, portmap, firewall with
//!   same-bridge isolation), pod A serving HTTP on :80 with hostPort 8080;
//! - network `other` (rcni bridge `rp1`, firewall with same-bridge isolation), pod C;
//! - network `gonet` (Debian's Go ptp with ipMasq, and Go tuning), pod G: Go plugins whose
//!   rules `rcni repair` must leave alone;
//! - an "outside" namespace on veth `ext0`, without a route back to the pods (only
//!   masqueraded traffic gets answers), serving HTTP;
//! - `iptables -P FORWARD DROP` (a Docker-like host): forwarding works only through the
//!   firewall plugin's accept rules.
//!
//! [`World::probe`] measures the four properties with traffic.

#![allow(dead_code)]

pub mod firewalld;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

use nix::sys::socket::{setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use cni_testkit::{bin_path, http_get, http_server, HttpServer, Netns, Sandbox, HTTP_BODY};
use serde_json::Value;

#[path = "../support/mod.rs"]
mod support;

pub const HOST_IP: &str = "198.19.254.1";
pub const OUTSIDE_IP: &str = "198.19.254.2";
/// Pod A's MAC-spoofing macvlan (outside the IPAM range).
const SPOOF_IP: &str = "198.18.60.250";
pub const GO_DIR: &str = "/usr/lib/cni";

/// What works on the node, measured with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// outside -> HOST_IP:8080 reaches pod A.
    pub host_port: bool,
    /// pod A -> outside works (the outside only answers the host's address).
    pub egress_masquerade: bool,
    /// pod C on the other bridge cannot reach pod A.
    pub isolation: bool,
    /// frames from pod A with another source MAC are dropped.
    pub spoof_check: bool,
}

impl Health {
    pub const ALL: Health = Health {
        host_port: true,
        egress_masquerade: true,
        isolation: true,
        spoof_check: true,
    };
    pub const NOTHING: Health = Health {
        host_port: false,
        egress_masquerade: false,
        isolation: false,
        spoof_check: false,
    };
    /// Forwarding through the host is dropped (the firewall plugin's accepts are gone).
    pub const ACCEPTS_GONE: Health = Health {
        host_port: false,
        egress_masquerade: false,
        isolation: true,
        spoof_check: true,
    };
}

/// What a repair must leave as it found it.
#[derive(Debug, PartialEq, Eq)]
pub struct Untouchable {
    /// `ip -o link` of the host (ifindex, name, flags, MAC).
    links: String,
    /// host-local's lease files.
    leases: Vec<String>,
    /// The result cache's files and their bytes.
    cache: Vec<(String, Vec<u8>)>,
}

pub struct World {
    pub sb: Sandbox,
    pub confdir: PathBuf,
    pub plugins: PathBuf,
    pub cache: PathBuf,
    pub ipam: PathBuf,
    pub outside: Netns,
    pub a: Netns,
    pub c: Netns,
    pub g: Netns,
    pub a_ip: String,
    _servers: Vec<HttpServer>,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl World {
    /// Builds the node; `None` (skip) without root or Debian's Go plugins.
    pub fn new() -> Option<World> {
        if !cni_testkit::is_root() {
            eprintln!("SKIPPED: needs root for network namespaces");
            return None;
        }
        if !Path::new(GO_DIR).join("ptp").is_file() {
            eprintln!("SKIPPED: Debian's Go plugins are not in {GO_DIR}");
            return None;
        }
        let sb = Sandbox::new().unwrap();
        let bin = bin_path("rcni-plugins").expect("build rcni-plugins first");
        let plugins = sb
            .link_plugins(bin, &["bridge", "host-local", "portmap", "firewall"])
            .unwrap();
        let confdir = sb.dir().join("net.d");
        let cache = sb.dir().join("cache");
        let ipam = sb.dir().join("ipam");
        fs::create_dir_all(&confdir).unwrap();
        write_configs(&confdir, &ipam);
        let outside = sb.add_container().unwrap();
        let (a, c, g) = (
            sb.add_container().unwrap(),
            sb.add_container().unwrap(),
            sb.add_container().unwrap(),
        );
        let mut w = World {
            sb,
            confdir,
            plugins,
            cache,
            ipam,
            outside,
            a,
            c,
            g,
            a_ip: String::new(),
            _servers: Vec::new(),
        };
        w.wire_host();
        let caps = r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#;
        let res = w.add("web", &w.a.path.display().to_string(), Some(caps));
        w.a_ip = res["ips"][0]["address"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        w.add("other", &w.c.path.display().to_string(), None);
        w.add("gonet", &w.g.path.display().to_string(), None);
        w.wire_pods();
        Some(w)
    }

    fn wire_host(&self) {
        let o = &self.outside.name;
        self.host_sh(&format!(
            "sysctl -qw net.ipv4.ip_forward=1 && iptables -P FORWARD DROP && \
             ip link add ext0 type veth peer name eth0 netns {o} && \
             ip addr add {HOST_IP}/24 dev ext0 && ip link set ext0 up"
        ));
        self.sh(
            o,
            &format!(
                "ip link set lo up && ip addr add {OUTSIDE_IP}/24 dev eth0 && ip link set eth0 up"
            ),
        );
    }

    /// HTTP servers in pod A and outside; pod A's MAC-spoofing macvlan.
    fn wire_pods(&mut self) {
        self._servers
            .push(http_server(&self.a.name, [0, 0, 0, 0], 80).unwrap());
        self._servers.push(
            http_server(
                &self.outside.name,
                OUTSIDE_IP.parse::<std::net::Ipv4Addr>().unwrap(),
                80,
            )
            .unwrap(),
        );
        self.sh(
            &self.a.name,
            &format!(
                "ip link set lo up && sysctl -qw net.ipv4.conf.all.arp_ignore=1 \
                 net.ipv4.conf.all.arp_announce=2 && \
                 ip link add sp0 link eth0 type macvlan mode bridge && \
                 ip addr add {SPOOF_IP}/24 dev sp0 && ip link set sp0 up"
            ),
        );
    }

    #[track_caller]
    pub fn sh(&self, ns: &str, cmd: &str) -> String {
        let out = self.sb.exec_in(ns, ["sh", "-c", cmd]).expect("exec");
        assert!(out.success(), "`{cmd}` failed in {ns}:\n{out}");
        out.stdout.clone()
    }

    #[track_caller]
    pub fn host_sh(&self, cmd: &str) -> String {
        self.sh(&self.sb.host().name, cmd)
    }

    /// `rcni <args>` in the host namespace, with both plugin directories (rcni's first).
    pub fn rcni(&self, args: &[&str]) -> Output {
        support::rcni_in_host(&self.sb, &self.confdir, &self.plugins, &self.cache, args)
            .env("CNI_PATH", format!("{}:{GO_DIR}", self.plugins.display()))
            .output()
            .unwrap()
    }

    pub fn add(&self, net: &str, netns: &str, caps: Option<&str>) -> Value {
        let mut args = vec!["add", net, netns];
        if let Some(c) = caps {
            args.extend(["--capability-args", c]);
        }
        let out = self.rcni(&args);
        assert!(out.status.success(), "add {net}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `rcni check NET POD`: the error text, or `None` when it passes.
    pub fn check(&self, net: &str, pod: &Netns) -> Option<String> {
        let out = self.rcni(&["check", net, &pod.path.display().to_string()]);
        (!out.status.success()).then(|| text(&out.stderr) + &text(&out.stdout))
    }

    /// `rcni doctor --json`'s `missingRules`: the attachments it names.
    pub fn doctor_missing(&self) -> Vec<String> {
        let pods = self.sb.dir().join("pods").display().to_string();
        let out = self.rcni(&["doctor", "--json", "--pod-state-dir", &pods]);
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor: {e}: {}{}", text(&out.stdout), text(&out.stderr)));
        v["missingRules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["attachment"].as_str().unwrap().to_string())
            .collect()
    }

    /// `rcni repair --json`: the report.
    pub fn repair(&self) -> Value {
        let out = self.rcni(&["repair", "--json"]);
        assert!(
            out.status.success(),
            "repair: {}{}",
            text(&out.stderr),
            text(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The four properties, each measured a few times when it does not hold at first.
    pub fn probe(&self) -> Health {
        let retry = |f: &dyn Fn() -> bool| (0..3).any(|_| f());
        let hostport = format!("http://{HOST_IP}:8080/");
        let egress = format!("http://{OUTSIDE_IP}/");
        let to_a = format!("http://{}/", self.a_ip);
        Health {
            host_port: retry(&|| {
                http_get(&self.outside.name, &hostport).is_ok_and(|b| b == HTTP_BODY)
            }),
            egress_masquerade: retry(&|| http_get(&self.a.name, &egress).is_ok()),
            isolation: !retry(&|| http_get(&self.c.name, &to_a).is_ok()),
            spoof_check: !retry(&|| spoofed_reaches_gateway(&self.a)),
        }
    }

    /// Links of the host (ifindex, name, MAC), the lease files and the cache files: what a
    /// repair must not touch.
    pub fn untouchable(&self) -> Untouchable {
        let links = self.host_sh("ip -o link show | sed 's/ state [A-Z]* / /'");
        let mut leases = Vec::new();
        for net in ["web", "other", "gonet"] {
            leases.extend(support::lease_files(&self.ipam.join(net)));
        }
        let mut cache: Vec<(String, Vec<u8>)> = fs::read_dir(self.cache.join("results"))
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        cache.sort();
        Untouchable {
            links,
            leases,
            cache,
        }
    }

    /// Rules per chain and elements per set of every table in the host namespace (rcni's
    /// and others'): equal counts before and after a repair mean nothing was doubled.
    pub fn ruleset_counts(&self) -> BTreeMap<String, usize> {
        let v: Value = serde_json::from_str(&self.host_sh("nft -j list ruleset")).unwrap();
        let mut counts = BTreeMap::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            if let Some(r) = item.get("rule") {
                let key = format!("rule {} {} {}", r["family"], r["table"], r["chain"]);
                *counts.entry(key).or_default() += 1;
            } else if let Some(s) = item.get("set").or_else(|| item.get("map")) {
                let key = format!("set {} {} {}", s["family"], s["table"], s["name"]);
                let n = s["elem"].as_array().map_or(0, Vec::len);
                counts.insert(key, n);
            } else if let Some(c) = item.get("chain") {
                counts
                    .entry(format!(
                        "chain {} {} {}",
                        c["family"], c["table"], c["name"]
                    ))
                    .or_default();
            }
        }
        counts
    }

    /// Go ptp's iptables masquerade chains (`CNI-...` in `ip nat`).
    pub fn go_nat_chains(&self) -> usize {
        self.host_sh("iptables-nft -t nat -S 2>/dev/null || true")
            .lines()
            .filter(|l| l.starts_with("-N CNI-"))
            .count()
    }
}

/// Whether a UDP datagram from pod A's macvlan `sp0` (its own MAC, not eth0's) reaches the
/// bridge's address: the host's ICMP port-unreachable answer comes back as ECONNREFUSED.
fn spoofed_reaches_gateway(pod: &Netns) -> bool {
    let probe = || -> anyhow::Result<bool> {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        setsockopt(&fd, sockopt::BindToDevice, &OsString::from("sp0"))?;
        let sock = UdpSocket::from(fd);
        sock.set_read_timeout(Some(Duration::from_millis(700)))?;
        sock.connect("198.18.60.1:9")?;
        sock.send(b"spoofed source MAC")?;
        let mut buf = [0u8; 32];
        Ok(matches!(sock.recv(&mut buf), Err(e) if e.kind() == ErrorKind::ConnectionRefused))
    };
    cni_testkit::run_in(&pod.name, probe).unwrap_or(false)
}

fn write_configs(confdir: &Path, ipam: &Path) {
    let ipam = |subnet: &str| {
        format!(
            r#"{{"type":"host-local","ranges":[[{{"subnet":"{subnet}","rangeEnd":"{}"}}]],
                "routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}"#,
            subnet.replace("0/24", "200"),
            ipam.display()
        )
    };
    let web = format!(
        r#"{{"cniVersion":"1.0.0","name":"web","plugins":[
          {{"type":"bridge","bridge":"rp0","isGateway":true,"ipMasq":true,"macspoofchk":true,"ipam":{}}},
          {{"type":"portmap","capabilities":{{"portMappings":true}}}},
          {{"type":"firewall","ingressPolicy":"same-bridge"}}]}}"#,
        ipam("198.18.60.0/24")
    );
    let other = format!(
        r#"{{"cniVersion":"1.0.0","name":"other","plugins":[
          {{"type":"bridge","bridge":"rp1","isGateway":true,"ipam":{}}},
          {{"type":"firewall","ingressPolicy":"same-bridge"}}]}}"#,
        ipam("198.18.61.0/24")
    );
    let gonet = format!(
        r#"{{"cniVersion":"1.0.0","name":"gonet","plugins":[
          {{"type":"ptp","ipMasq":true,"ipam":{}}},
          {{"type":"tuning","sysctl":{{"net.ipv4.conf.eth0.log_martians":"1"}}}}]}}"#,
        ipam("198.18.62.0/24")
    );
    for (name, body) in [("10-web", web), ("20-other", other), ("30-gonet", gonet)] {
        fs::write(confdir.join(format!("{name}.conflist")), body).unwrap();
    }
}
