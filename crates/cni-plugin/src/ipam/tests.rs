//! Delegation against a fake IPAM plugin (a shell script) in a temporary CNI_PATH
//! (SPEC.md, Section 4: Plugin Delegation).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

/// Writes an executable `fake-ipam` into `dir` that logs its env and stdin and answers ADD
/// with one address, CHECK with a code-11 error, everything else with success.
fn fake_ipam(dir: &Path) {
    let log = dir.join("calls.log");
    let script = format!(
        r#"#!/bin/sh
echo "$CNI_COMMAND|$CNI_CONTAINERID|$CNI_NETNS|$CNI_IFNAME|$CNI_ARGS|$CNI_PATH" >> {log}
cat > {dir}/stdin.$CNI_COMMAND
case "$CNI_COMMAND" in
ADD) printf '{{"cniVersion":"1.1.0","ips":[{{"address":"198.18.0.2/24","gateway":"198.18.0.1"}}]}}' ;;
CHECK) printf '{{"code":11,"msg":"try later"}}'; exit 1 ;;
esac
"#,
        log = log.display(),
        dir = dir.display()
    );
    let path = dir.join("fake-ipam");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

const CONF: &str = r#"{"cniVersion":"1.1.0","name":"n","type":"bridge","ipam":{"type":"fake-ipam","subnet":"198.18.0.0/24"}}"#;

fn args(dir: &Path, conf: &str) -> CmdArgs {
    let mut a = CmdArgs::new(Command::Add, conf.as_bytes()).unwrap();
    a.container_id = "c1".into();
    a.netns = "/run/netns/x".into();
    a.ifname = "eth0".into();
    a.args = "K=V".into();
    a.path = format!("/nonexistent:{}", dir.display());
    a
}

fn calls(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

// Same environment, complete config, result parsed.
#[test]
fn add_passes_env_and_full_config() {
    let dir = tempfile::tempdir().unwrap();
    fake_ipam(dir.path());
    let a = args(dir.path(), CONF);
    let r = ipam_add(&a).unwrap();
    assert_eq!(r.ips[0].address.to_string(), "198.18.0.2/24");
    let expected = format!("ADD|c1|/run/netns/x|eth0|K=V|{}", a.path);
    assert_eq!(calls(dir.path()), [expected]);
    assert_eq!(
        fs::read(dir.path().join("stdin.ADD")).unwrap(),
        CONF.as_bytes()
    );
}

// DEL, STATUS and GC are forwarded; a delegate's error keeps its code.
#[test]
fn other_commands_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    fake_ipam(dir.path());
    let a = args(dir.path(), CONF);
    ipam_del(&a).unwrap();
    ipam_status(&a).unwrap();
    ipam_gc(&a).unwrap();
    let e = ipam_check(&a).unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "try later"));
    let cmds: Vec<String> = calls(dir.path())
        .iter()
        .map(|l| l.split('|').next().unwrap().to_string())
        .collect();
    assert_eq!(cmds, ["DEL", "STATUS", "GC", "CHECK"]);
}

// A config without ipam.type is code 7; a type not in CNI_PATH is an error naming it.
#[test]
fn missing_type_or_binary() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(
        dir.path(),
        r#"{"cniVersion":"1.1.0","name":"n","type":"bridge"}"#,
    );
    assert_eq!(ipam_add(&a).unwrap_err().code, 7);
    let a = args(dir.path(), CONF);
    let e = ipam_add(&a).unwrap_err();
    assert!(e.msg.contains("fake-ipam"), "{e}");
}

// "ADD failed, so DEL": an undo stack dropped uncommitted releases the lease; a committed
// one does not.
#[test]
fn lease_released_unless_committed() {
    let dir = tempfile::tempdir().unwrap();
    fake_ipam(dir.path());
    let a = args(dir.path(), CONF);
    {
        let mut undo = Undo::new();
        let lease = ipam_add_with_undo(&a, &mut undo).unwrap();
        assert_eq!(lease.ips.len(), 1);
        // dropped here, as when the caller's ADD returns an error
    }
    let mut undo = Undo::new();
    let committed = ipam_add_with_undo(&a, &mut undo).unwrap();
    undo.commit();
    assert_eq!(committed.ips[0].gateway.unwrap().to_string(), "198.18.0.1");
    let cmds: Vec<String> = calls(dir.path())
        .iter()
        .map(|l| l.split('|').next().unwrap().to_string())
        .collect();
    assert_eq!(cmds, ["ADD", "DEL", "ADD"]);
    assert_eq!(
        fs::read(dir.path().join("stdin.DEL")).unwrap(),
        CONF.as_bytes()
    );
}
