//! Runtime parity with libcni v1.3 and later against fake plugins: plugins from the
//! sub-directory named after the network (libcni's `NetworkConfFromFile`) and the trace context
//! in the plugin's environment (`injectTraceContext` in `pkg/invoke/raw_exec.go`).

mod common;

use std::fs;

use cni_runtime::{discover, Attachment, TraceContext};
use common::Fake;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn att() -> Attachment {
    Attachment::new("c1", "/run/netns/t1", "eth0")
}

/// A conf dir with `net.conflist` (inline A) and `net/` holding B and C as separate files.
fn conf_dir_with_subdir_plugins(f: &Fake) -> std::path::PathBuf {
    let conf = f.dir.path().join("net.d");
    fs::create_dir_all(conf.join("net")).unwrap();
    fs::write(
        conf.join("10-net.conflist"),
        r#"{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"A"}]}"#,
    )
    .unwrap();
    fs::write(
        conf.join("net").join("20-c.conf"),
        r#"{"type":"C","k":"c"}"#,
    )
    .unwrap();
    fs::write(
        conf.join("net").join("10-b.conf"),
        r#"{"type":"B","k":"b"}"#,
    )
    .unwrap();
    conf
}

#[test]
fn subdir_plugins_run_after_the_inline_ones_in_file_name_order() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let conf = conf_dir_with_subdir_plugins(&f);
    let net = discover(&conf).unwrap().require("net").unwrap().clone();
    let rt = f.runtime();
    rt.add(&net, &att()).unwrap();
    assert_eq!(f.calls_str(), ["A ADD", "B ADD", "C ADD"]);
    // A sub-directory plugin gets the list's name and version like an inline one.
    let b = f.stdin(2);
    assert_eq!(
        (b["name"].as_str(), b["cniVersion"].as_str()),
        (Some("net"), Some("1.1.0"))
    );
    assert_eq!(b["k"], "b");
    assert_eq!(f.stdin(3)["prevResult"]["interfaces"][0]["name"], "if-B");
}

#[test]
fn del_from_the_cache_reaches_subdir_plugins_after_the_directory_is_gone() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let conf = conf_dir_with_subdir_plugins(&f);
    let net = discover(&conf).unwrap().require("net").unwrap().clone();
    let rt = f.runtime();
    rt.add(&net, &att()).unwrap();
    fs::remove_dir_all(&conf).unwrap();
    f.clear_log();
    // What a sandbox layer does when the config vanished: rebuild the network from the cache.
    let entry = rt.cached_attachments(Some("c1")).pop().unwrap();
    let cached = cni_runtime::Network::from_list_bytes(&entry.config).unwrap();
    assert_eq!(cached.plugin_types(), ["A", "B", "C"]);
    rt.del(&cached, &att()).unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL"]);
}

#[test]
fn load_only_inlined_plugins_leaves_the_subdir_out() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let conf = conf_dir_with_subdir_plugins(&f);
    fs::write(
        conf.join("10-net.conflist"),
        r#"{"cniVersion":"1.1.0","name":"net","loadOnlyInlinedPlugins":true,"plugins":[{"type":"A"}]}"#,
    )
    .unwrap();
    let net = discover(&conf).unwrap().require("net").unwrap().clone();
    f.runtime().add(&net, &att()).unwrap();
    assert_eq!(f.calls_str(), ["A ADD"]);
}

#[test]
fn trace_context_reaches_every_plugin_even_with_a_cleared_environment() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let net = common::chain("1.1.0", "");
    let mut rt = f.runtime();
    rt.exec.clear_env = true;
    rt.trace = TraceContext {
        traceparent: Some(TRACEPARENT.into()),
        tracestate: Some("rojo=00f067aa0ba902b7".into()),
        baggage: None,
    };
    rt.add(&net, &att()).unwrap();
    rt.status(&net).unwrap();
    rt.del(&net, &att()).unwrap();
    let calls = f.calls_str();
    assert_eq!(calls.len(), 9, "{calls:?}");
    for seq in 1..=calls.len() {
        let env = f.env(seq);
        assert_eq!(
            env.get("TRACEPARENT").map(String::as_str),
            Some(TRACEPARENT),
            "{}",
            calls[seq - 1]
        );
        assert_eq!(
            env.get("TRACESTATE").map(String::as_str),
            Some("rojo=00f067aa0ba902b7")
        );
        assert!(!env.contains_key("BAGGAGE"), "empty values are not sent");
    }
}

#[test]
fn no_trace_context_sends_nothing() {
    let f = Fake::new();
    f.plugins(&["A"]);
    let net = common::network(r#"{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"A"}]}"#);
    let mut rt = f.runtime();
    rt.exec.clear_env = true;
    rt.trace = TraceContext::default();
    rt.add(&net, &att()).unwrap();
    let env = f.env(1);
    assert!(
        cni_runtime::TRACE_ENV.iter().all(|k| !env.contains_key(*k)),
        "{env:?}"
    );
}
