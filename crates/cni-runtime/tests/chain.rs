//! Runtime behaviour against fake plugins: the chain procedures of SPEC.md, Section 3: Execution of
//! Network Configurations, and what libcni (`libcni/api.go`, `pkg/invoke`) does beyond them.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use base64::Engine as _;
use cni_runtime::{Attachment, AttachmentId, Network, RuntimeError, Stage};
use common::{chain, default_result, network, Fake};
use serde_json::{json, Value};

fn att() -> Attachment {
    Attachment::new("c1", "/run/netns/t1", "eth0")
        .with_args(vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAME".into(), "p".into()),
        ])
        .with_capability(
            "portMappings",
            json!([{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]),
        )
        .with_capability("mac", json!("c2:11:22:33:44:55"))
}

fn abc() -> Fake {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    f
}

// ADD over the chain in order: each plugin's stdin (name and version overridden, own bytes kept,
// `runtimeConfig` from declared capabilities, `capabilities` kept, `prevResult` from the plugin
// before), all six CNI_* variables set, `CNI_ARGS` in its `k=v;k=v` form.
#[test]
fn add_chain() {
    let f = abc();
    f.answer("C", "ADD", r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/t1"}],"ips":[{"address":"198.18.0.5/16","gateway":"198.18.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}"#, 0);
    let net = chain("1.0.0", "");
    let rt = f.runtime();
    let result = rt.add(&net, &att()).unwrap();
    assert_eq!(f.calls_str(), ["A ADD", "B ADD", "C ADD"]);
    let a = f.stdin(1);
    assert!(a.get("prevResult").is_none());
    assert_eq!(
        a["runtimeConfig"],
        json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]})
    );
    // The plugin's own bytes reach it unchanged (no float64 round trip).
    assert!(f.stdin_raw(1).contains(r#""big":12345678901234567890123"#));
    let b = f.stdin(2);
    assert_eq!(
        b["prevResult"],
        serde_json::from_str::<Value>(&default_result("A")).unwrap()
    );
    assert!(b.get("runtimeConfig").is_none());
    for seq in 1..=3 {
        let s = f.stdin(seq);
        assert_eq!(s["name"], "net");
        assert_eq!(s["cniVersion"], "1.0.0");
        let env = f.env(seq);
        assert_eq!(env["CNI_COMMAND"], "ADD");
        assert_eq!(env["CNI_CONTAINERID"], "c1");
        assert_eq!(env["CNI_NETNS"], "/run/netns/t1");
        assert_eq!(env["CNI_IFNAME"], "eth0");
        assert_eq!(env["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=p");
        assert_eq!(env["CNI_PATH"], f.bin().display().to_string());
    }
    assert_eq!(result.ips[0].address.to_string(), "198.18.0.5/16");
    assert_eq!(result.interfaces[0].sandbox, "/run/netns/t1");
}

// Intermediate results (passed unconverted by libcni) are converted to the list version.
#[test]
fn prev_result_is_converted_to_the_list_version() {
    let f = abc();
    f.answer(
        "A",
        "ADD",
        r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"198.18.2.3/24"}],"dns":{}}"#,
        0,
    );
    let net = chain("1.0.0", "");
    f.runtime().add(&net, &att()).unwrap();
    let prev = &f.stdin(2)["prevResult"];
    assert_eq!(prev["cniVersion"], "1.0.0");
    assert!(prev["ips"][0].get("version").is_none());
}

