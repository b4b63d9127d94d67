//! The real `rcni-plugins` binary run as `loopback` inside throwaway namespaces (the
//! skeleton's protocol checks, DEL idempotence, and the requests real runtimes send). Needs root.

mod common;

use cni_testkit::PluginCall;
use cni_testkit::{assert_clean_stdout, assert_cni_error, assert_silent_success};
use common::{is_up, Setup};
use serde_json::{json, Value};

const LOOPBACK: &str = "loopback";

fn conf(version: &str) -> String {
    format!(r#"{{"cniVersion":"{version}","name":"lo-net","type":"loopback"}}"#)
}

/// Addresses of `lo` in `ns` as `ip -j` shows them, as `addr/prefix` strings.
fn lo_addresses(ns: &str) -> Vec<String> {
    cni_testkit::addrs(ns)
        .unwrap()
        .into_iter()
        .filter(|l| l["ifname"] == "lo")
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

// ADD brings lo up, CHECK passes, DEL brings it down, DEL again and DEL with a
// deleted or empty netns succeed, CHECK after DEL fails.
#[test]
fn add_check_del_lifecycle() {
    let s = Setup::new(&[LOOPBACK]);
    assert!(!is_up(&s.pod.name, "lo"), "a fresh namespace has lo down");

    let out = s.run(LOOPBACK, &s.call("ADD", &conf("1.1.0")));
    out.assert_success();
    assert!(is_up(&s.pod.name, "lo"));
    let result = out.json().unwrap();
    let sandbox = s.pod.path.to_str().unwrap();
    assert_eq!(
        result["interfaces"],
        json!([{"name": "lo", "mac": "00:00:00:00:00:00", "sandbox": sandbox}])
    );
    // The reported addresses are the first IPv4 and IPv6 address the kernel shows on lo.
    let kernel = lo_addresses(&s.pod.name);
    let ips = result["ips"].as_array().unwrap();
    assert!(!ips.is_empty());
    for ip in ips {
        assert_eq!(ip["interface"], 0);
        assert!(kernel.contains(&ip["address"].as_str().unwrap().to_string()));
    }
    assert_eq!(ips[0]["address"], "127.0.0.1/8");

    assert_silent_success(&s.run(LOOPBACK, &s.call("CHECK", &conf("1.1.0"))));

    assert_silent_success(&s.run(LOOPBACK, &s.call("DEL", &conf("1.1.0"))));
    assert!(!is_up(&s.pod.name, "lo"));
    let e = assert_cni_error(&s.run(LOOPBACK, &s.call("CHECK", &conf("1.1.0"))), 999);
    assert_eq!(e["msg"], "loopback interface is down");
    assert_silent_success(&s.run(LOOPBACK, &s.call("DEL", &conf("1.1.0"))));

    s.sb.remove_container(&s.pod).unwrap();
    assert_silent_success(&s.run(LOOPBACK, &s.call("DEL", &conf("1.1.0"))));
    let no_netns = s.call("DEL", &conf("1.1.0")).netns("");
    assert_silent_success(&s.run(LOOPBACK, &no_netns));
}

// The ADD result in each layout real runtimes ask for.
#[test]
fn add_result_per_version() {
    let s = Setup::new(&[LOOPBACK]);
    let sandbox = s.pod.path.to_str().unwrap().to_string();
    for version in ["0.1.0", "0.2.0"] {
        let v = s
            .run(LOOPBACK, &s.call("ADD", &conf(version)))
            .json()
            .unwrap();
        assert_eq!(v["cniVersion"], version);
        assert_eq!(v["ip4"]["ip"], "127.0.0.1/8");
        assert!(
            v.get("interfaces").is_none() && v.get("ips").is_none(),
            "{v}"
        );
        assert_eq!(v["dns"], json!({}));
    }
    for version in ["0.3.0", "0.3.1", "0.4.0"] {
        let v = s
            .run(LOOPBACK, &s.call("ADD", &conf(version)))
            .json()
            .unwrap();
        assert_eq!(v["cniVersion"], version);
        assert_eq!(v["interfaces"][0]["sandbox"], sandbox.as_str());
        assert_eq!(
            v["ips"][0],
            json!({"version": "4", "interface": 0, "address": "127.0.0.1/8"})
        );
        assert_eq!(v["dns"], json!({}));
    }
    for version in ["1.0.0", "1.1.0"] {
        let out = s.run(LOOPBACK, &s.call("ADD", &conf(version)));
        assert!(
            out.stdout.starts_with("{\n    \"cniVersion\""),
            "4-space indent"
        );
        let v = out.json().unwrap();
        assert_eq!(v["cniVersion"], version);
        assert_eq!(
            v["ips"][0],
            json!({"interface": 0, "address": "127.0.0.1/8"})
        );
        assert!(v.get("dns").is_none());
    }
}

// containerd's built-in network: list `cni-loopback` at 0.3.1, the plugin gets the flattened
// config and the CRI CNI_ARGS.
#[test]
fn containerd_builtin_loopback() {
    let s = Setup::new(&[LOOPBACK]);
    let call = s
        .call("ADD", r#"{"cniVersion":"0.3.1","name":"cni-loopback","type":"loopback"}"#)
        .container_id("3f2a9c4e5d6b7a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6f7e8d9c0b1a2f")
        .args("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nginx;K8S_POD_INFRA_CONTAINER_ID=3f2a9c4e5d6b;K8S_POD_UID=8d3c6b1e-2f4a-4e5b-9c7d-0a1b2c3d4e5f");
    let out = s.run(LOOPBACK, &call);
    out.assert_success();
    let v = out.json().unwrap();
    assert_eq!(v["cniVersion"], "0.3.1");
    assert_eq!(v["interfaces"][0]["name"], "lo");
    assert!(is_up(&s.pod.name, "lo"));
    let del = PluginCall {
        command: Some("DEL".into()),
        ..call
    };
    assert_silent_success(&s.run(LOOPBACK, &del));
}

// CRI-O (ocicni) sends its loopback network at 0.1.0 or 0.2.0.
#[test]
fn crio_builtin_loopback() {
    let s = Setup::new(&[LOOPBACK]);
    for version in ["0.1.0", "0.2.0"] {
        let stdin =
            format!(r#"{{"cniVersion":"{version}","name":"cni-loopback","type":"loopback"}}"#);
        let out = s.run(LOOPBACK, &s.call("ADD", &stdin));
        out.assert_success();
        assert_eq!(out.json().unwrap()["ip4"]["ip"], "127.0.0.1/8");
        assert_silent_success(&s.run(LOOPBACK, &s.call("DEL", &stdin)));
    }
}

// podman's probe: VERSION with dummy values.
#[test]
fn podman_version_probe() {
    let s = Setup::new(&[LOOPBACK]);
    let call = PluginCall::new("VERSION")
        .netns("dummy")
        .ifname("dummy")
        .path("dummy")
        .stdin(r#"{"cniVersion":"1.1.0"}"#);
    let out = s.run(LOOPBACK, &call);
    out.assert_success();
    assert_eq!(
        out.json().unwrap(),
        json!({"cniVersion": "1.1.0", "supportedVersions": ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    let old = s.run(LOOPBACK, &call.clone().stdin(r#"{"cniVersion":"0.4.0"}"#));
    assert_eq!(old.json().unwrap()["cniVersion"], "0.4.0");
}

// Bad inputs get the right code, never a panic.
#[test]
fn bad_inputs() {
    let s = Setup::new(&[LOOPBACK]);
    let good = conf("1.1.0");
    let cases: Vec<(&str, PluginCall, u64)> = vec![
        ("malformed JSON", s.call("ADD", "{not json"), 6),
        ("not an object", s.call("ADD", "[]"), 6),
        ("empty stdin", s.call("ADD", ""), 6),
        (
            "missing name",
            s.call("ADD", r#"{"cniVersion":"1.1.0","type":"loopback"}"#),
            7,
        ),
        ("unknown version", s.call("ADD", &conf("9.9.9")), 1),
        ("pre-release version", s.call("ADD", &conf("1.0.0-rc1")), 1),
        (
            "hostile container id",
            s.call("ADD", &good).container_id("../../x"),
            4,
        ),
        (
            "container id with slash",
            s.call("DEL", &good).container_id("a/b"),
            4,
        ),
        (
            "ifname too long",
            s.call("ADD", &good).ifname("abcdefghijklmnop"),
            4,
        ),
        ("ifname with slash", s.call("ADD", &good).ifname("a/b"), 4),
        ("unknown command", s.call("FOO", &good), 4),
        (
            "missing netns",
            s.call("ADD", &good).netns("/run/netns/rcni-does-not-exist"),
            3,
        ),
        (
            "netns is not a namespace",
            s.call("ADD", &good).netns("/etc/hostname"),
            8,
        ),
        ("CHECK at 0.3.1", s.call("CHECK", &conf("0.3.1")), 1),
        ("GC at 1.0.0", s.call("GC", &conf("1.0.0")), 1),
        ("STATUS at 1.0.0", s.call("STATUS", &conf("1.0.0")), 1),
    ];
    for (what, call, code) in cases {
        let out = s.run(LOOPBACK, &call);
        let e = assert_cni_error(&out, code);
        assert_eq!(out.status, 1, "{what}: {out}");
        eprintln!("{what}: {e}");
    }
    // Every missing variable named in one error.
    let out = s.run(
        LOOPBACK,
        &PluginCall::new("ADD")
            .container_id("c1")
            .stdin(good.as_str()),
    );
    let e = assert_cni_error(&out, 4);
    assert_eq!(
        e["msg"],
        "required env variables [CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"
    );
    // No command at all: about text on stderr, exit 0, nothing on stdout.
    let out = s.run(LOOPBACK, &PluginCall::default());
    assert_silent_success(&out);
    assert!(
        out.stderr
            .contains("CNI protocol versions supported: 0.1.0"),
        "{out}"
    );
}

// STATUS and GC at 1.1.0 are no-ops that succeed silently.
#[test]
fn status_and_gc_succeed() {
    let s = Setup::new(&[LOOPBACK]);
    let status = PluginCall::new("STATUS")
        .path(&s.cni_dir)
        .stdin(conf("1.1.0"));
    assert_silent_success(&s.run(LOOPBACK, &status));
    let gc = PluginCall::new("GC").path(&s.cni_dir).stdin(
        r#"{"cniVersion":"1.1.0","name":"lo-net","type":"loopback","cni.dev/valid-attachments":[]}"#,
    );
    assert_silent_success(&s.run(LOOPBACK, &gc));
}

// A prevResult is passed through unchanged (at the request's version).
#[test]
fn prev_result_passthrough() {
    let s = Setup::new(&[LOOPBACK]);
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": "/var/run/netns/x"}],
        "ips": [{"interface": 0, "address": "198.18.1.5/16", "gateway": "198.18.1.1"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["198.18.1.1"]}
    });
    let stdin =
        json!({"cniVersion": "1.0.0", "name": "chain", "type": "loopback", "prevResult": prev});
    let out = s.run(LOOPBACK, &s.call("ADD", &stdin.to_string()));
    out.assert_success();
    assert_eq!(out.json().unwrap(), prev);
    assert!(is_up(&s.pod.name, "lo"));
}

// lo carrying a non-loopback address makes ADD fail.
#[test]
fn non_loopback_address_rejected() {
    let s = Setup::new(&[LOOPBACK]);
    s.sb.exec_in(
        &s.pod.name,
        ["ip", "addr", "add", "198.18.99.1/24", "dev", "lo"],
    )
    .unwrap()
    .assert_success();
    let e = assert_cni_error(&s.run(LOOPBACK, &s.call("ADD", &conf("1.1.0"))), 999);
    assert_eq!(
        e["msg"],
        "loopback interface found with non-loopback address \"198.18.99.1\""
    );
}

// CNI_NETNS naming the plugin's own namespace is refused before anything changes;
// CNI_NETNS_OVERRIDE=1 lifts the check.
#[test]
fn own_netns_refused_before_side_effects() {
    let s = Setup::new(&[LOOPBACK]);
    let host = s.sb.host().clone();
    assert!(is_up(&host.name, "lo"));
    let del = s.call("DEL", &conf("1.1.0")).netns(&host.path);
    let e = assert_cni_error(&s.run(LOOPBACK, &del), 8);
    assert_eq!(
        e["msg"],
        "plugin's netns and netns from CNI_NETNS should not be the same"
    );
    assert!(
        is_up(&host.name, "lo"),
        "the plugin's own lo was not touched"
    );
    let add = s
        .call("ADD", &conf("1.1.0"))
        .netns(&host.path)
        .env("CNI_NETNS_OVERRIDE", "1");
    s.run(LOOPBACK, &add).assert_success();
}

// The panic hook answers with a code-999 error object and a non-zero exit (debug builds
// honour RCNI_TEST_PANIC=1).
#[test]
fn panic_hook_answers_in_cni_form() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: RCNI_TEST_PANIC is only honoured by debug builds");
        return;
    }
    let s = Setup::new(&[LOOPBACK]);
    let call = s.call("ADD", &conf("0.4.0")).env("RCNI_TEST_PANIC", "1");
    let out = s.run(LOOPBACK, &call);
    assert_ne!(out.status, 0);
    let e = assert_cni_error(&out, 999);
    assert_eq!(e["cniVersion"], "0.4.0");
    assert!(
        out.stderr.contains("RCNI_TEST_PANIC in ADD"),
        "message in the log: {out}"
    );
    assert!(!is_up(&s.pod.name, "lo"));

    // A panic on a worker thread (as inside a namespace) answers the same way, no deadlock.
    let call = s.call("CHECK", &conf("1.0.0")).env("RCNI_TEST_PANIC", "1");
    let out = s.run(LOOPBACK, &call);
    assert_eq!(assert_cni_error(&out, 999)["cniVersion"], "1.0.0");
    assert!(out.stderr.contains("worker thread"), "{out}");
}

// Logging goes to RCNI_LOG_FILE when set, never to stdout.
#[test]
fn log_file() {
    let s = Setup::new(&[LOOPBACK]);
    let log = s.sb.dir().join("plugin.log");
    let call = s
        .call("ADD", &conf("1.1.0"))
        .env("RCNI_LOG", "debug")
        .env("RCNI_LOG_FILE", &log);
    let out = s.run(LOOPBACK, &call);
    out.assert_success();
    let _: Value = out.json().unwrap();
    assert_clean_stdout(&out);
    assert_eq!(out.stderr, "");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("DEBUG loopback["), "{text}");
    assert!(text.contains("ADD container=c1"), "{text}");
}
