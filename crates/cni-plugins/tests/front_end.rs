//! The multi-call front end of `rcni-plugins`: help, install, unknown names. No root needed.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

fn run(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args).envs(envs.iter().copied()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// Under its own name (no arguments or --help) it lists the plugins and their versions.
#[test]
fn help_lists_plugins_and_versions() {
    for args in [&[][..], &["--help"][..]] {
        let out = run(Path::new(BIN), args, &[]);
        assert!(out.status.success());
        let help = text(&out.stdout);
        for p in cni_plugins::PLUGINS {
            assert!(help.contains(p.name), "{help}");
        }
        assert!(help.contains("CNI spec versions: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"));
        assert!(help.contains("install <dir>"));
    }
    let out = run(Path::new(BIN), &["bogus"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown arguments"));
}

// install creates one link per plugin to the canonical binary; a linked name runs the plugin.
#[test]
fn install_links_every_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("opt/cni/bin");
    let out = run(Path::new(BIN), &["install", bin_dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let canonical = std::fs::canonicalize(BIN).unwrap();
    for p in cni_plugins::PLUGINS {
        assert_eq!(std::fs::read_link(bin_dir.join(p.name)).unwrap(), canonical);
    }
    // A foreign file is kept without --force and reported.
    let lo = bin_dir.join("loopback");
    std::fs::remove_file(&lo).unwrap();
    std::fs::write(&lo, "foreign").unwrap();
    let out = run(Path::new(BIN), &["install", bin_dir.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("--force"));
    let out = run(
        Path::new(BIN),
        &["install", bin_dir.to_str().unwrap(), "--force"],
        &[],
    );
    assert!(out.status.success());
    assert_eq!(std::fs::read_link(&lo).unwrap(), canonical);

    // The link dispatches to the plugin.
    let out = run(&lo, &[], &[("CNI_COMMAND", "VERSION")]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("{\"cniVersion\":\"1.1.0\",\"supportedVersions\""));
}

// install --copy (a DaemonSet's init container): the executable is copied into the directory
// and every name, loopback included, links to the copy by its relative name and runs it.
#[test]
fn install_copy_links_every_plugin_to_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("host/opt/cni/bin");
    let out = run(
        Path::new(BIN),
        &["install", "--copy", bin_dir.to_str().unwrap(), "--force"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copy = bin_dir.join("rcni-plugins");
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(BIN).unwrap());
    for p in cni_plugins::PLUGINS {
        let link = std::fs::read_link(bin_dir.join(p.name)).unwrap();
        assert_eq!(link, Path::new("rcni-plugins"), "{}", p.name);
    }
    // The directory moved elsewhere (mounted at another path) still works.
    let moved = dir.path().join("elsewhere");
    std::fs::rename(&bin_dir, &moved).unwrap();
    let out = run(&moved.join("loopback"), &[], &[("CNI_COMMAND", "VERSION")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"supportedVersions\""));
    // Unknown flags and a second directory are refused, nothing installed.
    for bad in [
        &["install", "--copyy", "x"][..],
        &["install", "a", "b"],
        &["install"],
    ] {
        let out = run(Path::new(BIN), bad, &[]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

// A runtime executing the binary under a name it does not contain gets a CNI error object.
#[test]
fn unknown_name_with_cni_command_is_a_cni_error() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("no-such-plugin");
    symlink(BIN, &link).unwrap();
    let out = run(&link, &[], &[("CNI_COMMAND", "ADD")]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], 999);
    assert!(v["msg"].as_str().unwrap().contains("no-such-plugin"));
}

// VERSION reads stdin to echo the caller's version but never hangs on a stdin left open.
#[test]
fn version_does_not_hang_on_open_stdin() {
    use std::io::Write;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("loopback");
    symlink(BIN, &link).unwrap();
    let mut child = Command::new(&link)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(br#"{"cniVersion":"0.3.1"}"#).unwrap();
    let start = Instant::now();
    let out = child.wait_with_output().unwrap(); // stdin is still open here
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(stdin);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cniVersion"], "0.3.1");
}

/// `rcni-plugins` under its own name with `CNI_COMMAND=RCNI_REPAIR_LOOK` (what the runtime's
/// repair sends it): `stdin`'s answer and exit code.
fn repair_look(stdin: &str) -> (i32, serde_json::Value) {
    let out = cni_testkit::PluginCall::new("RCNI_REPAIR_LOOK")
        .container_id("c1")
        .ifname("eth0")
        .stdin(stdin)
        .run_here(BIN)
        .unwrap();
    (out.status, out.json().unwrap())
}

// The repair command: a plugin type without rules says so, bad input is a CNI error, a
// rule-owning plugin without the cached result it needs is refused with code 7.
#[test]
fn repair_command_answers_for_one_plugin() {
    let (code, v) = repair_look(r#"{"cniVersion":"1.0.0","name":"n","type":"loopback"}"#);
    assert_eq!((code, v), (0, serde_json::json!({"ownsNoRules": true})));
    let (code, v) = repair_look(r#"{"cniVersion":"1.0.0","name":"n","type":"not-rcni"}"#);
    assert_eq!((code, v), (0, serde_json::json!({"ownsNoRules": true})));
    let (code, v) = repair_look("{not json");
    assert_eq!(code, 1);
    assert_eq!(v["code"], 6, "{v}");
    let (code, v) = repair_look(r#"{"cniVersion":"1.0.0","name":"n","type":"portmap"}"#);
    assert_eq!(code, 1);
    assert_eq!(v["code"], 7, "{v}");
    assert!(v["msg"].as_str().unwrap().contains("prevResult"), "{v}");
    // The attachment must be named, as for CHECK.
    let out = cni_testkit::PluginCall::new("RCNI_REPAIR")
        .container_id("c1")
        .stdin(r#"{"cniVersion":"1.0.0","name":"n","type":"portmap"}"#)
        .run_here(BIN)
        .unwrap();
    assert_eq!(out.error_code(), Some(4), "{}", out.stdout);
}
