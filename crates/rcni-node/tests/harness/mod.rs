//! Simulated nodes for the rcni-node tests: an "underlay" namespace (the sandbox's host) with a
//! bridge `ul0` (198.18.0.1/24, 2001:2::1/64) where a real `etcd` listens, N node namespaces
//! each joined to `ul0` by a veth (`eth0`, 198.18.0.(10+i)/24 and 2001:2::(10+i)/64) and running
//! `rcni-node`, an "external" namespace on the underlay (198.18.0.200, 2001:2::c8) outside the
//! cluster networks, and pods attached on a node with `rcni add` and the conflist that node's
//! agent wrote, or through a real containerd per node and CRI calls ([`kubelet`]). IPv6
//! clusters use 2001:2:1::/48 as their IPv6 network.
//!
//! Every process (etcd, agents, containerd and what it started) is killed by PID when its
//! guard drops, also on a failed assertion; the sandbox then deletes every namespace.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod containerd;
pub mod cri;
pub mod etcd;
pub mod hammer;
pub mod kubelet;
pub mod manifest;
pub mod netpol;
pub mod wireguard;

use std::ffi::OsString;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_linux::NetNs;
use cni_testkit::{bin_path, Netns, Sandbox};
use serde_json::{json, Value};

pub const UNDERLAY_GW: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const EXTERNAL_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 200);
pub const EXTERNAL_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0xc8);
pub const CLUSTER_NET6: &str = "2001:2:1::/48";

/// The underlay IPv6 address of the node with the IPv4 address `ip` (same last byte).
pub fn underlay_ipv6(ip: Ipv4Addr) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(ip.octets()[3]))
}
pub const CLUSTER_NET: &str = "198.19.0.0/16";
pub const PREFIX: &str = "/rcni.io/network";

pub fn skip_unless_root() -> bool {
    if !cni_testkit::is_root() {
        eprintln!("skipping: needs root");
        return true;
    }
    false
}

/// Runs a command to completion; panics with its stderr when it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip -n ns -j <args>` as JSON.
pub fn ip_json(ns: &str, args: &[&str]) -> Value {
    let mut full = vec!["ip", "-n", ns, "-j"];
    full.extend_from_slice(args);
    let text = sh(&full);
    if text.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&text).unwrap()
}

/// Polls `cond` every 50 ms until it holds; returns how long it took, or `None` on timeout.
pub fn wait_for(timeout: Duration, cond: impl FnMut() -> bool) -> Option<Duration> {
    poll_every(Duration::from_millis(50), timeout, cond)
}

/// Polls `cond` every `interval` until it holds; returns how long it took, or `None` on
/// timeout. A short interval for what is measured.
pub fn poll_every(
    interval: Duration,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(interval);
    }
    cond().then(|| start.elapsed())
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Guard(pub Option<Child>);

impl Guard {
    pub fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }

    /// SIGTERM, then wait for the exit (SIGKILL after 10 s).
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One simulated node.
pub struct Node {
    pub index: u32,
    pub ns: Netns,
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    pub agent: Guard,
    pub extra: Vec<String>,
    /// This node's etcd flags, instead of the cluster's [`Cluster::agent_etcd_args`].
    pub etcd_args: Option<Vec<String>>,
    /// Environment variables of this node's agent.
    pub env: Vec<(String, String)>,
    /// The node's containerd, when the test runs one ([`Cluster::start_containerd`]).
    pub containerd: Option<containerd::Containerd>,
}

