//! The workspace's crates and their dependencies on each other, from `cargo metadata`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// A crate's dependencies on other workspace crates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edges {
    /// `[dependencies]` (and build dependencies).
    pub normal: BTreeSet<String>,
    /// `[dev-dependencies]` that are not also normal dependencies.
    pub dev: BTreeSet<String>,
}

/// Every workspace crate by package name, with its edges.
pub fn workspace(root: &Path) -> BTreeMap<String, Edges> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let mut edges = Edges::default();
            for d in p["dependencies"].as_array().into_iter().flatten() {
                let Some(name) = d["name"].as_str().filter(|n| names.contains(*n)) else {
                    continue;
                };
                match d["kind"].as_str() {
                    Some("dev") => edges.dev.insert(name.to_string()),
                    _ => edges.normal.insert(name.to_string()),
                };
            }
            edges.dev = edges.dev.difference(&edges.normal).cloned().collect();
            (p["name"].as_str().unwrap_or_default().to_string(), edges)
        })
        .collect()
}
