//! `rcni lab` end to end: it must prove a real attachment, fail loudly when it cannot, and
//! leave no namespace behind either way. Runs as root; the lab makes its own namespaces.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn rcni() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rcni"))
}

/// Runs `rcni --json lab ...`; returns the exit code, the report and the lab's pid.
fn lab(args: &[&str]) -> (i32, Value, u32) {
    let child = Command::new(rcni())
        .arg("--json")
        .arg("lab")
        .args(args)
        .env_remove("CNI_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "lab printed no JSON report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report, pid)
}

fn no_namespaces_left(pid: u32) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("rcnilab-{pid}-");
    assert!(!list.contains(&prefix), "lab left namespaces: {list}");
}

fn failed_steps(report: &Value) -> Vec<String> {
    report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["verdict"] == "fail")
        .map(|s| format!("{}: {} ({})", s["layer"], s["check"], s["detail"]))
        .collect()
}

fn layers_passed(report: &Value) -> Vec<String> {
    let mut layers: Vec<String> = report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["verdict"] == "pass")
        .map(|s| s["layer"].as_str().unwrap_or_default().to_string())
        .collect();
    layers.dedup();
    layers
}

/// A directory of links named after the plugins, pointing at the rcni multi-call binary.
fn rcni_plugins_dir(tmp: &Path) -> PathBuf {
    let bin = rcni().with_file_name("rcni-plugins");
    assert!(
        bin.exists(),
        "build rcni-plugins first (cargo build -p cni-plugins)"
    );
    let dir = tmp.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    for p in ["loopback", "bridge", "host-local"] {
        std::os::unix::fs::symlink(&bin, dir.join(p)).unwrap();
    }
    dir
}

#[test]
fn default_lab_proves_all_four_layers_with_rcni_plugins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = rcni_plugins_dir(tmp.path());
    let (code, report, pid) = lab(&["--bin-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "failed steps: {:?}", failed_steps(&report));
    assert_eq!(report["ok"], true);
    for layer in [
        "setup",
        "plugin-result",
        "kernel",
        "ipam",
        "traffic",
        "teardown",
    ] {
        assert!(
            layers_passed(&report).contains(&layer.to_string()),
            "no passing {layer} step"
        );
    }
    no_namespaces_left(pid);
}

#[test]
fn lab_drives_the_go_reference_plugins_too() {
    if !Path::new("/usr/lib/cni/bridge").exists() {
        eprintln!("SKIPPED: Go reference plugins not installed (apt-get install containernetworking-plugins)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Debian's Go plugins speak spec versions up to 1.0.0.
    let conf = tmp.path().join("go.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"golab","plugins":[{"type":"bridge","bridge":"golab0","isGateway":true,
            "ipam":{"type":"host-local","ranges":[[{"subnet":"10.204.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}"#,
    )
    .unwrap();
    let (code, report, pid) = lab(&[
        "--bin-dir",
        "/usr/lib/cni",
        "--config",
        conf.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "failed steps: {:?}", failed_steps(&report));
    assert!(layers_passed(&report).contains(&"traffic".to_string()));
    no_namespaces_left(pid);
}

#[test]
fn missing_plugins_fail_before_anything_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, report, pid) = lab(&["--bin-dir", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(report["ok"], false);
    let failed = failed_steps(&report);
    assert!(failed.iter().any(|f| f.contains("found")), "{failed:?}");
    // Nothing was made, so nothing may be reported as proven about teardown.
    let teardown_passes: Vec<&Value> = report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["layer"] == "teardown" && s["verdict"] == "pass")
        .collect();
    assert!(teardown_passes.is_empty(), "{teardown_passes:?}");
    no_namespaces_left(pid);
}

#[test]
fn a_failing_attachment_is_reported_and_cleaned_up() {
    if !Path::new("/usr/lib/cni/bridge").exists() {
        eprintln!("SKIPPED: Go reference plugins not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A /30 has room for one pod only: pod-b's ADD must fail, and the lab must say so.
    let conf = tmp.path().join("tiny.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"tiny","plugins":[{"type":"bridge","bridge":"tiny0","isGateway":true,
            "ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.205.0/30"}]]}}]}"#,
    )
    .unwrap();
    let (code, report, pid) = lab(&[
        "--bin-dir",
        "/usr/lib/cni",
        "--config",
        conf.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let failed = failed_steps(&report);
    assert!(
        failed.iter().any(|f| f.contains("pod-b: ADD")),
        "{failed:?}"
    );
    no_namespaces_left(pid);
}
