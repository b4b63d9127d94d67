//! Shared helpers of the root-only integration tests: throwaway named namespaces that are
//! removed on drop (even when a test panics) and independent read-back through `ip -j`.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use cni_linux::{Handle, NetNs};
use serde_json::Value;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A named namespace `rcnil-<pid>-<n>` deleted when dropped.
pub struct TestNs {
    pub name: String,
    pub ns: NetNs,
}

impl TestNs {
    pub fn new() -> Self {
        let name = format!(
            "rcnil-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let ns = NetNs::create_named(&name)
            .expect("create test namespace (these tests must run as root)");
        TestNs { name, ns }
    }

    pub fn handle(&self) -> Handle {
        Handle::in_netns(&self.ns).expect("open netlink socket in test namespace")
    }

    /// Runs `ip -n <ns> -j <args>` and parses its JSON output.
    pub fn ip_json(&self, args: &[&str]) -> Value {
        let out = Command::new("ip")
            .arg("-n")
            .arg(&self.name)
            .arg("-j")
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        if text.trim().is_empty() {
            return Value::Array(vec![]);
        }
        serde_json::from_str(&text).expect("ip -j output is JSON")
    }

    /// `ip -j link show dev <name>` as one JSON object.
    pub fn ip_link(&self, dev: &str) -> Value {
        let v = self.ip_json(&["-d", "link", "show", "dev", dev]);
        v[0].clone()
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if let Err(e) = NetNs::delete_named(&self.name) {
            eprintln!("cleanup of namespace {} failed: {e}", self.name);
        }
    }
}