impl Node {
    pub fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }
    pub fn subnet_file(&self) -> PathBuf {
        self.dir.join("subnet.env")
    }
    pub fn status_file(&self) -> PathBuf {
        self.dir.join("state/node-status.json")
    }
    /// The node's underlay IPv6 address.
    pub fn ip6(&self) -> Ipv6Addr {
        underlay_ipv6(self.ip)
    }
    /// The node's IPv6 subnet from its subnet file.
    pub fn subnet6(&self) -> Option<String> {
        let text = fs::read_to_string(self.subnet_file()).ok()?;
        let first: ipnet::Ipv6Net = text
            .lines()
            .find_map(|l| l.strip_prefix("FLANNEL_IPV6_SUBNET="))?
            .parse()
            .ok()?;
        Some(first.trunc().to_string())
    }
    /// The node's subnets of every family (IPv4 first).
    pub fn subnets(&self) -> Vec<String> {
        self.subnet().into_iter().chain(self.subnet6()).collect()
    }
    /// The node subnet from its subnet file.
    pub fn subnet(&self) -> Option<String> {
        let text = fs::read_to_string(self.subnet_file()).ok()?;
        let first: ipnet::Ipv4Net = text
            .lines()
            .find_map(|l| l.strip_prefix("FLANNEL_SUBNET="))?
            .parse()
            .ok()?;
        Some(first.trunc().to_string())
    }
    pub fn healthy(&self) -> bool {
        fs::read(self.status_file())
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["healthy"] == true)
    }
    /// Whether this node has a route to `subnet` made by the agent.
    pub fn has_route(&self, subnet: &str) -> bool {
        let family = if subnet.contains(':') { "-6" } else { "-4" };
        ip_json(
            &self.ns.name,
            &[family, "route", "show", subnet, "proto", "124"],
        )
        .as_array()
        .is_some_and(|a| !a.is_empty())
    }
    /// GET `/metrics` or `/healthz` of the agent (from inside the node).
    pub fn health_get(&self, path: &str) -> anyhow::Result<String> {
        cni_testkit::http_get(&self.ns.name, &format!("http://{}:9477{path}", self.ip))
    }
    pub fn agent_log(&self) -> String {
        fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// How many times the agents of this node logged that they wrote (or kept) the conflist
    /// and the subnet file.
    pub fn publications(&self) -> usize {
        self.agent_log().matches(", pod MTU ").count()
    }
}

/// A pod attached on a node.
pub struct Pod {
    pub ns: Netns,
    pub ip: Ipv4Addr,
    /// Its IPv6 address, on an IPv6 network.
    pub ip6: Option<Ipv6Addr>,
}

/// The simulated cluster.
pub struct Cluster {
    pub sb: Sandbox,
    pub etcd: Guard,
    pub nodes: Vec<Node>,
    pub external: Netns,
    /// The plugin directory the agents and `rcni add` use (rcni's by default).
    pub plugins: PathBuf,
    backend: Value,
    /// The network has IPv4 / IPv6 (agents get `--public-ip` / `--public-ipv6`).
    pub ipv4: bool,
    pub ipv6: bool,
    pub ttl: u64,
    /// The sandbox image archive for the nodes' containerd, built on first use.
    pause_image: Option<PathBuf>,
    /// etcd's client URL(s) (comma-separated for etcdctl), its extra server flags (TLS),
    /// etcdctl's extra flags (TLS files, root user) and the agents' etcd flags.
    pub etcd_url: String,
    pub etcd_server_args: Vec<String>,
    pub etcdctl_args: Vec<String>,
    pub agent_etcd_args: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.containerd = None;
            n.agent.kill();
            n.kill_wireguard_go();
        }
        self.etcd.kill();
    }
}

fn attach_to_underlay(sb: &Sandbox, ns: &Netns, host_end: &str, ip: Ipv4Addr) {
    attach_to_underlay_with(sb, ns, host_end, ip, underlay_ipv6(ip));
}

fn attach_to_underlay_with(sb: &Sandbox, ns: &Netns, host_end: &str, ip: Ipv4Addr, ip6: Ipv6Addr) {
    let host = &sb.host().name;
    sh(&[
        "ip", "-n", host, "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns",
        &ns.name,
    ]);
    sh(&[
        "ip", "-n", host, "link", "set", host_end, "master", "ul0", "up",
    ]);
    sh(&[
        "ip",
        "-n",
        &ns.name,
        "addr",
        "add",
        &format!("{ip}/24"),
        "dev",
        "eth0",
    ]);
    // No duplicate address detection: the address is usable at once.
    sh(&[
        "ip",
        "-n",
        &ns.name,
        "addr",
        "add",
        &format!("{ip6}/64"),
        "dev",
        "eth0",
        "nodad",
    ]);
    sh(&["ip", "-n", &ns.name, "link", "set", "eth0", "up"]);
    sh(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]);
}

impl Cluster {
    /// The underlay, etcd with the network config for `backend` (`{"Type":"vxlan"}`), the
    /// external namespace; no nodes yet.
    pub fn new(backend: Value) -> Cluster {
        Cluster::with_config(json!({"Network": CLUSTER_NET, "SubnetLen": 24, "Backend": backend}))
    }

