//! `rcni netns add|list|del` (root only; skipped otherwise).

use std::process::Command;

use cni_testkit::is_root;

fn rcni(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rcni"))
        .args(args)
        .output()
        .unwrap()
}

/// Deletes the namespace even when an assertion fails.
struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

#[test]
fn netns_add_list_del() {
    if !is_root() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let name = format!("rcni-cli-{}", std::process::id());
    let _guard = Cleanup(name.clone());
    let out = rcni(&["netns", "add", &name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("/run/netns/{name}")
    );
    let out = rcni(&["netns", "list"]);
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l == name));
    // Adding it again fails with exit 1 and says why.
    let out = rcni(&["netns", "add", &name]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let out = rcni(&["netns", "del", &name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!std::path::Path::new("/run/netns").join(&name).exists());
    let out = rcni(&["netns", "del", &name]);
    assert_eq!(out.status.code(), Some(1));
    let out = rcni(&["netns", "add", "a/b"]);
    assert_eq!(out.status.code(), Some(1));
}
