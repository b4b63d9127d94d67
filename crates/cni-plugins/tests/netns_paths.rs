//! CNI_NETNS naming something that is not a network namespace: a
//! FIFO, a regular file, a directory, a mount or UTS namespace, a symlink loop, an over-long
//! name. ADD of every plugin that enters the namespace answers at once with a CNI error
//! (code 8) and a non-zero exit; DEL behaves as for a vanished namespace (host-side cleanup,
//! success). Every plugin runs under `timeout -s KILL`, so a plugin that blocks on the path
//! fails the test instead of hanging it. Needs root.

mod attach;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use attach::*;
use cni_testkit::{PluginCall, PluginOutput};
use serde_json::{json, Value};

/// How long a plugin may take before it counts as blocked (and is killed).
const BOUND: Duration = Duration::from_secs(10);

const PLUGINS: &[&str] = &[
    "macvlan",
    "ipvlan",
    "vlan",
    "dummy",
    "tuning",
    "loopback",
    "bandwidth",
    "portmap",
];

/// An [`Env`] with every plugin of this file linked into its CNI_PATH, and a host veth
/// `nsmaster0` as master for the sub-link plugins.
fn lab() -> Env {
    let env = Env::new();
    for name in PLUGINS {
        std::os::unix::fs::symlink(BIN, env.cni_dir.join(name)).unwrap();
    }
    for argv in [
        &[
            "ip",
            "link",
            "add",
            "nsmaster0",
            "type",
            "veth",
            "peer",
            "name",
            "nsmaster0p",
        ][..],
        &["ip", "link", "set", "nsmaster0", "up"],
        &["ip", "link", "set", "nsmaster0p", "up"],
    ] {
        env.sb.exec_host(argv).unwrap().assert_success();
    }
    env
}

