//! `rcni lab` end to end: it must prove a real attachment, fail loudly when it cannot, and
//! leave no namespace behind either way. Runs as root; the lab makes its own namespaces.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod support;

fn rcni() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rcni"))
}

/// Runs `rcni --json lab ...`; returns the exit code, the report and the lab's pid.
fn lab(args: &[&str]) -> (i32, Value, u32) {
    let mut c = Command::new(rcni());
    c.arg("--json").arg("lab").args(args);
    let (pid, code, report) = support::run_json(&mut c, "lab");
    (code, report, pid)
}

/// `rcni lab` with Debian's Go plugins on a conflist.
fn go_lab(conf: &Path) -> (i32, Value, u32) {
    lab(&[
        "--bin-dir",
        "/usr/lib/cni",
        "--config",
        conf.to_str().unwrap(),
    ])
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
    for p in ["loopback", "bridge", "host-local", "tuning"] {
        std::os::unix::fs::symlink(&bin, dir.join(p)).unwrap();
    }
    dir
}

fn steps_matching<'a>(report: &'a Value, layer: &str, text: &str) -> Vec<&'a Value> {
    report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["layer"] == layer && s["check"].as_str().unwrap_or("").contains(text))
        .collect()
}

/// Each controlled failure ran its whole protocol and passed: the ADD failed, the DEL with the
/// correct config released what it left, and a retry with a new ID succeeded.
fn failures_proven(report: &Value, cases: &[&str]) {
    for case in cases {
        for what in [
            "ADD fails",
            "DEL with the correct config and the same ID succeeds",
            "DEL released exactly what the failure left",
            "a retry with a new ID succeeds",
            "DEL released exactly what the retry made",
        ] {
            let found = steps_matching(report, "failures", &format!("({case})"));
            let step = found
                .iter()
                .find(|s| s["check"].as_str().unwrap().contains(what))
                .unwrap_or_else(|| panic!("({case}) has no step {what:?}: {found:?}"));
            assert_eq!(step["verdict"], "pass", "({case}) {what}: {step}");
        }
    }
    let b = steps_matching(
        report,
        "failures",
        "(b) the error comes before any lease is taken",
    );
    assert_eq!(b.len(), 1);
    assert_eq!(b[0]["verdict"], "pass", "{}", b[0]);
    let c1 = steps_matching(
        report,
        "failures",
        "(c1) the runtime's rollback left nothing",
    );
    assert_eq!(c1[0]["verdict"], "pass", "{}", c1[0]);
    // Without rollback, the chain's earlier plugins leave their attachment: the evidence
    // shows the host veth on the bridge and the lease, captured before any cleanup.
    let c2 = steps_matching(report, "failures", "(c2) left right after the failed ADD");
    assert_eq!(c2[0]["verdict"], "note");
    let left = c2[0]["detail"].as_str().unwrap();
    assert!(
        left.contains("+ link veth") && left.contains("kind=veth master="),
        "{left}"
    );
    assert!(
        left.contains("+ lease ") && left.contains("fc2 eth0"),
        "{left}"
    );
}

#[test]
fn default_lab_proves_all_four_layers_with_rcni_plugins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = rcni_plugins_dir(tmp.path());
    let record = tmp.path().join("record.json");
    let (code, report, pid) = lab(&[
        "--bin-dir",
        dir.to_str().unwrap(),
        "--record",
        record.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "failed steps: {:?}", failed_steps(&report));
    assert_eq!(report["ok"], true);
    for layer in [
        "setup",
        "plugin-result",
        "kernel",
        "ipam",
        "traffic",
        "lifecycle",
        "teardown",
        "failures",
        "snapshot",
        "evidence",
    ] {
        assert!(
            layers_passed(&report).contains(&layer.to_string()),
            "no passing {layer} step"
        );
        assert!(report["layers"][layer]["passed"].as_u64().unwrap() > 0);
    }
    // rcni's bridge resolves its IPAM plugin before it creates anything.
    let a = steps_matching(&report, "failures", "(a) left right after the failed ADD");
    assert_eq!(a[0]["detail"], "nothing");
    failures_proven(&report, &["a", "b", "c1", "c2"]);
    evidence_record_is_complete(&record, &report);
    no_namespaces_left(pid);
}

