//! `rcni doctor explain` from the command line: text and JSON, argument and stdin.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const KUBELET_EVENT: &str = r#"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to destroy network for sandbox "7f1e": plugin type="portmap" failed (delete): netplugin failed with no error message: signal: killed"#;

#[test]
fn explain_places_a_kubelet_event_in_its_stage() {
    let out = Command::new(env!("CARGO_BIN_EXE_rcni"))
        .args(["--json", "doctor", "explain", KUBELET_EVENT])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stage"], "del");
    assert_eq!(v["cause"], "plugin-killed");
    assert_eq!(v["plugin"], "portmap");
}

#[test]
fn explain_reads_the_message_from_stdin() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rcni"))
        .args(["doctor", "explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stage:   STATUS"), "{text}");
    assert!(text.contains("cni-not-initialized"), "{text}");
}
