//! Shared setup of the macvlan, ipvlan, vlan and dummy integration tests: a sandbox whose
//! CNI_PATH holds `rcni-plugins` under the plugin names, a "master" veth made inside the
//! sandbox's host namespace, kernel-feature probes, and readers of `ip -j -d link`.

#![allow(dead_code)]

use std::path::PathBuf;

pub use cni_testkit::{assert_cni_error, assert_silent_success};
use cni_testkit::{Netns, PluginCall, PluginOutput, Sandbox};
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

    /// A sub-link plugin's config: `base` (cniVersion, name, type and the plugin's keys) with
    /// host-local on `subnet` and the records dir, then `extra` merged over it (a null value
    /// removes the key).
    pub fn conf(&self, mut base: Value, subnet: &str, extra: &Value) -> Value {
        base["ipam"] = self.host_local(subnet);
        base["dataDir"] = json!(self.records_dir());
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                base.as_object_mut().unwrap().remove(k);
            } else {
                base[k] = v.clone();
            }
        }
        base
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
    let mut names = cni_testkit::link_names(ns).unwrap();
    names.retain(|n| n != "lo");
    names
}

/// `addr/prefix` strings of `ifname` in `ns` (global scope only).
pub fn addrs_of(ns: &str, ifname: &str) -> Vec<String> {
    cni_testkit::addrs_of(ns, ifname).unwrap()
}

/// True when `ifname` in `ns` exists and is administratively up.
pub fn is_up(ns: &str, ifname: &str) -> bool {
    cni_testkit::is_up(ns, ifname).unwrap()
}

/// The failed ADDs every sub-link plugin must survive without leftovers (no link in `pod`
/// or new on the host, no lease of `net`): on a kernel without the link kind a clean 999
/// naming `plugin`; else an absent master (when `master` is given: the key) and a failure
/// injected at each step. `conf` builds the plugin's config from extra keys. Returns whether
/// the kernel supports the kind, so the caller can go on.
pub fn assert_failed_adds_leave_nothing(
    env: &Env,
    pod: &Netns,
    (plugin, net): (&str, &str),
    supported: bool,
    master: Option<&str>,
    conf: impl Fn(Value) -> Value,
) -> bool {
    let host_before = link_names(env.host());
    let check_clean = || {
        assert!(link_names(&pod.name).is_empty());
        assert!(env.leases(net).is_empty());
        assert_eq!(link_names(env.host()), host_before);
    };
    if !supported {
        // The kernel refuses the link kind: a clean 999 naming it.
        let e = assert_cni_error(&env.cmd("ADD", pod, "c1", &conf(json!({}))), 999);
        assert!(e["msg"].as_str().unwrap().contains(plugin), "{e}");
        check_clean();
        return false;
    }
    if let Some(key) = master {
        assert_cni_error(
            &env.cmd("ADD", pod, "c1", &conf(json!({key: "nosuch0"}))),
            999,
        );
        check_clean();
    }
    for step in ["link", "ipam", "done"] {
        let call = env
            .call("ADD", pod, "c1", &conf(json!({})))
            .env("RCNI_TEST_FAIL_AT", format!("{plugin}:{step}"));
        assert_cni_error(&env.run(plugin, &call), 999);
        check_clean();
    }
    true
}
