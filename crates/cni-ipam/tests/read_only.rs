//! A store on a read-only mount. Root ignores permission bits, so the test re-runs itself inside a
//! private mount namespace (`unshare --mount`) where the data directory is bind-mounted read-only.
//! Skipped with a message when mount namespaces are not available.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use cni_ipam::IpamError;
use common::{single, NETWORK};
use serde_json::json;

const CHILD_ENV: &str = "RCNI_IPAM_READ_ONLY_DIR";

fn range() -> serde_json::Value {
    json!({"subnet": "198.18.176.0/24"})
}

/// Runs inside the namespace: reads work, writes fail cleanly.
fn in_read_only_namespace(dir: &Path) {
    let ipam = single(dir, range());
    let error = ipam.status().unwrap_err();
    assert!(
        matches!(error, IpamError::StatusNotWritable { .. }),
        "{error}"
    );
    assert_eq!(error.cni_code(), 50);
    let error = ipam.allocate("ctr2", "eth0", &[]).unwrap_err();
    assert_eq!(error.cni_code(), 5, "{error}");
    // CHECK only reads, and the existing lock file opens read-only like Go's.
    ipam.check("ctr1", "eth0").unwrap();
    assert!(ipam.release("ctr1", "eth0").is_err());
}

#[test]
fn read_only_data_dir() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        in_read_only_namespace(Path::new(&dir));
        return;
    }
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot create a mount namespace with unshare(1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    single(dir.path(), range())
        .allocate("ctr1", "eth0", &[])
        .unwrap();
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" --exact read_only_data_dir --nocapture"#;
    let output = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(dir.path())
        .arg(std::env::current_exe().unwrap())
        .env(CHILD_ENV, dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "read-only run failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The child really ran the checks (libtest reports one passed test).
    assert!(String::from_utf8_lossy(&output.stdout).contains("1 passed"));
    // Outside the namespace the directory is still writable and untouched.
    assert!(dir.path().join(NETWORK).join("198.18.176.2").is_file());
    single(dir.path(), range()).status().unwrap();
}
