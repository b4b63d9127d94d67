//! Shared setup of the integration tests: a sandbox with the real `rcni-plugins` binary linked
//! under plugin names, and checks on what a plugin printed.

#![allow(dead_code)]

pub mod dhcp_daemon;

use std::path::PathBuf;

use cni_testkit::{Netns, PluginCall, PluginOutput, Sandbox};

/// The multi-call binary cargo built for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

/// A sandbox, one container namespace and a CNI_PATH dir with `names` linked to [`BIN`].
pub struct Setup {
    pub sb: Sandbox,
    pub pod: Netns,
    pub cni_dir: PathBuf,
}

impl Setup {
    pub fn new(names: &[&str]) -> Setup {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let pod = sb.add_container().expect("container namespace");
        let cni_dir = sb.link_plugins(BIN, names).expect("plugin links");
        Setup { sb, pod, cni_dir }
    }

    /// A call with every attachment variable set for the pod (container `c1`, ifname `lo`).
    pub fn call(&self, command: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command)
            .container_id("c1")
            .netns(&self.pod.path)
            .ifname("lo")
            .path(&self.cni_dir)
            .stdin(stdin)
    }

    pub fn run(&self, plugin: &str, call: &PluginCall) -> PluginOutput {
        self.sb
            .run_plugin(self.cni_dir.join(plugin), call)
            .expect("run plugin")
    }
}

/// Asserts a failure with CNI error `code` and a clean stdout (one JSON object, no Rust panic
/// text or backtrace), and returns the error object.
#[track_caller]
pub fn assert_cni_error(out: &PluginOutput, code: u64) -> serde_json::Value {
    assert!(!out.success(), "expected failure:\n{out}");
    assert_clean_stdout(out);
    let v = out.json().unwrap();
    assert_eq!(v["code"], code, "{out}");
    assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{out}");
    v
}

/// No panic message or backtrace on stdout.
#[track_caller]
pub fn assert_clean_stdout(out: &PluginOutput) {
    for bad in [
        "panicked at",
        "stack backtrace",
        "RUST_BACKTRACE",
        "RCNI_TEST_PANIC",
    ] {
        assert!(!out.stdout.contains(bad), "stdout contains {bad:?}:\n{out}");
    }
}

/// Success with nothing on stdout (DEL, CHECK, STATUS, GC).
#[track_caller]
pub fn assert_silent_success(out: &PluginOutput) {
    out.assert_success();
    assert_eq!(out.stdout, "", "{out}");
}

/// True when `ifname` in namespace `ns` is administratively up, read with `ip -j`.
pub fn is_up(ns: &str, ifname: &str) -> bool {
    let link = cni_testkit::link(ns, ifname)
        .expect("ip -j link")
        .expect("link exists");
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "UP"))
}