// The cache entry, in libcni's layout.
#[cfg(unix)]
#[test]
fn cache_write() {
    let f = abc();
    let net = chain("1.0.0", "");
    f.runtime().add(&net, &att()).unwrap();
    let path = f.cache_file("net", "c1", "eth0");
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let raw = fs::read_to_string(&path).unwrap();
    assert!(
        raw.starts_with(r#"{"kind":"cniCacheV1","containerId":"c1","config":""#),
        "{raw}"
    );
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["ifName"], "eth0");
    assert_eq!(v["networkName"], "net");
    assert_eq!(v["netns"], "/run/netns/t1");
    assert_eq!(
        v["cniArgs"],
        json!([["IgnoreUnknown", "1"], ["K8S_POD_NAME", "p"]])
    );
    assert_eq!(v["capabilityArgs"]["mac"], "c2:11:22:33:44:55");
    assert_eq!(v["result"]["interfaces"][0]["name"], "if-C");
    let config = base64::engine::general_purpose::STANDARD
        .decode(v["config"].as_str().unwrap())
        .unwrap();
    assert_eq!(config, net.config_bytes());
    // Keys of nested maps come out sorted, as Go writes them.
    assert!(
        raw.contains(r#""ips":[{"address":"198.18.9.1/24","interface":0}]"#),
        "{raw}"
    );
}

// A failed ADD, plus the rollback libcni does not do.
#[test]
fn add_failure_rolls_back_the_whole_chain() {
    let f = abc();
    f.answer("B", "ADD", r#"{"code":7,"msg":"bad"}"#, 1);
    let net = chain("1.0.0", "");
    let err = f.runtime().add(&net, &att()).unwrap_err();
    assert_eq!(err.code(), 7);
    let text = err.to_string();
    assert!(
        text.contains(r#"type="B""#) && text.contains("(add, exec)"),
        "{text}"
    );
    assert!(matches!(err, RuntimeError::RolledBack { ref rollback, .. } if rollback.is_empty()));
    assert_eq!(f.calls_str(), ["A ADD", "B ADD", "C DEL", "B DEL", "A DEL"]);
    // The partial result (A's) is the rollback's prevResult.
    assert_eq!(f.stdin(3)["prevResult"]["interfaces"][0]["name"], "if-A");
    assert_eq!(f.env(3)["CNI_COMMAND"], "DEL");
    assert!(!f.cache_file("net", "c1", "eth0").exists());
}

// A failed ADD with rollback off: libcni's behaviour.
#[test]
fn add_failure_without_rollback() {
    let f = abc();
    f.answer("B", "ADD", r#"{"code":7,"msg":"bad"}"#, 1);
    let mut rt = f.runtime();
    rt.rollback = false;
    let err = rt.add(&chain("1.0.0", ""), &att()).unwrap_err();
    assert_eq!(err.code(), 7);
    assert_eq!(f.calls_str(), ["A ADD", "B ADD"]);
    assert!(!f.cache_file("net", "c1", "eth0").exists());
}

// Rollback errors are appended; the original error stays what the caller sees.
#[test]
fn rollback_errors_are_appended() {
    let f = abc();
    f.answer("C", "ADD", r#"{"code":11,"msg":"later"}"#, 1);
    f.answer("A", "DEL", r#"{"code":5,"msg":"cannot undo"}"#, 1);
    let err = f.runtime().add(&chain("1.0.0", ""), &att()).unwrap_err();
    assert_eq!(err.code(), 11);
    let text = err.to_string();
    assert!(
        text.contains("later") && text.contains("cannot undo"),
        "{text}"
    );
    assert_eq!(
        f.calls_str(),
        ["A ADD", "B ADD", "C ADD", "C DEL", "B DEL", "A DEL"]
    );
}

// DEL in reverse with the cached result as prevResult, DEL output ignored, cache removed.
#[test]
fn del_chain() {
    let f = abc();
    let net = chain("1.0.0", "");
    let rt = f.runtime();
    rt.add(&net, &att()).unwrap();
    f.clear_log();
    rt.del(&net, &att()).unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL"]);
    for seq in 1..=3 {
        assert_eq!(f.stdin(seq)["prevResult"]["interfaces"][0]["name"], "if-C");
        assert_eq!(f.stdin(seq)["prevResult"]["cniVersion"], "1.0.0");
    }
    assert!(f.stdin(3)["runtimeConfig"]["portMappings"].is_array());
    assert!(!f.cache_file("net", "c1", "eth0").exists());
    f.clear_log();
    rt.del(&net, &att()).unwrap();
    assert!(f.stdin(1).get("prevResult").is_none());
}

// Versions below 0.4.0 never send prevResult on DEL.
#[test]
fn del_below_040_has_no_prev_result() {
    let f = abc();
    let net = chain("0.3.1", "");
    let rt = f.runtime();
    rt.add(&net, &att()).unwrap();
    f.clear_log();
    rt.del(&net, &att()).unwrap();
    assert!(f.stdin(1).get("prevResult").is_none());
}

// A failing DEL stops the chain and keeps the cache.
#[test]
fn del_failure_keeps_cache() {
    let f = abc();
    let net = chain("1.0.0", "");
    let rt = f.runtime();
    rt.add(&net, &att()).unwrap();
    f.answer("B", "DEL", r#"{"code":100,"msg":"busy"}"#, 1);
    f.clear_log();
    let err = rt.del(&net, &att()).unwrap_err();
    assert_eq!(err.code(), 100);
    assert!(err.to_string().contains("(delete, exec)"));
    assert_eq!(f.calls_str(), ["C DEL", "B DEL"]);
    assert!(f.cache_file("net", "c1", "eth0").exists());
}

// A corrupt cache is deleted and DEL goes on without prevResult.
#[test]
fn del_with_corrupt_cache() {
    let f = abc();
    let path = f.cache_file("net", "c1", "eth0");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, "garbage").unwrap();
    f.runtime().del(&chain("1.0.0", ""), &att()).unwrap();
    assert_eq!(f.calls().len(), 3);
    assert!(f.stdin(1).get("prevResult").is_none());
    assert!(!path.exists());
}

// CHECK: the version gate, `disableCheck`, then the plugins in order with the cached result.
#[test]
fn check_chain() {
    let f = abc();
    let rt = f.runtime();
    // (a) disableCheck: success without exec.
    rt.check(&chain("1.0.0", r#","disableCheck":true"#), &att())
        .unwrap();
    // (b) 0.3.1: the version check comes first, even with disableCheck.
    let err = rt
        .check(&chain("0.3.1", r#","disableCheck":true"#), &att())
        .unwrap_err();
    assert!(err
        .to_string()
        .contains("does not support the CHECK command"));
    assert_eq!(err.code(), 1);
    assert!(f.calls().is_empty());
    // Without a cached result CHECK is refused (better than libcni).
    let net = chain("1.0.0", "");
    assert!(matches!(
        rt.check(&net, &att()),
        Err(RuntimeError::NoCachedResult { .. })
    ));
    // (c) normal.
    rt.add(&net, &att()).unwrap();
    f.clear_log();
    rt.check(&net, &att()).unwrap();
    assert_eq!(f.calls_str(), ["A CHECK", "B CHECK", "C CHECK"]);
    for seq in 1..=3 {
        assert_eq!(f.stdin(seq)["prevResult"]["interfaces"][0]["name"], "if-C");
        assert_eq!(f.env(seq)["CNI_COMMAND"], "CHECK");
    }
    f.answer("B", "CHECK", r#"{"code":101,"msg":"drift"}"#, 1);
    f.clear_log();
    let err = rt.check(&net, &att()).unwrap_err();
    assert_eq!(err.code(), 101);
    assert_eq!(f.calls_str(), ["A CHECK", "B CHECK"]);
}

fn seed(rt: &cni_runtime::Runtime, net_name: &str, cid: &str) {
    let net = network(&format!(
        r#"{{"cniVersion":"1.1.0","name":"{net_name}","plugins":[{{"type":"A"}},{{"type":"B"}},{{"type":"C"}}]}}"#
    ));
    let a = Attachment::new(cid, format!("/run/netns/{cid}"), "eth0")
        .with_args(vec![("K8S_POD_NAME".into(), cid.into())])
        .with_capability("mac", json!(format!("mac-{cid}")));
    rt.add(&net, &a).unwrap();
}

// GC: stale attachments get DEL with their cached arguments, then every plugin gets GC with
// the valid list.
#[test]
fn gc_chain() {
    let f = abc();
    let rt = f.runtime();
    seed(&rt, "N", "c1");
    seed(&rt, "N", "c2");
    seed(&rt, "M", "c3");
    f.clear_log();
    let net = network(
        r#"{"cniVersion":"1.1.0","name":"N","plugins":[{"type":"A","capabilities":{"mac":true}},{"type":"B"},{"type":"C"}]}"#,
    );
    let valid = [AttachmentId::new("N", "c1", "eth0")];
    rt.gc(&net, &valid).unwrap();
    assert_eq!(
        f.calls_str(),
        ["C DEL", "B DEL", "A DEL", "A GC", "B GC", "C GC"]
    );
    let env = f.env(1);
    assert_eq!(env["CNI_CONTAINERID"], "c2");
    assert_eq!(env["CNI_NETNS"], "/run/netns/c2");
    assert_eq!(env["CNI_ARGS"], "K8S_POD_NAME=c2");
    assert_eq!(f.stdin(3)["runtimeConfig"]["mac"], "mac-c2");
    for seq in 4..=6 {
        let s = f.stdin(seq);
        let expect = json!([{"containerID":"c1","ifname":"eth0"}]);
        assert_eq!(s["cni.dev/valid-attachments"], expect);
        assert_eq!(s["cni.dev/attachments"], expect);
        assert!(s.get("prevResult").is_none() && s.get("runtimeConfig").is_none());
        let env = f.env(seq);
        assert_eq!(env["CNI_COMMAND"], "GC");
        assert_eq!(env["CNI_CONTAINERID"], "");
        assert_eq!(env["CNI_NETNS"], "");
        assert!(!env["CNI_PATH"].is_empty());
    }
    assert!(!f.cache_file("N", "c2", "eth0").exists());
    assert!(f.cache_file("N", "c1", "eth0").exists());
    assert!(f.cache_file("M", "c3", "eth0").exists());
    // disableGC: nothing at all.
    f.clear_log();
    let off =
        network(r#"{"cniVersion":"1.1.0","name":"N","disableGC":true,"plugins":[{"type":"A"}]}"#);
    rt.gc(&off, &[]).unwrap();
    assert!(f.calls().is_empty());
    assert!(f.cache_file("N", "c1", "eth0").exists());
}

// gc_picked: the picked attachment gets its DEL with the config cached at its ADD (here 1.0.0
// and only the plugins A and C); the plugins of the current config get GC with every other
// attachment of the network plus the extra valid ones; another network is not looked at.
#[test]
fn gc_picked_deletes_with_the_cached_config_then_collects_the_rest() {
    let f = abc();
    let rt = f.runtime();
    let old = network(r#"{"cniVersion":"1.0.0","name":"N","plugins":[{"type":"A"},{"type":"C"}]}"#);
    rt.add(&old, &Attachment::new("gone", "/run/netns/gone", "eth0"))
        .unwrap();
    seed(&rt, "N", "live");
    seed(&rt, "M", "gone");
    f.clear_log();
    let net = network(
        r#"{"cniVersion":"1.1.0","name":"N","plugins":[{"type":"A"},{"type":"B"},{"type":"C"}]}"#,
    );
    let mut looked_at = Vec::new();
    let extra = AttachmentId::new("N", "adding", "eth0");
    let report = rt
        .gc_picked(
            &net,
            |e| {
                looked_at.push(format!("{}/{}", e.network_name, e.container_id));
                e.container_id == "gone"
            },
            || vec![extra],
        )
        .unwrap();
    assert_eq!(looked_at, ["N/gone", "N/live"]);
    assert_eq!(f.calls_str(), ["C DEL", "A DEL", "A GC", "B GC", "C GC"]);
    assert_eq!(f.stdin(1)["cniVersion"], "1.0.0");
    assert_eq!(f.env(1)["CNI_NETNS"], "/run/netns/gone");
    assert_eq!(
        f.stdin(3)["cni.dev/valid-attachments"],
        json!([{"containerID":"adding","ifname":"eth0"},{"containerID":"live","ifname":"eth0"}])
    );
    assert_eq!(report.deleted.len(), 1);
    assert!(report.failed.is_empty() && report.plugin_errors.is_empty());
    assert!(report.plugins_collected);
    assert!(!f.cache_file("N", "gone", "eth0").exists());
    assert!(f.cache_file("N", "live", "eth0").exists());
    assert!(f.cache_file("M", "gone", "eth0").exists());
}

// gc_picked: a failed DEL keeps the entry and leaves the attachment out of the valid list.
#[test]
fn gc_picked_keeps_a_failed_delete_out_of_the_valid_list() {
    let f = abc();
    let rt = f.runtime();
    seed(&rt, "N", "gone");
    f.answer("B", "DEL", r#"{"code":11,"msg":"busy"}"#, 1);
    f.clear_log();
    let net = network(
        r#"{"cniVersion":"1.1.0","name":"N","plugins":[{"type":"A"},{"type":"B"},{"type":"C"}]}"#,
    );
    let report = rt.gc_picked(&net, |_| true, Vec::new).unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A GC", "B GC", "C GC"]);
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0].1.to_string().contains("busy"));
    assert_eq!(f.stdin(3)["cni.dev/valid-attachments"], json!([]));
    assert!(f.cache_file("N", "gone", "eth0").exists());
}

// Below 1.1.0 the stale DELs still run but no GC verb is sent.
#[test]
fn gc_below_110_only_deletes_stale() {
    let f = abc();
    let rt = f.runtime();
    let net = chain("1.0.0", "");
    rt.add(&net, &att()).unwrap();
    f.clear_log();
    rt.gc(&net, &[]).unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL"]);
    assert!(!f.cache_file("net", "c1", "eth0").exists());
}

// GC errors are collected; the other plugins still run.
#[test]
fn gc_error_aggregation() {
    let f = abc();
    f.answer("A", "GC", r#"{"code":102,"msg":"gc broke"}"#, 1);
    let net = chain("1.1.0", "");
    let err = f.runtime().gc(&net, &[]).unwrap_err();
    assert_eq!(f.calls_str(), ["A GC", "B GC", "C GC"]);
    assert!(err.to_string().contains("gc broke"));
    assert_eq!(err.code(), 102);
}

// STATUS: nothing below 1.1.0; in order, stopping at the first error, whose code is kept.
#[test]
fn status_chain() {
    let f = abc();
    let rt = f.runtime();
    rt.status(&chain("1.0.0", "")).unwrap();
    assert!(f.calls().is_empty());
    f.answer("B", "STATUS", r#"{"code":50,"msg":"down"}"#, 1);
    let err = rt.status(&chain("1.1.0", "")).unwrap_err();
    assert_eq!(f.calls_str(), ["A STATUS", "B STATUS"]);
    assert_eq!(err.code(), 50);
    assert_eq!(err.plugin_error().unwrap().msg, "down");
    let env = f.env(1);
    assert_eq!(env["CNI_COMMAND"], "STATUS");
    assert_eq!(env["CNI_IFNAME"], "");
    assert_eq!(f.stdin(1)["name"], "net");
    assert!(f.stdin(1).get("runtimeConfig").is_none());
}

// Version selection through the runtime: the plugin stdin carries the selected version.
#[test]
fn selected_version_reaches_plugins() {
    let f = abc();
    let net = network(
        r#"{"name":"net","cniVersion":"0.3.1","cniVersions":["0.4.0","1.0.0","99.0.0"],"plugins":[{"type":"A"}]}"#,
    );
    f.runtime().add(&net, &att()).unwrap();
    assert_eq!(f.stdin(1)["cniVersion"], "1.0.0");
}

// Plugin lookup through the runtime: lookup failures name the plugin and the stage.
#[test]
fn lookup_errors() {
    let f = abc();
    let net = network(r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"missing"}]}"#);
    let err = f.runtime().add(&net, &att()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(r#"type="missing""#) && text.contains("(add, lookup)"),
        "{text}"
    );
    assert!(text.contains("failed to find plugin"), "{text}");
    let bad = network(r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"../A"}]}"#);
    let err = f.runtime().add(&bad, &att()).unwrap_err().to_string();
    assert!(err.contains("invalid plugin name"), "{err}");
    assert!(f.calls().is_empty());
}

// Plugin output handling (libcni's error texts, and the config's version for a result without one).
#[test]
fn plugin_output() {
    let f = Fake::new();
    f.plugins(&["P"]);
    let net = network(r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"P"}]}"#);
    let mut rt = f.runtime();
    rt.rollback = false;
    // (a) stderr only.
    f.answer("P", "ADD", "", 1).stderr("P", "ADD", "boom");
    assert!(rt
        .add(&net, &att())
        .unwrap_err()
        .to_string()
        .contains("boom"));
    fs::remove_file(f.dir.path().join("canned/P.ADD.stderr")).unwrap();
    // (b) undecodable stdout.
    f.answer("P", "ADD", "not json", 1);
    let e = rt.add(&net, &att()).unwrap_err();
    assert!(e.to_string().contains("not json"), "{e}");
    assert_eq!(e.code(), 0);
    // (c) no cniVersion: parsed as the config's version.
    f.answer("P", "ADD", r#"{"ips":[{"address":"198.18.0.2/24"}]}"#, 0);
    let r = rt.add(&net, &att()).unwrap();
    assert_eq!(r.cni_version.to_string(), "1.0.0");
    assert_eq!(r.ips.len(), 1);
    rt.del(&net, &att()).unwrap();
    // (d) unknown result version.
    f.answer("P", "ADD", r#"{"cniVersion":"7.0.0"}"#, 0);
    let e = rt.add(&net, &att()).unwrap_err();
    assert!(
        e.to_string().contains("unsupported CNI result version"),
        "{e}"
    );
    assert!(matches!(
        e,
        RuntimeError::Plugin {
            stage: Stage::Result,
            ..
        }
    ));
}

// A legacy bare result in the cache, converted for CHECK.
#[test]
fn legacy_cache_read() {
    let f = abc();
    let path = f.cache_file("net", "c1", "eth0");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(
        &path,
        r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"198.18.2.3/24"}]}"#,
    )
    .unwrap();
    f.runtime().check(&chain("1.0.0", ""), &att()).unwrap();
    let prev = &f.stdin(1)["prevResult"];
    assert_eq!(prev["cniVersion"], "1.0.0");
    assert_eq!(prev["ips"][0]["address"], "198.18.2.3/24");
    assert!(prev["ips"][0].get("version").is_none());
}

// Names are validated on every command, before anything runs.
#[test]
fn validation_on_every_command() {
    let f = abc();
    let rt = f.runtime();
    let net = chain("1.1.0", "");
    let bad_id = Attachment::new("../../etc", "/run/netns/x", "eth0");
    let bad_if = Attachment::new("c1", "/run/netns/x", "a/b");
    for a in [&bad_id, &bad_if] {
        assert!(matches!(rt.add(&net, a), Err(RuntimeError::Invalid(_))));
        assert!(matches!(rt.del(&net, a), Err(RuntimeError::Invalid(_))));
        assert!(matches!(rt.check(&net, a), Err(RuntimeError::Invalid(_))));
    }
    assert_eq!(rt.del(&net, &bad_id).unwrap_err().code(), 4);
    assert!(f.calls().is_empty());
}

// A timeout (libcni has none of its own) kills a hung plugin; the error names it and is code 11.
#[test]
fn plugin_timeout() {
    let f = abc();
    f.sleep("B", "ADD", 30);
    let mut rt = f.runtime();
    rt.timeouts.add = Some(std::time::Duration::from_millis(500));
    let start = std::time::Instant::now();
    let err = rt.add(&chain("1.0.0", ""), &att()).unwrap_err();
    assert!(start.elapsed().as_secs() < 20);
    assert_eq!(err.code(), 11);
    assert!(err.to_string().contains(r#"type="B""#), "{err}");
}

// The ADD timeout bounds the whole chain, not each plugin: three plugins of 1 s
// each do not fit in 2.5 s, although each alone would. The rollback DEL still runs, with a
// budget of its own.
#[test]
fn the_add_timeout_is_applied_once_per_chain() {
    let f = abc();
    for p in ["A", "B", "C"] {
        f.sleep(p, "ADD", 1);
    }
    let mut rt = f.runtime();
    rt.timeouts.add = Some(std::time::Duration::from_millis(2500));
    let start = std::time::Instant::now();
    let err = rt.add(&chain("1.0.0", ""), &att()).unwrap_err();
    assert!(start.elapsed().as_secs() < 10);
    assert_eq!(err.code(), 11, "{err}");
    assert!(err.to_string().contains(r#"type="C""#), "{err}");
    let dels: Vec<String> = f
        .calls_str()
        .into_iter()
        .filter(|c| c.contains("DEL"))
        .collect();
    assert_eq!(
        dels.len(),
        3,
        "rollback DEL over the chain: {:?}",
        f.calls_str()
    );
}

// VERSION per plugin and validation (libcni's `GetVersionInfo` and `ValidateNetworkList`).
#[test]
fn version_and_validate() {
    let f = abc();
    let rt = f.runtime();
    let net = network(
        r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"A","capabilities":{"portMappings":true,"mac":false}},{"type":"B","capabilities":{"bandwidth":true},"runtimeConfig":{}}]}"#,
    );
    let versions = rt.version(&net);
    assert_eq!(versions.len(), 2);
    assert!(versions[0].info.as_ref().unwrap().supports("1.1.0"));
    let env = f.env(1);
    assert_eq!(env["CNI_COMMAND"], "VERSION");
    assert_eq!(env["CNI_NETNS"], "dummy");
    let report = rt.validate(&net).unwrap();
    assert_eq!(
        report.capabilities.into_iter().collect::<Vec<_>>(),
        ["bandwidth", "portMappings"]
    );
    assert_eq!(report.warnings.len(), 1);
    f.answer(
        "B",
        "VERSION",
        r#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#,
        0,
    );
    let with_missing = network(
        r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"A"},{"type":"B"},{"type":"nope"}]}"#,
    );
    let err = rt.validate(&with_missing).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(r#"does not support config version "1.1.0""#),
        "{text}"
    );
    assert!(text.contains("nope"), "{text}");
    assert!(matches!(err, RuntimeError::Multiple(ref v) if v.len() == 2));
}

// GC waits for an ADD/DEL in flight on the same network.
#[test]
fn gc_waits_for_shared_lock() {
    let f = abc();
    let rt = f.runtime();
    let net = chain("1.1.0", "");
    let held = cni_runtime::NetworkLock::shared(rt.cache_dir(), "net").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            rt.gc(&net, &[]).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(300))
            .is_err());
        assert!(f.calls().is_empty());
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    });
    assert_eq!(f.calls().len(), 3);
}

// DEL with the arguments cached at ADD time.
#[test]
fn del_with_cached_args() {
    let f = abc();
    let rt = f.runtime();
    let net = chain("1.0.0", "");
    rt.add(&net, &att()).unwrap();
    f.clear_log();
    rt.del_with_cached_args(&net, &Attachment::new("c1", "", "eth0"))
        .unwrap();
    let env = f.env(1);
    assert_eq!(env["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=p");
    assert_eq!(env["CNI_NETNS"], "/run/netns/t1");
    assert!(f.stdin(3)["runtimeConfig"]["portMappings"].is_array());
}

#[test]
fn loopback_network_is_builtin() {
    let lo = Network::loopback();
    assert_eq!(lo.config_bytes(), cni_runtime::LOOPBACK_CONFIG.as_bytes());
}

// The version can be confirmed against the plugins' VERSION answers.
#[test]
fn negotiate_version_with_plugins() {
    let f = abc();
    f.answer(
        "B",
        "VERSION",
        r#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#,
        0,
    );
    let rt = f.runtime();
    let net = network(
        r#"{"cniVersion":"1.1.0","cniVersions":["0.4.0","1.0.0"],"name":"net","plugins":[{"type":"A"},{"type":"B"}]}"#,
    );
    assert_eq!(net.version.to_string(), "1.1.0");
    assert_eq!(
        rt.negotiate_version(&net).unwrap().version.to_string(),
        "1.0.0"
    );
    f.answer("B", "VERSION", r#"{"cniVersion":"0.2.0"}"#, 0);
    let err = rt.negotiate_version(&net).unwrap_err();
    assert!(err.to_string().contains("no version offered"), "{err}");
    assert_eq!(err.code(), 1);
}

// An unusable cache directory refuses the ADD before any plugin runs: the entry that claims
// the attachment is written first (libcni runs the chain and then fails to cache it).
#[test]
fn unusable_cache_dir_refuses_add_before_any_plugin() {
    let f = abc();
    fs::write(f.cache().join("results"), "not a directory").unwrap();
    let err = f.runtime().add(&chain("1.0.0", ""), &att()).unwrap_err();
    assert_eq!(err.code(), 5);
    assert!(
        err.to_string().contains("unusable cache directory"),
        "{err}"
    );
    assert!(f.calls_str().is_empty(), "{:?}", f.calls_str());
}

// libcni's default cache directory.
#[test]
fn default_cache_dir() {
    let rt = cni_runtime::Runtime::with_default_cache(vec!["/opt/cni/bin".into()]);
    assert_eq!(rt.cache_dir(), std::path::Path::new("/var/lib/cni"));
}