    /// Like [`Cluster::new`] with a whole network config.
    pub fn with_config(config: Value) -> Cluster {
        let mut c = Cluster::bare(&config);
        c.start_etcd();
        c.put_config(&config);
        c
    }

    /// Writes the network config to etcd.
    pub fn put_config(&self, config: &Value) {
        self.etcdctl(&["put", &format!("{PREFIX}/config"), &config.to_string()]);
    }

    /// The underlay and the external namespace for the network `config`; no etcd yet (its
    /// URL and flags are plain HTTP on the underlay gateway until the test changes them).
    pub fn bare(config: &Value) -> Cluster {
        let backend = config["Backend"].clone();
        let ipv4 = config["EnableIPv4"] != false;
        let ipv6 = config["EnableIPv6"] == true;
        let sb = Sandbox::new().expect("sandbox");
        let host = sb.host().name.clone();
        // A fixed MAC: a bridge without one takes the lowest MAC of its ports, so a node joining
        // later could change it under the neighbour entries the other nodes hold for the
        // gateway, and their packets to etcd would go to the old MAC (seen as a restarted agent
        // that never reached etcd).
        sh(&[
            "ip",
            "-n",
            &host,
            "link",
            "add",
            "ul0",
            "address",
            "02:00:c6:12:00:01",
            "type",
            "bridge",
        ]);
        sh(&["ip", "-n", &host, "link", "set", "ul0", "up"]);
        sh(&[
            "ip",
            "-n",
            &host,
            "addr",
            "add",
            "198.18.0.1/24",
            "dev",
            "ul0",
        ]);
        sh(&[
            "ip",
            "-n",
            &host,
            "addr",
            "add",
            "2001:2::1/64",
            "dev",
            "ul0",
            "nodad",
        ]);
        let external = sb.add_container().unwrap();
        attach_to_underlay_with(&sb, &external, "uext", EXTERNAL_IP, EXTERNAL_IP6);
        let plugins = sb
            .link_plugins(
                bin_path("rcni-plugins").expect("cargo build -p cni-plugins first"),
                &["bridge", "host-local", "portmap", "tuning"],
            )
            .unwrap();
        let url = format!("http://{UNDERLAY_GW}:2379");
        Cluster {
            sb,
            etcd: Guard(None),
            nodes: Vec::new(),
            external,
            plugins,
            backend,
            ipv4,
            ipv6,
            ttl: 3600,
            pause_image: None,
            agent_etcd_args: vec!["--etcd-endpoints".into(), url.clone()],
            etcd_url: url,
            etcd_server_args: Vec::new(),
            etcdctl_args: Vec::new(),
        }
    }

    /// Starts etcd in the underlay namespace (data dir in the sandbox dir; kept across
    /// restarts) at [`Cluster::etcd_url`] with [`Cluster::etcd_server_args`].
    pub fn start_etcd(&mut self) {
        let member = etcd::Member {
            name: "t".into(),
            client_url: self.etcd_url.clone(),
            peer_url: "http://127.0.0.1:2380".into(),
        };
        let cluster = member.initial_cluster_entry();
        self.etcd = Guard(Some(member.spawn(
            &self.sb.host().name,
            self.sb.dir(),
            &cluster,
            &self.etcd_server_args,
        )));
        self.wait_etcd_healthy(&self.etcd_url.clone());
    }

