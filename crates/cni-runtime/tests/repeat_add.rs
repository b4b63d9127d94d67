//! A repeated ADD of a live attachment, and names too long for the cache, against fake
//! plugins: both are refused before any plugin runs, and nothing changes.

mod common;

use std::fs;

use cni_runtime::{Attachment, RuntimeError, SandboxNetworks, SandboxRequest, SetupMode};
use common::{network, Fake};

fn net() -> cni_runtime::Network {
    network(r#"{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"A"},{"type":"B"}]}"#)
}

#[test]
fn second_add_is_refused_and_changes_nothing() {
    let f = Fake::new();
    f.plugins(&["A", "B"]);
    let rt = f.runtime();
    let att = Attachment::new("c1", "/run/netns/c1", "eth0");
    rt.add(&net(), &att).unwrap();
    let cache = f.cache_file("net", "c1", "eth0");
    let before = fs::read(&cache).unwrap();
    f.clear_log();

    let err = rt.add(&net(), &att).unwrap_err();
    assert!(matches!(err, RuntimeError::AlreadyAttached { .. }), "{err}");
    assert_eq!(err.code(), 4);
    let text = err.to_string();
    assert!(
        text.contains("\"c1\"") && text.contains("\"eth0\"") && text.contains("DEL"),
        "{text}"
    );
    // No plugin ran (so no rollback DEL either) and the entry is byte for byte the same.
    assert!(f.calls().is_empty(), "{:?}", f.calls_str());
    assert_eq!(fs::read(&cache).unwrap(), before);

    // Another interface of the same container is a different attachment.
    rt.add(&net(), &Attachment::new("c1", "/run/netns/c1", "eth1"))
        .unwrap();
    // After DEL the attachment can be added again.
    rt.del(&net(), &att).unwrap();
    f.clear_log();
    rt.add(&net(), &att).unwrap();
    assert_eq!(f.calls_str(), ["A ADD", "B ADD"]);
}

#[test]
fn a_corrupt_entry_still_counts_as_attached() {
    let f = Fake::new();
    f.plugins(&["A", "B"]);
    let rt = f.runtime();
    let att = Attachment::new("c1", "/run/netns/c1", "eth0");
    let cache = f.cache_file("net", "c1", "eth0");
    fs::create_dir_all(cache.parent().unwrap()).unwrap();
    fs::write(&cache, "garbage").unwrap();
    assert_eq!(rt.add(&net(), &att).unwrap_err().code(), 4);
    assert!(f.calls().is_empty());
}

fn sandbox_nets() -> Vec<cni_runtime::Network> {
    vec![
        network(r#"{"cniVersion":"1.0.0","name":"one","plugins":[{"type":"A"}]}"#),
        network(r#"{"cniVersion":"1.0.0","name":"two","plugins":[{"type":"B"}]}"#),
    ]
}

// The sandbox rolls back only what its own setup attached, never a network that was
// attached before it started.
#[test]
fn sandbox_setup_keeps_a_network_that_was_already_attached() {
    for mode in [SetupMode::Serial, SetupMode::Parallel] {
        let f = Fake::new();
        f.plugins(&["A", "B"]);
        let rt = f.runtime();
        let req = SandboxRequest {
            container_id: "pod1".into(),
            netns: "/run/netns/pod1".into(),
            ..Default::default()
        };
        let two = &sandbox_nets()[1];
        rt.add(two, &Attachment::new("pod1", "/run/netns/pod1", "net1"))
            .unwrap();
        let live = fs::read(f.cache_file("two", "pod1", "net1")).unwrap();
        f.clear_log();

        let sb = SandboxNetworks::new(sandbox_nets(), false);
        let err = sb.setup(&rt, &req, mode).unwrap_err();
        assert_eq!(err.code(), 4, "{err}");
        let calls = f.calls_str();
        assert_eq!(calls, ["A ADD", "A DEL"], "{mode:?}");
        assert_eq!(fs::read(f.cache_file("two", "pod1", "net1")).unwrap(), live);
        assert!(!f.cache_file("one", "pod1", "eth0").exists());

        // The whole sandbox set up twice: the second setup changes nothing.
        rt.del(two, &Attachment::new("pod1", "/run/netns/pod1", "net1"))
            .unwrap();
        sb.setup(&rt, &req, mode).unwrap();
        f.clear_log();
        assert_eq!(sb.setup(&rt, &req, mode).unwrap_err().code(), 4);
        assert!(f.calls().is_empty(), "{:?}", f.calls_str());
        assert!(f.cache_file("one", "pod1", "eth0").exists());
        assert!(f.cache_file("two", "pod1", "net1").exists());
    }
}

#[test]
fn container_id_too_long_for_the_cache_is_refused_before_plugins() {
    let f = Fake::new();
    f.plugins(&["A", "B"]);
    let rt = f.runtime();
    // "net-" + cid + "-eth0": 255 bytes fit, 256 do not.
    let fits = "c".repeat(255 - "net--eth0".len());
    let too_long = format!("{fits}c");
    rt.add(
        &net(),
        &Attachment::new(fits.as_str(), "/run/netns/x", "eth0"),
    )
    .unwrap();
    assert!(f.cache_file("net", &fits, "eth0").exists());
    f.clear_log();

    let att = Attachment::new(too_long.as_str(), "/run/netns/x", "eth0");
    let err = rt.add(&net(), &att).unwrap_err();
    assert_eq!(err.code(), 4, "{err}");
    assert!(err.to_string().contains("too long"), "{err}");
    assert!(f.calls().is_empty(), "{:?}", f.calls_str());
    let err = rt.check(&net(), &att).unwrap_err();
    assert_eq!(err.code(), 4, "{err}");
    assert!(f.calls().is_empty(), "{:?}", f.calls_str());
    // DEL still runs the chain (without a cache entry, which cannot exist) and succeeds, so
    // such an attachment made by another runtime can be cleaned up.
    rt.del(&net(), &att).unwrap();
    assert_eq!(f.calls_str(), ["B DEL", "A DEL"]);
    assert!(f.stdin(1).get("prevResult").is_none());
}
