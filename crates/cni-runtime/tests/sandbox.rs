//! The multi-network sandbox layer (go-cni) against fake plugins.

mod common;

use cni_runtime::{RuntimeError, SandboxNetworks, SandboxRequest, SetupMode};
use common::{network, Fake};

fn nets() -> Vec<cni_runtime::Network> {
    vec![
        network(r#"{"cniVersion":"1.0.0","name":"one","plugins":[{"type":"A"}]}"#),
        network(r#"{"cniVersion":"1.0.0","name":"two","plugins":[{"type":"B"}]}"#),
        network(r#"{"cniVersion":"1.0.0","name":"three","plugins":[{"type":"C"}]}"#),
    ]
}

fn req() -> SandboxRequest {
    SandboxRequest {
        container_id: "pod1".into(),
        netns: "/run/netns/pod1".into(),
        ..Default::default()
    }
}

fn fake() -> Fake {
    let f = Fake::new();
    f.plugins(&["A", "B", "C", "loopback"]);
    f.answer(
        "loopback",
        "ADD",
        r#"{"cniVersion":"0.3.1","interfaces":[{"name":"lo","sandbox":"/run/netns/pod1"}],"ips":[{"version":"4","address":"127.0.0.1/8","interface":0}]}"#,
        0,
    );
    f
}

#[test]
fn serial_setup_names_interfaces_and_merges_results() {
    let f = fake();
    let rt = f.runtime();
    let sb = SandboxNetworks::new(nets(), true);
    let res = sb.setup(&rt, &req(), SetupMode::Serial).unwrap();
    assert_eq!(f.calls_str(), ["loopback ADD", "A ADD", "B ADD", "C ADD"]);
    let ifnames: Vec<String> = (1..=4).map(|s| f.env(s)["CNI_IFNAME"].clone()).collect();
    assert_eq!(ifnames, ["lo", "eth0", "net1", "net2"]);
    assert_eq!(f.stdin(1)["name"], "cni-loopback");
    assert_eq!(f.stdin(1)["cniVersion"], "0.3.1");
    assert_eq!(res.results.len(), 4);
    assert_eq!(res.ips_of("lo")[0].address.to_string(), "127.0.0.1/8");
    // The fake results name their interfaces if-A, if-B, if-C.
    assert_eq!(res.ips_of("if-B").len(), 1);
    for (net, ifname) in [("one", "eth0"), ("two", "net1"), ("three", "net2")] {
        assert!(f.cache_file(net, "pod1", ifname).exists());
    }
    // CHECK skips the 0.3.1 loopback network (no CHECK below 0.4.0).
    f.clear_log();
    sb.check(&rt, &req()).unwrap();
    assert_eq!(f.calls_str(), ["A CHECK", "B CHECK", "C CHECK"]);
    f.clear_log();
    sb.teardown(&rt, &req()).unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL", "loopback DEL"]);
    // Idempotent.
    sb.teardown(&rt, &req()).unwrap();
}

#[test]
fn parallel_setup() {
    let f = fake();
    let rt = f.runtime();
    let sb = SandboxNetworks::new(nets(), false);
    let res = sb.setup(&rt, &req(), SetupMode::Parallel).unwrap();
    assert_eq!(res.results.len(), 3);
    assert_eq!(res.results[2].ifname, "net2");
    let mut calls = f.calls_str();
    calls.sort();
    assert_eq!(calls, ["A ADD", "B ADD", "C ADD"]);
}

#[test]
fn partial_failure_rolls_back_attached_networks() {
    for mode in [SetupMode::Serial, SetupMode::Parallel] {
        let f = fake();
        f.answer("B", "ADD", r#"{"code":7,"msg":"bad two"}"#, 1);
        let rt = f.runtime();
        let sb = SandboxNetworks::new(nets(), false);
        let err = sb.setup(&rt, &req(), mode).unwrap_err();
        assert_eq!(err.code(), 7);
        let text = err.to_string();
        assert!(
            text.contains("\"two\"") && text.contains("bad two"),
            "{text}"
        );
        assert!(matches!(err, RuntimeError::RolledBack { .. }));
        let calls = f.calls_str();
        // Every network that was attached got DEL; nothing stays cached.
        assert!(calls.contains(&"A DEL".to_string()), "{calls:?}");
        assert!(calls.contains(&"B DEL".to_string()), "{calls:?}");
        if mode == SetupMode::Serial {
            assert_eq!(calls, ["A ADD", "B ADD", "B DEL", "A DEL"]);
        }
        for (net, ifname) in [("one", "eth0"), ("two", "net1"), ("three", "net2")] {
            assert!(!f.cache_file(net, "pod1", ifname).exists(), "{net}");
        }
    }
}

#[test]
fn teardown_continues_after_errors() {
    let f = fake();
    let rt = f.runtime();
    let sb = SandboxNetworks::new(nets(), false);
    sb.setup(&rt, &req(), SetupMode::Serial).unwrap();
    f.answer("B", "DEL", r#"{"code":100,"msg":"stuck"}"#, 1);
    f.clear_log();
    let err = sb.teardown(&rt, &req()).unwrap_err();
    assert!(err.to_string().contains("stuck"));
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL"]);
    sb.check(&rt, &req()).unwrap_err();
}