    /// Waits until etcd answers at `endpoints` (panics with the end of its log if not).
    pub fn wait_etcd_healthy(&self, endpoints: &str) {
        let up = wait_for(Duration::from_secs(30), || {
            Command::new("ip")
                .args(["netns", "exec", &self.sb.host().name, "etcdctl"])
                .args(&self.etcdctl_args)
                .args([
                    "--endpoints",
                    endpoints,
                    "--command-timeout=1s",
                    "endpoint",
                    "health",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if up.is_none() {
            panic!(
                "etcd did not come up at {endpoints}; the end of its logs:\n{}",
                etcd::log_tails(self.sb.dir())
            );
        }
    }

    pub fn stop_etcd(&mut self) {
        self.etcd.kill();
    }

    /// etcdctl in the underlay namespace with [`Cluster::etcdctl_args`]; panics on failure.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let mut full = vec![
            "ip",
            "netns",
            "exec",
            &self.sb.host().name,
            "etcdctl",
            "--endpoints",
            &self.etcd_url,
        ];
        full.extend(self.etcdctl_args.iter().map(String::as_str));
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Adds a node namespace (no agent yet).
    pub fn add_node(&mut self) -> usize {
        let index = self.nodes.len() as u32 + 1;
        let ns = self.sb.add_container().unwrap();
        let ip = Ipv4Addr::new(198, 18, 0, 10 + index as u8);
        attach_to_underlay(&self.sb, &ns, &format!("un{index}"), ip);
        let dir = self.sb.dir().join(format!("node{index}"));
        fs::create_dir_all(&dir).unwrap();
        self.nodes.push(Node {
            index,
            ns,
            ip,
            dir,
            agent: Guard(None),
            extra: Vec::new(),
            etcd_args: None,
            env: Vec::new(),
            containerd: None,
        });
        self.nodes.len() - 1
    }

    /// Starts the agent of node `i` (without waiting).
    pub fn spawn_agent(&mut self, i: usize) {
        let ttl = self.ttl.to_string();
        let mut public = Vec::new();
        if self.ipv4 {
            public.extend(["--public-ip".to_string(), self.nodes[i].ip.to_string()]);
        }
        if self.ipv6 {
            public.extend(["--public-ipv6".to_string(), self.nodes[i].ip6().to_string()]);
        }
        let etcd_args = self.nodes[i]
            .etcd_args
            .clone()
            .unwrap_or_else(|| self.agent_etcd_args.clone());
        let node = &mut self.nodes[i];
        // The agent's rule repair walks this cache: the node's own, never the machine's
        // /var/lib/cni (a test may name another one).
        let mut cache = Vec::new();
        if !node.extra.iter().any(|a| a == "--cni-cache-dir") {
            cache = vec![
                "--cni-cache-dir".into(),
                node.dir.join("cache").into_os_string(),
            ];
        }
        let policy = policy_args(&node.extra, &node.dir);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("agent.log"))
            .unwrap();
        let mounts = match wireguard::is_wireguard(&self.backend) {
            true => node.wireguard_mounts(),
            false => Vec::new(),
        };
        let child = Command::new("ip")
            .args(["netns", "exec", &node.ns.name])
            .args(&mounts)
            .arg(bin_path("rcni-node").expect("cargo build -p rcni-node first"))
            .args(&etcd_args)
            .args(["--node-name", &format!("node{}", node.index)])
            .args(&public)
            .args(["--iface", "eth0"])
            .args(["--prefix", PREFIX])
            .arg("--cni-conf-dir")
            .arg(node.conf_dir())
            .arg("--cni-bin-dir")
            .arg(&self.plugins)
            .arg("--subnet-file")
            .arg(node.subnet_file())
            .arg("--state-dir")
            .arg(node.dir.join("state"))
            .args(["--lease-ttl", &ttl, "--status-grace", "2"])
            .args(resync_args(&node.extra))
            .args(["--health-addr", &format!("{}:9477", node.ip)])
            .args(&cache)
            .args(&policy)
            .args(&node.extra)
            .envs(node.env.iter().map(|(k, v)| (k, v)))
            .env("RCNI_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rcni-node");
        node.agent = Guard(Some(child));
    }

    /// Starts the agent of node `i` and waits until it is healthy with its conflist written.
    pub fn start_agent(&mut self, i: usize) {
        let published = self.begin_agent(i);
        self.wait_agent_started(i, published);
    }

    /// Starts the agent of node `i` without waiting; what [`Cluster::wait_agent_started`]
    /// needs (an agent with `--cri-socket` becomes healthy only once its runtime answers).
    pub fn begin_agent(&mut self, i: usize) -> usize {
        // A killed agent's last status may still say healthy: only the new agent's counts.
        let _ = fs::remove_file(self.nodes[i].status_file());
        let published = self.nodes[i].publications();
        self.spawn_agent(i);
        published
    }

    /// Waits until the agent [`Cluster::begin_agent`] started is healthy with its conflist
    /// written (`published` before it).
    pub fn wait_agent_started(&self, i: usize, published: usize) {
        let node = &self.nodes[i];
        // The agent publishes its conflist once healthy: wait for this start's publication.
        let ok = wait_for(Duration::from_secs(30), || {
            node.healthy() && node.publications() > published
        });
        assert!(
            ok.is_some(),
            "agent of node{} not healthy:\n{}",
            node.index,
            node.agent_log()
        );
    }

    /// `n` nodes with running agents, all converged.
    pub fn with_nodes(backend: Value, n: usize) -> Cluster {
        let mut c = Cluster::new(backend);
        for _ in 0..n {
            let i = c.add_node();
            c.start_agent(i);
        }
        c.wait_converged(Duration::from_secs(30))
            .expect("converged");
        c
    }

    /// `n` nodes with running agents on the network `config`, all converged.
    pub fn with_config_and_nodes(config: Value, n: usize) -> Cluster {
        let mut c = Cluster::with_config(config);
        for _ in 0..n {
            let i = c.add_node();
            c.start_agent(i);
        }
        c.wait_converged(Duration::from_secs(30))
            .expect("converged");
        c
    }

    /// Waits until every running node has a route to every other running node's subnets.
    pub fn wait_converged(&self, timeout: Duration) -> Option<Duration> {
        let running: Vec<&Node> = self.nodes.iter().filter(|n| n.agent.0.is_some()).collect();
        wait_for(timeout, || {
            running.iter().all(|a| {
                running.iter().filter(|b| b.index != a.index).all(|b| {
                    let subnets = b.subnets();
                    !subnets.is_empty() && subnets.iter().all(|s| a.has_route(s))
                })
            })
        })
    }

    /// `rcni <args> rcni <netns>` on node `i` with the node's conflist, plugins and cache, in
    /// JSON: the result (or nothing) on success, the CNI error on failure.
    pub fn rcni(&self, i: usize, command: &str, pod: &Netns) -> Result<Value, Value> {
        let node = &self.nodes[i];
        let out = Command::new("ip")
            .args(["netns", "exec", &node.ns.name])
            .arg(bin_path("rcni").expect("cargo build -p rcni first"))
            .args([command, "rcni"])
            .arg(&pod.path)
            .arg("--conf-dir")
            .arg(node.conf_dir())
            .arg("--bin-dir")
            .arg(&self.plugins)
            .arg("--cache-dir")
            .arg(node.dir.join("cache"))
            .arg("--json")
            .output()
            .unwrap();
        let json = serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|_| {
            json!({"msg": format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))})
        });
        match out.status.success() {
            true => Ok(json),
            false => Err(json),
        }
    }

    /// Attaches a new pod on node `i` (`rcni add`); the pod and the CNI result, or the CNI
    /// error (the pod's namespace is removed with the sandbox).
    pub fn try_add_pod(&self, i: usize) -> Result<(Pod, Value), Value> {
        let ns = self.sb.add_container().unwrap();
        let result = self.rcni(i, "add", &ns)?;
        let addrs: Vec<IpAddr> = result["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ip| {
                ip["address"]
                    .as_str()
                    .unwrap()
                    .parse::<ipnet::IpNet>()
                    .unwrap()
                    .addr()
            })
            .collect();
        let ip = addrs.iter().find_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        });
        let ip6 = addrs.iter().find_map(|a| match a {
            IpAddr::V6(v6) => Some(*v6),
            IpAddr::V4(_) => None,
        });
        let pod = Pod {
            ns,
            ip: ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
            ip6,
        };
        Ok((pod, result))
    }

    /// Attaches a new pod on node `i` with `rcni add` and the node's conflist.
    pub fn add_pod(&self, i: usize) -> Pod {
        match self.try_add_pod(i) {
            Ok((pod, _)) => pod,
            Err(e) => panic!("rcni add on node{}: {e}", self.nodes[i].index),
        }
    }

    /// Restarts the agent of node `i` after it stopped, and waits until the new run is healthy
    /// (the old run's status file is removed first: it may still say healthy).
    pub fn restart_agent(&mut self, i: usize) {
        let _ = fs::remove_file(self.nodes[i].status_file());
        self.start_agent(i);
    }

    /// `rcni status rcni` on node `i`: the CNI error code, 0 when ready.
    pub fn status_code(&self, i: usize) -> u64 {
        let node = &self.nodes[i];
        let out = Command::new("ip")
            .args(["netns", "exec", &node.ns.name])
            .arg(bin_path("rcni").unwrap())
            .args(["status", "rcni", "--json"])
            .arg("--conf-dir")
            .arg(node.conf_dir())
            .arg("--bin-dir")
            .arg(&self.plugins)
            .output()
            .unwrap();
        if out.status.success() {
            return 0;
        }
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v["code"].as_u64())
            .unwrap_or(999)
    }
}

