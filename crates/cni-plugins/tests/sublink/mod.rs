//! Shared setup of the macvlan, ipvlan, vlan and dummy integration tests: a sandbox whose
//! CNI_PATH holds `rcni-plugins` under the plugin names, a "master" veth made inside the
//! sandbox's host namespace, kernel-feature probes, and readers of `ip -j -d link`.

#![allow(dead_code)]

use std::path::PathBuf;

use cni_testkit::{addrs, links, Netns, PluginCall, PluginOutput, Sandbox};
use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

/// Every name the tests call, all pointing at the multi-call binary.
const PLUGINS: &[&str] = &[
    "macvlan",
    "ipvlan",
    "vlan",
    "dummy",
    "host-device",
    "tap",
    "sbr",
    "bridge",
    "ptp",
    "vrf",
    "host-local",
];

pub struct Env {
    pub sb: Sandbox,
    pub cni_dir: PathBuf,
    pub data_dir: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let cni_dir = sb.link_plugins(BIN, PLUGINS).expect("plugin links");
        let data_dir = sb.dir().join("ipam-data");
        Env {
            sb,
            cni_dir,
            data_dir,
        }
    }

    pub fn host(&self) -> &str {
        &self.sb.host().name
    }

    pub fn pod(&self) -> Netns {
        self.sb.add_container().expect("container namespace")
    }

    /// Runs `ip args...` in the host namespace and asserts success.
    #[track_caller]
    pub fn ip_host(&self, args: &[&str]) {
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        self.sb.exec_host(argv).unwrap().assert_success();
    }

    /// Runs `ip args...` in `ns` and asserts success.
    #[track_caller]
    pub fn ip_in(&self, ns: &str, args: &[&str]) {
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        self.sb.exec_in(ns, argv).unwrap().assert_success();
    }

    /// A veth `name` (peer `name` + "p") in the host namespace, both ends up: the master.
    pub fn add_master(&self, name: &str) {
        let peer = format!("{name}p");
        self.ip_host(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.ip_host(&["link", "set", name, "up"]);
        self.ip_host(&["link", "set", &peer, "up"]);
    }

    /// Gives `dev` an address and makes it the host namespace's default route.
    pub fn default_route_via(&self, dev: &str) {
        self.ip_host(&["addr", "add", "192.0.2.1/24", "dev", dev]);
        self.ip_host(&["route", "add", "default", "via", "192.0.2.254", "dev", dev]);
    }

    pub fn call(&self, command: &str, pod: &Netns, cid: &str, conf: &Value) -> PluginCall {
        PluginCall::new(command)
            .container_id(cid)
            .netns(&pod.path)
            .ifname("eth0")
            .path(&self.cni_dir)
            .stdin(conf.to_string())
    }

    pub fn run(&self, plugin: &str, call: &PluginCall) -> PluginOutput {
        self.sb
            .run_plugin(self.cni_dir.join(plugin), call)
            .expect("run plugin")
    }

    /// ADD and assert success; returns the result.
    #[track_caller]
    pub fn add(&self, pod: &Netns, cid: &str, conf: &Value) -> Value {
        let plugin = conf["type"].as_str().unwrap();
        let out = self.run(plugin, &self.call("ADD", pod, cid, conf));
        out.assert_success();
        out.json().unwrap()
    }

    /// Runs `command` with the config's plugin.
    pub fn cmd(&self, command: &str, pod: &Netns, cid: &str, conf: &Value) -> PluginOutput {
        let plugin = conf["type"].as_str().unwrap();
        self.run(plugin, &self.call(command, pod, cid, conf))
    }

    /// The sub-link plugins' `dataDir` (attachment records), inside the sandbox.
    pub fn records_dir(&self) -> std::path::PathBuf {
        self.data_dir.join("sublink-records")
    }

    pub fn host_local(&self, subnet: &str) -> Value {
        json!({"type": "host-local", "dataDir": self.data_dir, "ranges": [[{"subnet": subnet}]]})
    }

    /// Lease files of network `net` (no lock or last-reserved files).
    pub fn leases(&self, net: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.data_dir.join(net)) else {
            return Vec::new();
        };
        let mut v: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
            .collect();
        v.sort();
        v
    }

    /// Whether the kernel can make a link of `kind` (`ip link add` arguments after the name,
    /// e.g. `["type", "dummy"]`), tried on a throwaway master in a throwaway sandbox. Prints
    /// the skip message naming `feature` when it cannot.
    pub fn kernel_supports(kind_args: &[&str], feature: &str) -> bool {
        let env = Env::new();
        env.add_master("probe0");
        let mut argv = vec!["ip", "link", "add", "probe1"];
        argv.extend_from_slice(kind_args);
        let out = env.sb.exec_host(argv).unwrap();
        if !out.success() {
            eprintln!("SKIPPED: kernel lacks {feature} ({})", out.stderr.trim());
        }
        out.success()
    }
}

/// `conf` with `prevResult` set, for CHECK.
pub fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

/// `ip -j -d link show` entry of `name` in `ns`, if present.
pub fn link(ns: &str, name: &str) -> Option<Value> {
    cni_testkit::link(ns, name).unwrap()
}

/// Link names of `ns` other than `lo`, sorted.
pub fn link_names(ns: &str) -> Vec<String> {
    let mut v: Vec<String> = links(ns)
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .filter(|n| n != "lo")
        .collect();
    v.sort();
    v
}

/// `addr/prefix` strings of `ifname` in `ns` (global scope only).
pub fn addrs_of(ns: &str, ifname: &str) -> Vec<String> {
    addrs(ns)
        .unwrap()
        .iter()
        .filter(|l| l["ifname"] == ifname)
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] == "global")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// True when `ifname` in `ns` is administratively up.
pub fn is_up(ns: &str, ifname: &str) -> bool {
    link(ns, ifname)
        .and_then(|l| l["flags"].as_array().cloned())
        .is_some_and(|f| f.iter().any(|x| x == "UP"))
}

/// Asserts a failed call with CNI error `code` and a clean JSON error on stdout.
#[track_caller]
pub fn assert_cni_error(out: &PluginOutput, code: u64) -> Value {
    assert!(!out.success(), "expected failure:\n{out}");
    assert!(!out.stdout.contains("panicked at"), "{out}");
    let v = out.json().unwrap();
    assert_eq!(v["code"], code, "{out}");
    assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{out}");
    v
}

/// Success with nothing on stdout (DEL, CHECK, STATUS).
#[track_caller]
pub fn assert_silent_success(out: &PluginOutput) {
    out.assert_success();
    assert_eq!(out.stdout, "", "{out}");
}