/// The record ties every claim to evidence: the kernel, the config's hash, each binary's hash
/// and VERSION answer, and every plugin run with its inputs and outputs.
fn evidence_record_is_complete(file: &Path, report: &Value) {
    let rec: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(rec["kernel_release"], release.trim());
    let raw = rec["config"]["raw"].as_str().unwrap();
    assert_eq!(rec["config"]["sha256"], sha256_of(raw.as_bytes()));
    let binaries = rec["binaries"].as_array().unwrap();
    for plugin in ["loopback", "bridge", "host-local", "tuning"] {
        let b = binaries
            .iter()
            .find(|b| b["plugin"] == plugin)
            .unwrap_or_else(|| panic!("{plugin} not identified: {binaries:?}"));
        let bytes = std::fs::read(b["resolved_path"].as_str().unwrap()).unwrap();
        assert_eq!(b["sha256"], sha256_of(&bytes), "{plugin}");
        assert!(b["version"]["supportedVersions"].is_array(), "{b}");
    }
    let ops = rec["operations"].as_array().unwrap();
    let add = ops
        .iter()
        .find(|o| o["label"].as_str().unwrap().starts_with("pod-a: ADD"))
        .unwrap();
    let bridge = add["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["plugin"] == "bridge")
        .unwrap();
    assert_eq!(bridge["env"]["CNI_COMMAND"], "ADD");
    assert_eq!(bridge["exit_status"], 0);
    let stdin: Value = serde_json::from_str(bridge["stdin"].as_str().unwrap()).unwrap();
    assert_eq!(stdin["type"], "bridge");
    let stdout: Value = serde_json::from_str(bridge["stdout"].as_str().unwrap()).unwrap();
    assert!(stdout["ips"].is_array(), "{stdout}");
    assert!(bridge["netns_inode"].as_u64().unwrap() > 0);
    assert!(bridge["duration_ms"].as_f64().unwrap() > 0.0);
    // The delegated IPAM run is traced too, inside the bridge's run.
    assert!(add["calls"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["plugin"] == "host-local" && c["env"]["CNI_COMMAND"] == "ADD"));
    // The failing netns path of (b) is recorded without an inode.
    let b = ops
        .iter()
        .find(|o| o["label"].as_str().unwrap().starts_with("(b) failing ADD"))
        .unwrap();
    assert!(b["calls"][0]["netns_inode"].is_null(), "{b}");
    assert_ne!(b["calls"][0]["exit_status"], 0);
    assert!(report["evidence"]["summary"].as_array().unwrap().len() > 3);
}

fn sha256_of(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A plugin that leaks a host link on every ADD: the lab's before/after snapshot must name it.
#[test]
fn a_planted_leak_shows_up_in_the_snapshot_diff() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = rcni_plugins_dir(tmp.path());
    let leaky = dir.join("leaky");
    std::fs::write(
        &leaky,
        r#"#!/bin/sh
# Test plugin: passes prevResult through and leaks a bridge named after the container.
stdin=$(cat)
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}' ;;
ADD) ip link add "rl$(printf %s "$CNI_CONTAINERID" | sha1sum | cut -c1-10)" type bridge || exit 1
     printf %s "$stdin" | jq -c '.prevResult + {cniVersion: .cniVersion}' ;;
esac
"#,
    )
    .unwrap();
    std::fs::set_permissions(&leaky, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let conf = tmp.path().join("leaky.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.1.0","name":"leaky","plugins":[{"type":"bridge","bridge":"leaky0","isGateway":true,
            "ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.206.0/24"}]]}},{"type":"leaky"}]}"#,
    )
    .unwrap();
    let (code, report, pid) = lab(&[
        "--bin-dir",
        dir.to_str().unwrap(),
        "--config",
        conf.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "the leak went unnoticed");
    let diff = steps_matching(&report, "snapshot", "equal before and after the run");
    assert_eq!(diff.len(), 1, "{report}");
    assert_eq!(diff[0]["verdict"], "fail");
    let detail = diff[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("+ link rl") && detail.contains("kind=bridge"),
        "{detail}"
    );
    // The pods' own attachments were still proven; only the leak fails the run.
    assert!(layers_passed(&report).contains(&"traffic".to_string()));
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
            "ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.204.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}"#,
    )
    .unwrap();
    let (code, report, pid) = go_lab(&conf);
    assert_eq!(code, 0, "failed steps: {:?}", failed_steps(&report));
    assert!(layers_passed(&report).contains(&"traffic".to_string()));
    failures_proven(&report, &["a", "b", "c1", "c2"]);
    // Go's bridge creates the veth before it looks for the IPAM plugin and leaves it when
    // that fails: the evidence shows it, and the DEL above proved it was released.
    let a = steps_matching(&report, "failures", "(a) left right after the failed ADD");
    let left = a[0]["detail"].as_str().unwrap();
    assert!(
        left.contains("+ link veth") && left.contains("master=golab0"),
        "{left}"
    );
    assert!(left.contains("+ pod-link eth0"), "{left}");
    let diff = steps_matching(&report, "snapshot", "equal before and after the run");
    assert_eq!(diff[0]["verdict"], "pass", "{}", diff[0]);
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
    let (code, report, pid) = go_lab(&conf);
    assert_eq!(code, 1);
    let failed = failed_steps(&report);
    assert!(
        failed.iter().any(|f| f.contains("pod-b: ADD")),
        "{failed:?}"
    );
    no_namespaces_left(pid);
}