/// Ping and HTTP from every pod to every other: `pods` holds each pod's namespace and
/// address; messages name pods by their index.
pub fn every_pair_talks(pods: &[(&Netns, Ipv4Addr)]) {
    let servers: Vec<_> = pods
        .iter()
        .map(|(ns, ip)| cni_testkit::http_server(&ns.name, *ip, 0).unwrap())
        .collect();
    for (a, (from, _)) in pods.iter().enumerate() {
        for (b, (_, to)) in pods.iter().enumerate() {
            if a == b {
                continue;
            }
            assert!(
                cni_testkit::ping(&from.name, *to),
                "ping pod{a} -> pod{b} ({to})"
            );
            let body = cni_testkit::http_get(&from.name, &servers[b].url()).unwrap();
            assert_eq!(body, cni_testkit::HTTP_BODY, "HTTP pod{a} -> pod{b}");
        }
    }
}

/// Opens a TCP listener inside namespace `ns` (the socket stays in that namespace).
pub fn listen_in(ns: &Netns, ip: impl Into<IpAddr>) -> TcpListener {
    let ip: IpAddr = ip.into();
    let handle = NetNs::open(&ns.path).unwrap();
    handle
        .run(move || TcpListener::bind(SocketAddr::from((ip, 0))))
        .unwrap()
        .unwrap()
}

