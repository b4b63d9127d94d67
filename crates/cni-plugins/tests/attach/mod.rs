//! Shared setup of the bridge and ptp integration tests: a sandbox with `rcni-plugins` linked
//! under plugin names, an IPAM to delegate to, config builders and kernel-state readers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cni_testkit::{go_plugins_dir, routes, IpFamily, Netns, PluginCall, PluginOutput, Sandbox};
use serde_json::{json, Value};

/// The multi-call binary cargo built for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

/// Which implementation of a plugin a test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    Rcni,
    Go,
}

/// rcni's `host-local`, if this build contains it (it lands with the IPAM work).
pub fn rcni_has(plugin: &str) -> bool {
    cni_plugins::plugin_by_name(plugin).is_some()
}

/// The Go plugins directory, or `None` with a skip message.
pub fn go_dir_or_skip(what: &str) -> Option<PathBuf> {
    let dir = go_plugins_dir();
    if dir.is_none() {
        eprintln!("skipped {what}: Go reference plugins not installed in /usr/lib/cni");
    }
    dir
}

/// A sandbox with one CNI_PATH dir holding the main plugins of `main` and the IPAM of `ipam`.
pub struct Env {
    pub sb: Sandbox,
    pub cni_dir: PathBuf,
    pub data_dir: PathBuf,
}

impl Env {
    /// rcni main plugins, host-local from `ipam` (rcni when it exists, else Go when `None`).
    pub fn new() -> Env {
        Env::with(Impl::Rcni, None).expect("an IPAM implementation is available")
    }

    /// `main` picks bridge/ptp; `ipam` picks host-local (`None`: rcni's when built, else Go's).
    /// `None` when a requested Go plugin is not installed (a skip message is printed).
    pub fn with(main: Impl, ipam: Option<Impl>) -> Option<Env> {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let cni_dir = sb.dir().join("cni-bin");
        std::fs::create_dir_all(&cni_dir).unwrap();
        let ipam = ipam.unwrap_or(if rcni_has("host-local") {
            Impl::Rcni
        } else {
            Impl::Go
        });
        for (names, imp) in [(&["bridge", "ptp"][..], main), (&["host-local"][..], ipam)] {
            for name in names {
                let target = match imp {
                    Impl::Rcni => PathBuf::from(BIN),
                    Impl::Go => go_dir_or_skip(&format!("Go {name}"))?.join(name),
                };
                if imp == Impl::Rcni && *name == "host-local" && !rcni_has("host-local") {
                    eprintln!("skipped: rcni host-local is not built yet");
                    return None;
                }
                std::os::unix::fs::symlink(&target, cni_dir.join(name)).unwrap();
            }
        }
        let data_dir = sb.dir().join("ipam-data");
        Some(Env {
            sb,
            cni_dir,
            data_dir,
        })
    }

    pub fn host(&self) -> &str {
        &self.sb.host().name
    }

    pub fn pod(&self) -> Netns {
        self.sb.add_container().expect("container namespace")
    }

    pub fn call(&self, command: &str, pod: &Netns, cid: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command)
            .container_id(cid)
            .netns(&pod.path)
            .ifname("eth0")
            .path(&self.cni_dir)
            .stdin(stdin)
    }

    pub fn run(&self, plugin: &str, call: &PluginCall) -> PluginOutput {
        self.sb
            .run_plugin(self.cni_dir.join(plugin), call)
            .expect("run plugin")
    }

    /// ADD and assert success; returns the result.
    #[track_caller]
    pub fn add(&self, plugin: &str, pod: &Netns, cid: &str, conf: &Value) -> Value {
        let out = self.run(plugin, &self.call("ADD", pod, cid, &conf.to_string()));
        out.assert_success();
        out.json().unwrap()
    }

    /// `conf` with `prevResult` set, for CHECK.
    pub fn with_prev(conf: &Value, prev: &Value) -> Value {
        let mut c = conf.clone();
        c["prevResult"] = prev.clone();
        c
    }

    /// Names of the lease files host-local keeps for network `net` (no lock or last-reserved).
    pub fn leases(&self, net: &str) -> Vec<String> {
        leases_in(&self.data_dir, net)
    }
}

pub fn leases_in(data_dir: &Path, net: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data_dir.join(net)) else {
        return Vec::new();
    };
    let mut v: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
        .collect();
    v.sort();
    v
}

/// A host-local IPAM section over `subnet`.
pub fn host_local(data_dir: &Path, subnet: &str) -> Value {
    json!({"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": subnet}]]})
}

