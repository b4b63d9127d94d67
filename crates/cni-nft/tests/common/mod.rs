//! Throwaway network namespaces for the kernel tests. Every test works only inside its own
//! namespace (`rcninft-<pid>-<n>`), removed by a Drop guard even when the test panics; the
//! root namespace's ruleset is never touched.

#![allow(dead_code)]

use std::fs::File;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use cni_nft::Nft;
use nix::sched::{setns, CloneFlags};
use serde_json::Value;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace deleted on drop.
pub struct TestNs {
    pub name: String,
}

impl TestNs {
    /// Creates a namespace, or returns `None` (with a message) when not running as root.
    pub fn new() -> Option<TestNs> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: kernel nf_tables tests need root");
            return None;
        }
        let name = format!(
            "rcninft-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("run ip netns add");
        assert!(out.status.success(), "ip netns add {name}: {out:?}");
        let ns = TestNs { name };
        ns.ip(&["link", "set", "lo", "up"]);
        Some(ns)
    }

    /// Runs `f` on a thread that entered this namespace first.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = File::open(&path).expect("open namespace");
                setns(&file, CloneFlags::CLONE_NEWNET).expect("setns");
                f()
            })
            .join()
            .expect("namespace thread panicked")
        })
    }

    /// An nf_tables client whose socket lives in this namespace.
    pub fn nft(&self) -> Nft {
        self.run(|| Nft::new().expect("open netfilter socket"))
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("run ip netns exec")
    }

    /// Runs a command inside the namespace and returns stdout, failing the test on error.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let out = self.exec(args);
        assert!(out.status.success(), "{args:?} failed: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `ip <args>` inside the namespace.
    pub fn ip(&self, args: &[&str]) {
        let mut full = vec!["ip"];
        full.extend_from_slice(args);
        self.exec_ok(&full);
    }

    /// The ruleset as `nft -j list ruleset` reads it, independently of our decoder.
    pub fn ruleset(&self) -> Value {
        let text = self.exec_ok(&["nft", "-j", "list", "ruleset"]);
        serde_json::from_str(&text).expect("nft -j output is JSON")
    }

    /// The `rule` objects of one chain, in order.
    pub fn rules(&self, family: &str, table: &str, chain: &str) -> Vec<Value> {
        objects(&self.ruleset(), "rule")
            .into_iter()
            .filter(|r| r["family"] == family && r["table"] == table && r["chain"] == chain)
            .collect()
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}

/// Every object of one kind (`table`, `chain`, `rule`, `set`) in an `nft -j` document.
pub fn objects(doc: &Value, kind: &str) -> Vec<Value> {
    doc["nftables"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i.get(kind).cloned()).collect())
        .unwrap_or_default()
}

/// The statement of a rule's `expr` list whose single key is `kind` (e.g. `masquerade`).
pub fn statements<'a>(rule: &'a Value, kind: &str) -> Vec<&'a Value> {
    rule["expr"]
        .as_array()
        .map(|e| e.iter().filter_map(|s| s.get(kind)).collect())
        .unwrap_or_default()
}
