//! Interop with Debian's Go reference loopback (`/usr/lib/cni/loopback`, package
//! containernetworking-plugins): the same requests through both give the same answers.
//! Skips with a message when the Go plugins are not installed. Needs root.

mod common;

use std::path::PathBuf;

use cni_testkit::{go_plugins_dir, PluginCall};
use cni_types::{CniResult, SpecVersion};
use common::{is_up, Setup};
use serde_json::Value;

fn go_loopback() -> Option<PathBuf> {
    let dir = go_plugins_dir();
    if dir.is_none() {
        eprintln!("skipped: Go reference plugins not installed in /usr/lib/cni");
    }
    dir.map(|d| d.join("loopback"))
}

/// Replaces the namespace path in a result so results from two namespaces compare.
fn without_sandbox(mut v: Value) -> Value {
    if let Some(ifaces) = v["interfaces"].as_array_mut() {
        for i in ifaces {
            i["sandbox"] = Value::from("<netns>");
        }
    }
    v
}

/// Debian's Go loopback (v1.1.x) stamps its 1.0.0-layout result with the requested version
/// instead of converting it, so at 0.x it prints `interfaces`/`ips` without `version` where
/// the spec wants `ip4`/`ip6` (0.1.0, 0.2.0) or `ips[].version` (0.3.x, 0.4.0). We print the
/// spec layout; to compare the content, Go's answer is converted the way Go meant to.
fn go_as_spec_layout(mut v: Value, version: &str) -> Value {
    // libcni before v1.2 writes `"dns":{}` in 1.x results; later ones (and we) omit it.
    if version >= "1.0.0" && v["dns"] == serde_json::json!({}) {
        v.as_object_mut().unwrap().remove("dns");
    }
    let ips = v["ips"].as_array().cloned().unwrap_or_default();
    let unconverted =
        version < "1.0.0" && !ips.is_empty() && ips.iter().all(|ip| ip.get("version").is_none());
    if !unconverted {
        return v;
    }
    eprintln!("note: Go loopback printed an unconverted 1.0.0 layout at {version}");
    let mut as_v1 = v.clone();
    as_v1["cniVersion"] = Value::from("1.0.0");
    let parsed = CniResult::parse(&as_v1, SpecVersion::V1_0_0).unwrap();
    parsed.to_value(version.parse().unwrap()).unwrap()
}

/// The versions the Go plugin supports, from its VERSION answer.
fn go_versions(s: &Setup, go: &PathBuf) -> Vec<String> {
    let out =
        s.sb.run_plugin(
            go,
            &PluginCall::new("VERSION").stdin(r#"{"cniVersion":"1.0.0"}"#),
        )
        .unwrap();
    out.assert_success();
    serde_json::from_value(out.json().unwrap()["supportedVersions"].clone()).unwrap()
}

// ADD results match the Go plugin's for every version both speak; CHECK and DEL agree.
#[test]
fn add_check_del_match_go() {
    let Some(go) = go_loopback() else { return };
    let s = Setup::new(&["loopback"]);
    let go_pod = s.sb.add_container().unwrap();
    let versions = go_versions(&s, &go);
    assert!(!versions.is_empty());
    for version in &versions {
        let stdin = format!(r#"{{"cniVersion":"{version}","name":"lo-net","type":"loopback"}}"#);
        let ours = s.run("loopback", &s.call("ADD", &stdin));
        let theirs =
            s.sb.run_plugin(&go, &s.call("ADD", &stdin).netns(&go_pod.path))
                .unwrap();
        ours.assert_success();
        theirs.assert_success();
        assert_eq!(
            without_sandbox(ours.json().unwrap()),
            without_sandbox(go_as_spec_layout(theirs.json().unwrap(), version)),
            "ADD at {version}:\nours: {ours}\ngo: {theirs}"
        );
        assert!(is_up(&s.pod.name, "lo") && is_up(&go_pod.name, "lo"));
        for command in ["CHECK", "DEL"] {
            if command == "CHECK" && version.as_str() < "0.4.0" {
                continue;
            }
            let ours = s.run("loopback", &s.call(command, &stdin));
            let theirs =
                s.sb.run_plugin(&go, &s.call(command, &stdin).netns(&go_pod.path))
                    .unwrap();
            assert_eq!(
                (ours.status, ours.stdout.as_str()),
                (theirs.status, theirs.stdout.as_str()),
                "{command} at {version}"
            );
        }
        assert!(!is_up(&s.pod.name, "lo") && !is_up(&go_pod.name, "lo"));
    }
}

// The same bad requests give the same error codes as the Go plugin.
#[test]
fn error_codes_match_go() {
    let Some(go) = go_loopback() else { return };
    let s = Setup::new(&["loopback"]);
    let good = r#"{"cniVersion":"1.0.0","name":"lo-net","type":"loopback"}"#;
    // (request, whether the message must match too). Interface-name messages come from
    // cni-types and are worded differently from Go's; only their code is compared.
    let bad_version = r#"{"cniVersion":"9.9.9","name":"n","type":"loopback"}"#;
    let old_check = r#"{"cniVersion":"0.3.1","name":"n","type":"loopback"}"#;
    let cases = [
        (s.call("ADD", "{not json"), true),
        (
            s.call("ADD", r#"{"cniVersion":"1.0.0","type":"loopback"}"#),
            true,
        ),
        (s.call("ADD", bad_version), true),
        (s.call("ADD", good).container_id("../../x"), true),
        (s.call("ADD", good).ifname("abcdefghijklmnop"), false),
        (s.call("FOO", good), true),
        (s.call("CHECK", old_check), true),
        (PluginCall::new("ADD").container_id("c1").stdin(good), true),
    ];
    for (call, compare_msg) in cases {
        let ours = s.run("loopback", &call);
        let theirs = s.sb.run_plugin(&go, &call).unwrap();
        assert!(!ours.success() && !theirs.success());
        assert_eq!(
            ours.error_code(),
            theirs.error_code(),
            "\nours: {ours}\ngo: {theirs}"
        );
        if !compare_msg {
            continue;
        }
        let (o, t) = (ours.json().unwrap(), theirs.json().unwrap());
        // JSON parser messages differ by library; the part before them must not.
        let head = |v: &Value| {
            let msg = v["msg"].as_str().unwrap_or_default().to_string();
            let prefix = "error unmarshall network config:";
            if msg.starts_with(prefix) {
                prefix.to_string()
            } else {
                msg
            }
        };
        assert_eq!(head(&o), head(&t), "\nours: {ours}\ngo: {theirs}");
    }
}