/// Paths that exist (or cannot exist) but are not network namespaces, with a label.
fn bad_paths(env: &Env) -> Vec<(&'static str, PathBuf)> {
    let dir = env.sb.dir().join("not-netns");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let file = dir.join("regular");
    std::fs::write(&file, "").unwrap();
    let (a, b) = (dir.join("loop-a"), dir.join("loop-b"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    vec![
        ("fifo", fifo),
        ("regular file", file),
        ("directory", dir.clone()),
        ("mount namespace", PathBuf::from("/proc/self/ns/mnt")),
        ("uts namespace", PathBuf::from("/proc/self/ns/uts")),
        ("symlink loop", a),
        ("over-long name", dir.join("n".repeat(300))),
    ]
}

/// Runs `plugin` like [`Env::run`] but under `timeout -s KILL` [`BOUND`], and returns the
/// output and how long it took.
fn run_bounded(
    env: &Env,
    plugin: &str,
    call: &PluginCall,
    stdin: &str,
) -> (PluginOutput, Duration) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", env.host(), "timeout", "-s", "KILL"])
        .arg(BOUND.as_secs().to_string())
        .arg(env.cni_dir.join(plugin));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(call.env_vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    let out = PluginOutput {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (out, took)
}

fn call(env: &Env, command: &str, cid: &str, netns: &Path) -> PluginCall {
    PluginCall::new(command)
        .container_id(cid)
        .netns(netns)
        .ifname("eth0")
        .path(&env.cni_dir)
}

/// A prevResult naming `eth0` in `netns`, for the chained plugins.
fn prev(netns: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": netns}],
        "ips": [{"address": "198.18.7.2/24", "interface": 0}],
    })
}

/// An ADD config for `plugin` that gets as far as opening the namespace.
fn add_conf(env: &Env, plugin: &str, netns: &Path) -> Value {
    let base = |extra: Value| {
        let mut c = json!({"cniVersion": "1.0.0", "name": "pathnet", "type": plugin});
        merge(&mut c, extra);
        c
    };
    let ipam = host_local(&env.data_dir, "198.18.7.0/24");
    match plugin {
        "bridge" => bridge_conf(env, "pathnet", "brpath0", "198.18.7.0/24", json!({})),
        "ptp" => ptp_conf(env, "pathnet", "198.18.7.0/24", json!({})),
        "macvlan" => base(json!({"master": "nsmaster0"})),
        "ipvlan" => base(json!({"master": "nsmaster0", "ipam": ipam})),
        "vlan" => base(json!({"master": "nsmaster0", "vlanId": 7, "ipam": ipam})),
        "dummy" => base(json!({"ipam": ipam})),
        "loopback" => base(json!({})),
        "tuning" => base(json!({"mtu": 1400, "prevResult": prev(netns)})),
        "bandwidth" => base(json!({
            "ingressRate": 1_000_000, "ingressBurst": 8_000_000, "prevResult": prev(netns)
        })),
        "portmap" => base(json!({
            "runtimeConfig": {"portMappings": [
                {"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}
            ]},
            "prevResult": prev(netns),
        })),
        other => panic!("no config for {other}"),
    }
}

#[test]
fn add_with_a_path_that_is_not_a_network_namespace_fails_at_once() {
    let env = lab();
    let mut plugins = vec!["bridge", "ptp"];
    plugins.extend(PLUGINS.iter().copied().filter(|p| *p != "portmap"));
    for (what, path) in bad_paths(&env) {
        for plugin in &plugins {
            let conf = add_conf(&env, plugin, &path).to_string();
            let (out, took) = run_bounded(&env, plugin, &call(&env, "ADD", "c1", &path), &conf);
            assert!(took < BOUND, "{plugin} ADD blocked on a {what}:\n{out}");
            assert!(!out.success(), "{plugin} ADD on a {what} succeeded:\n{out}");
            let err = out
                .json()
                .unwrap_or_else(|e| panic!("{plugin} on a {what}: {e}"));
            assert_eq!(err["code"], 8, "{plugin} on a {what}:\n{out}");
            let msg = err["msg"].as_str().unwrap();
            assert!(
                msg.contains("is not a network namespace"),
                "{plugin} on a {what}: {msg}"
            );
        }
        // Nothing was made on the host.
        assert_eq!(
            link_names(env.host()),
            ["lo", "nsmaster0", "nsmaster0p"],
            "{what}"
        );
        assert!(env.leases("pathnet").is_empty(), "{what}");
    }
}

#[test]
fn portmap_which_never_enters_the_namespace_answers_at_once() {
    // portmap (like Go's) reads only prevResult, never CNI_NETNS: it must not block either.
    let env = lab();
    for (what, path) in bad_paths(&env) {
        let conf = add_conf(&env, "portmap", &path).to_string();
        let (out, took) = run_bounded(&env, "portmap", &call(&env, "ADD", "c1", &path), &conf);
        assert!(took < BOUND, "portmap ADD blocked on a {what}:\n{out}");
        let (out, took) = run_bounded(&env, "portmap", &call(&env, "DEL", "c1", &path), &conf);
        assert!(took < BOUND, "portmap DEL blocked on a {what}:\n{out}");
        out.assert_success();
    }
}

/// ADD with a real pod, then DEL naming `path` instead: success, the host veth and the lease
/// are gone, as after DEL with a vanished namespace.
fn del_cleans_up_the_host_side(plugin: &str) {
    let env = lab();
    for (i, (what, path)) in bad_paths(&env).into_iter().enumerate() {
        let pod = env.pod();
        let cid = format!("c{i}");
        let conf = add_conf(&env, plugin, &pod.path);
        env.add(plugin, &pod, &cid, &conf);
        assert_eq!(env.leases("pathnet").len(), 1, "{what}");
        let veths = || {
            link_names(env.host())
                .into_iter()
                .filter(|n| n.starts_with("veth"))
                .collect::<Vec<_>>()
        };
        assert_eq!(veths().len(), 1, "{what}");

        let (out, took) = run_bounded(
            &env,
            plugin,
            &call(&env, "DEL", &cid, &path),
            &conf.to_string(),
        );
        assert!(took < BOUND, "{plugin} DEL blocked on a {what}:\n{out}");
        out.assert_success();
        assert_eq!(out.stdout, "", "{out}");
        assert!(
            env.leases("pathnet").is_empty(),
            "{plugin} {what}: lease kept"
        );
        assert!(veths().is_empty(), "{plugin} {what}: host veth kept");
        assert!(!has_link(&pod.name, "eth0"), "{plugin} {what}: eth0 kept");
        env.sb.remove_container(&pod).unwrap();
    }
}

#[test]
fn bridge_del_with_a_path_that_is_not_a_network_namespace_cleans_up_the_host() {
    del_cleans_up_the_host_side("bridge");
}

#[test]
fn ptp_del_with_a_path_that_is_not_a_network_namespace_cleans_up_the_host() {
    del_cleans_up_the_host_side("ptp");
}

#[test]
fn del_of_every_plugin_with_a_path_that_is_not_a_network_namespace_succeeds() {
    let env = lab();
    for (what, path) in bad_paths(&env) {
        for plugin in PLUGINS
            .iter()
            .filter(|p| !["tuning", "portmap"].contains(p))
        {
            let conf = add_conf(&env, plugin, &path).to_string();
            let (out, took) = run_bounded(&env, plugin, &call(&env, "DEL", "c1", &path), &conf);
            assert!(took < BOUND, "{plugin} DEL blocked on a {what}:\n{out}");
            assert!(out.success(), "{plugin} DEL on a {what}:\n{out}");
        }
    }
}