/// ptp with ipMasq, then portmap: per-attachment nf_tables objects must go with DEL, while the
/// masquerade tables every attachment of the host shares stay and are listed as such.
fn ptp_conflist(tmp: &Path) -> PathBuf {
    let conf = tmp.join("ptp.conflist");
    std::fs::write(
        &conf,
        r#"{"cniVersion":"1.0.0","name":"ptplab","plugins":[{"type":"ptp","ipMasq":true,
            "ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.207.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
            {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
    )
    .unwrap();
    conf
}

#[test]
fn a_ptp_chain_with_masquerade_leaves_only_the_shared_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = rcni_plugins_dir(tmp.path());
    for p in ["ptp", "portmap"] {
        std::os::unix::fs::symlink(rcni().with_file_name("rcni-plugins"), dir.join(p)).unwrap();
    }
    let conf = ptp_conflist(tmp.path());
    let (code, report, pid) = lab(&[
        "--bin-dir",
        dir.to_str().unwrap(),
        "--config",
        conf.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "failed steps: {:?}", failed_steps(&report));
    failures_proven(&report, &["a", "b", "c1", "c2"]);
    let kept = steps_matching(
        &report,
        "snapshot",
        "nf_tables objects that name no attachment",
    );
    assert_eq!(kept.len(), 1, "{report}");
    let detail = kept[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("table inet cni_plugins_masquerade"),
        "{detail}"
    );
    no_namespaces_left(pid);
}

/// Go's ptp runs its IPAM plugin before it opens the netns: with a netns that does not exist
/// it takes a lease and gives it back. The lab's failure (b) catches exactly that.
#[test]
fn lab_catches_go_ptp_taking_a_lease_before_checking_the_netns() {
    if !Path::new("/usr/lib/cni/ptp").exists() {
        eprintln!("SKIPPED: Go reference plugins not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let conf = ptp_conflist(tmp.path());
    let (code, report, pid) = go_lab(&conf);
    assert_eq!(code, 1);
    let failed = failed_steps(&report);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("(b) the error comes before any lease is taken")
            && failed[0].contains("IPAM runs: host-local"),
        "{failed:?}"
    );
    no_namespaces_left(pid);
}