/// A bridge config named `net` on bridge `br` over `subnet`, with `extra` keys merged in.
pub fn bridge_conf(env: &Env, net: &str, br: &str, subnet: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": net, "type": "bridge", "bridge": br,
        "ipam": host_local(&env.data_dir, subnet),
    });
    merge(&mut c, extra);
    c
}

/// A ptp config named `net` over `subnet`, with `extra` keys merged in.
pub fn ptp_conf(env: &Env, net: &str, subnet: &str, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": net, "type": "ptp",
        "ipam": host_local(&env.data_dir, subnet),
    });
    merge(&mut c, extra);
    c
}

pub fn merge(c: &mut Value, extra: Value) {
    if let Value::Object(m) = extra {
        for (k, v) in m {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(&k);
            } else {
                c[&k] = v;
            }
        }
    }
}

/// The link `name` of `ns` (`ip -j -d link`), panicking when absent.
#[track_caller]
pub fn link(ns: &str, name: &str) -> Value {
    cni_testkit::link(ns, name)
        .unwrap()
        .unwrap_or_else(|| panic!("link {name} missing in {ns}"))
}

pub fn has_link(ns: &str, name: &str) -> bool {
    cni_testkit::link(ns, name).unwrap().is_some()
}

/// Link names of `ns`, sorted.
pub fn link_names(ns: &str) -> Vec<String> {
    cni_testkit::link_names(ns).unwrap()
}

/// `addr/prefix` strings of `ifname` in `ns` (global scope only).
pub fn addrs_of(ns: &str, ifname: &str) -> Vec<String> {
    cni_testkit::addrs_of(ns, ifname).unwrap()
}

/// Routes of the main table of `ns` as `dst [via gw] dev X [scope S]` strings.
pub fn main_routes(ns: &str, family: IpFamily) -> Vec<String> {
    routes(ns, family)
        .unwrap()
        .iter()
        .filter(|r| r.get("table").is_none() || r["table"] == "main")
        .filter(|r| r.get("type").is_none() || r["type"] == "unicast")
        .map(route_string)
        .collect()
}

fn route_string(r: &Value) -> String {
    let mut s = r["dst"].as_str().unwrap_or("?").to_string();
    if let Some(gw) = r["gateway"].as_str() {
        s += &format!(" via {gw}");
    }
    s += &format!(" dev {}", r["dev"].as_str().unwrap_or("?"));
    if let Some(scope) = r["scope"].as_str() {
        if scope != "global" {
            s += &format!(" scope {scope}");
        }
    }
    s
}

/// A sysctl of `ns`.
pub fn sysctl(env: &Env, ns: &str, key: &str) -> String {
    let out = env.sb.exec_in(ns, ["sysctl", "-n", key]).unwrap();
    out.assert_success();
    out.stdout.trim().to_string()
}

/// Asserts that IPv6 is off on `ifname` in `ns`: `disable_ipv6` is 1 and no IPv6 route, in
/// any table, goes through it (not even the multicast route every IPv6 link gets).
pub fn assert_ipv6_off(env: &Env, ns: &str, ifname: &str) {
    let key = format!("net.ipv6.conf.{ifname}.disable_ipv6");
    assert_eq!(sysctl(env, ns, &key), "1", "{key}");
    let routes = env
        .sb
        .exec_in(
            ns,
            ["ip", "-6", "route", "show", "table", "all", "dev", ifname],
        )
        .unwrap();
    routes.assert_success();
    assert_eq!(routes.stdout.trim(), "", "IPv6 routes on {ifname}");
}

/// Replaces veth names and MACs so two runs compare.
pub fn normalize_names(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("veth") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 4..];
        let hex = tail.bytes().take_while(|b| b.is_ascii_hexdigit()).count();
        if hex == 8 {
            out.push_str("vethXXXXXXXX");
            rest = &tail[8..];
        } else {
            out.push_str("veth");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// Waits up to 5 s for `cond`: the kernel destroys the veth pair of a deleted namespace
/// asynchronously, when the namespace is freed.
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..50 {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    cond()
}

/// Comments of the rules in nftables table `table` of namespace `ns`, read with `nft -j`.
pub fn nft_rule_comments(ns: &str, table: &str) -> Vec<String> {
    nft_objects(ns, "rule", table)
        .iter()
        .map(|r| r["comment"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Names of the chains in nftables table `table` of namespace `ns`.
pub fn nft_chain_names(ns: &str, table: &str) -> Vec<String> {
    nft_objects(ns, "chain", table)
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn nft_objects(ns: &str, kind: &str, table: &str) -> Vec<Value> {
    let ruleset = cni_testkit::nft_json(ns)
        .expect("nft -j list ruleset")
        .expect("the nft tool is installed");
    ruleset["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.get(kind))
        .filter(|o| o["table"] == table)
        .cloned()
        .collect()
}