/// Connects from inside `ns` to `listener` and returns the source address the listener saw.
pub fn source_seen(from: &Netns, listener: &TcpListener, to: impl Into<IpAddr>) -> IpAddr {
    let to: IpAddr = to.into();
    let port = listener.local_addr().unwrap().port();
    let handle = NetNs::open(&from.path).unwrap();
    let _stream = handle
        .run(move || {
            TcpStream::connect_timeout(&SocketAddr::from((to, port)), Duration::from_secs(3))
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("connect to {to}:{port}: {e}"));
    let (_conn, peer) = listener.accept().unwrap();
    peer.ip()
}

/// Sends one UDP datagram of `size` bytes from `from` to `to` (a socket in namespace `to_ns`)
/// and returns how many bytes arrived in one datagram.
pub fn udp_payload(
    from: &Netns,
    to_ns: &Netns,
    to: Ipv4Addr,
    size: usize,
) -> std::io::Result<usize> {
    use std::net::UdpSocket;
    let rx = NetNs::open(&to_ns.path)
        .unwrap()
        .run(move || UdpSocket::bind(SocketAddr::from((to, 0))))
        .unwrap()?;
    rx.set_read_timeout(Some(Duration::from_secs(3)))?;
    let dst = rx.local_addr()?;
    let tx = NetNs::open(&from.path)
        .unwrap()
        .run(|| UdpSocket::bind("0.0.0.0:0"))
        .unwrap()?;
    let payload = vec![0x5a; size];
    let mut buf = vec![0u8; 65536];
    // The first datagram may wait for neighbour resolution; try a few times.
    for _ in 0..3 {
        tx.send_to(&payload, dst)?;
        if let Ok((n, _)) = rx.recv_from(&mut buf) {
            return Ok(n);
        }
    }
    Err(std::io::Error::other("no datagram arrived"))
}

/// Whether the kernel has br_netfilter loaded (`/proc/sys/net/bridge` exists).
pub fn br_netfilter_loaded() -> bool {
    Path::new("/proc/sys/net/bridge").exists()
}

/// A resync every second, unless the test chose its own interval.
fn resync_args(extra: &[String]) -> Vec<&'static str> {
    if extra.iter().any(|a| a == "--resync-interval") {
        return Vec::new();
    }
    vec!["--resync-interval", "1"]
}

/// The agent's NetworkPolicy flags besides a test's own (`extra`): the pod records of the
/// node's own directory (never the machine's), and, where br_netfilter is not loaded (the
/// agent refuses to enforce policies without it), `--network-policy=false`, said aloud:
/// only the policy tests need enforcement, and they skip there.
fn policy_args(extra: &[String], dir: &Path) -> Vec<OsString> {
    let mut args = Vec::new();
    if !extra.iter().any(|a| a == "--pod-state-dir") {
        args.extend([
            "--pod-state-dir".into(),
            netpol::pod_state_dir(dir).into_os_string(),
        ]);
    }
    let chosen = extra.iter().any(|a| a.starts_with("--network-policy"));
    if !chosen && !br_netfilter_loaded() {
        eprintln!("br_netfilter is not loaded: agents run with --network-policy=false");
        args.push("--network-policy=false".into());
    }
    args
}
