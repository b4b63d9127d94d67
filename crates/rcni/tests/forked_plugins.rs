//! Issue #15 item 5 on the real kernel: plugins installed as links to the `rcni` executable
//! itself are started by `rcni add/check/del` with fork and no exec. The same chain (bridge
//! with ipMasq + host-local + portmap) runs once with plugins linked to `rcni` (forked) and
//! once linked to `rcni-plugins` (executed), on the same container namespace and container
//! ID, and must give the same result, the same kernel state (eth0, addresses, the nft tables
//! and chains), the same lease and cache files, and leave nothing behind after DEL. A forked
//! plugin past the timeout is killed like an executed one.

use std::fs;
use std::path::Path;
use std::process::Output;

use cni_testkit::{addrs, bin_path, is_root, link, nft_json, Sandbox};
use serde_json::{json, Value};

mod support;
use support::lease_files;

const NET: &str = "fk";
/// One port mapping, so portmap has rules to make and remove.
const MAPPING: &str =
    r#"{"portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp"}]}"#;

fn rcni(sb: &Sandbox, plugins: &Path, args: &[&str]) -> Output {
    let dir = sb.dir();
    support::rcni_in_host(sb, &dir.join("net.d"), plugins, &dir.join("cache"), args)
        .env("RCNI_LOG", "debug")
        .env("CAP_ARGS", MAPPING)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write_conflist(sb: &Sandbox) {
    let confdir = sb.dir().join("net.d");
    fs::create_dir_all(&confdir).unwrap();
    let list = json!({
        "cniVersion": "1.1.0",
        "name": NET,
        "plugins": [
            {"type": "bridge", "bridge": "fk0", "isGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "dataDir": sb.dir().join("ipam"),
                      "ranges": [[{"subnet": "198.18.91.0/24"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    });
    fs::write(confdir.join("10-fk.conflist"), list.to_string()).unwrap();
}

/// The host's nft ruleset in short: tables, chains, sets and maps with their element counts,
/// and each chain's rule count, sorted.
fn nft_names(ns: &str) -> Vec<String> {
    let Some(v) = nft_json(ns).unwrap() else {
        return Vec::new();
    };
    let mut names: Vec<String> = v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            if let Some(t) = o.get("table") {
                Some(format!("table {} {}", t["family"], t["name"]))
            } else if let Some(c) = o.get("chain") {
                Some(format!(
                    "chain {} {} {}",
                    c["family"], c["table"], c["name"]
                ))
            } else if let Some(set) = o.get("set").or_else(|| o.get("map")) {
                let elems = set["elem"].as_array().map_or(0, Vec::len);
                Some(format!(
                    "set {} {} {}: {elems} elements",
                    set["family"], set["table"], set["name"]
                ))
            } else {
                o.get("rule")
                    .map(|r| format!("rule in {} {} {}", r["family"], r["table"], r["chain"]))
            }
        })
        .collect();
    names.sort();
    // Rules as one line per chain with their count.
    names.dedup_by(|b, a| {
        if a.starts_with("rule in") && a.split(" x").next() == Some(b.as_str()) {
            let n: usize = a
                .rsplit(" x")
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            *a = format!("{b} x{}", n + 1);
            true
        } else {
            false
        }
    });
    names
}

/// What one ADD left, with the values that differ between two ADDs (MACs, the veth's name
/// and index, the address host-local picked) taken out.
#[derive(Debug, PartialEq)]
struct State {
    result: Value,
    eth0_addresses: usize,
    nft: Vec<String>,
    leases: usize,
    cache_entries: usize,
    nft_after_del: Vec<String>,
}

fn normalized(result: &Value) -> Value {
    let mut r = result.clone();
    for i in r["interfaces"].as_array_mut().into_iter().flatten() {
        i["mac"] = json!("-");
        if i["name"].as_str().is_some_and(|n| n.starts_with("veth")) {
            i["name"] = json!("veth");
        }
    }
    for ip in r["ips"].as_array_mut().into_iter().flatten() {
        ip["address"] = json!("-");
    }
    r
}

fn cache_entries(sb: &Sandbox) -> usize {
    fs::read_dir(sb.dir().join("cache/results"))
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

/// ADD, CHECK and DEL through `rcni` with the plugins in `plugins`; returns the state after
/// ADD. `forked` says whether the plugins must have been forked.
fn attach_and_detach(sb: &Sandbox, plugins: &Path, pod: &str, netns: &str, forked: bool) -> State {
    let label = if forked { "forked" } else { "executed" };
    let before = nft_names(&sb.host().name);
    let add = rcni(sb, plugins, &["add", NET, netns]);
    let log = text(&add.stderr);
    assert!(add.status.success(), "{label} ADD: {log}");
    for plugin in ["bridge", "portmap"] {
        assert_eq!(
            log.contains(&format!("starting {plugin} forked")),
            forked,
            "{label}: {log}"
        );
    }
    // host-local runs in-process inside bridge either way.
    assert!(
        log.contains("running host-local in-process"),
        "{label}: {log}"
    );
    let result: Value = serde_json::from_slice(&add.stdout).unwrap();
    let eth0 = link(pod, "eth0").unwrap().expect("eth0 after ADD");
    assert_eq!(eth0["operstate"], "UP", "{label}");
    let eth0_addresses = addrs(pod)
        .unwrap()
        .iter()
        .filter(|a| a["ifname"] == "eth0")
        .flat_map(|a| a["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["family"] == "inet")
        .count();
    let state = State {
        result: normalized(&result),
        eth0_addresses,
        nft: nft_names(&sb.host().name),
        leases: lease_files(&sb.dir().join("ipam").join(NET)).len(),
        cache_entries: cache_entries(sb),
        nft_after_del: Vec::new(),
    };

    let check = rcni(sb, plugins, &["check", NET, netns]);
    assert!(
        check.status.success(),
        "{label} CHECK: {}",
        text(&check.stderr)
    );
    let del = rcni(sb, plugins, &["del", NET, netns]);
    assert!(del.status.success(), "{label} DEL: {}", text(&del.stderr));
    assert!(link(pod, "eth0").unwrap().is_none(), "{label}: eth0 left");
    assert!(
        lease_files(&sb.dir().join("ipam").join(NET)).is_empty(),
        "{label}: lease left"
    );
    assert_eq!(cache_entries(sb), 0, "{label}: cache entry left");
    let after_del = nft_names(&sb.host().name);
    // The attachment's rules and set elements are gone; shared tables and chains stay (as
    // with the Go plugins), so a second round ends where it started.
    assert_ne!(after_del, state.nft, "{label}: DEL changed no nft state");
    if !before.is_empty() {
        assert_eq!(after_del, before, "{label}: DEL left nft state");
    }
    eprintln!(
        "{label}: nft before {before:?}\nafter ADD {:?}\nafter DEL {after_del:?}",
        state.nft
    );
    State {
        nft_after_del: after_del,
        ..state
    }
}

const PLUGINS: [&str; 3] = ["bridge", "host-local", "portmap"];

/// A sandbox with the conflist and one container namespace (its name and path); `None`
/// (after saying why) when the test cannot run here.
fn setup() -> Option<(Sandbox, String, String)> {
    if !is_root() {
        eprintln!("SKIPPED: needs root for network namespaces");
        return None;
    }
    let sb = Sandbox::new().unwrap();
    write_conflist(&sb);
    let pod = sb.add_container().unwrap();
    let netns = pod.path.display().to_string();
    Some((sb, pod.name.clone(), netns))
}

#[test]
fn forked_and_executed_plugins_leave_the_same_state() {
    let Some((sb, pod, netns)) = setup() else {
        return;
    };

    let executed_dir = sb
        .link_plugins(
            bin_path("rcni-plugins").expect("build rcni-plugins first"),
            &PLUGINS,
        )
        .unwrap();
    let executed = attach_and_detach(&sb, &executed_dir, &pod, &netns, false);
    // link_plugins replaces the links in the same directory: now to rcni itself.
    let forked_dir = sb
        .link_plugins(env!("CARGO_BIN_EXE_rcni"), &PLUGINS)
        .unwrap();
    let forked = attach_and_detach(&sb, &forked_dir, &pod, &netns, true);
    assert_eq!(forked, executed);
    assert_eq!(forked.eth0_addresses, 1);
    assert_eq!((forked.leases, forked.cache_entries), (1, 1));
    assert!(
        !forked.nft.is_empty(),
        "ipMasq and portmap made no nft tables"
    );
}

#[test]
fn a_forked_plugin_past_the_timeout_is_killed() {
    let Some((sb, pod, netns)) = setup() else {
        return;
    };
    let plugins = sb
        .link_plugins(env!("CARGO_BIN_EXE_rcni"), &PLUGINS)
        .unwrap();
    // Hold host-local's store lock: bridge's IPAM step waits for it past rcni's timeout.
    let store = sb.dir().join("ipam").join(NET);
    fs::create_dir_all(&store).unwrap();
    let lock = fs::File::create(store.join("lock")).unwrap();
    lock.lock().unwrap();
    let add = rcni(&sb, &plugins, &["add", NET, &netns, "--timeout", "1"]);
    let log = text(&add.stderr);
    assert!(
        !add.status.success(),
        "ADD succeeded under a held lock: {log}"
    );
    assert!(log.contains("starting bridge forked"), "{log}");
    assert!(log.contains("did not finish within"), "{log}");
    // The forked bridge ran in the sandbox's host namespace: killed and reaped, no process
    // is left there.
    let pids = std::process::Command::new("ip")
        .args(["netns", "pids", &sb.host().name])
        .output()
        .unwrap();
    assert!(pids.status.success());
    assert_eq!(
        text(&pids.stdout).trim(),
        "",
        "processes left in the host namespace"
    );
    drop(lock);
    let del = rcni(&sb, &plugins, &["del", NET, &netns]);
    assert!(del.status.success(), "DEL: {}", text(&del.stderr));
    assert!(link(&pod, "eth0").unwrap().is_none());
    assert!(lease_files(&store).is_empty());
    assert_eq!(cache_entries(&sb), 0);
}
