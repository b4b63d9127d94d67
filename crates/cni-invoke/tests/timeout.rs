//! Plugin timeouts: one deadline for the whole run, and the plugin's whole process group
//! killed when it passes, so a delegate the plugin started (an IPAM plugin) dies with it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni_invoke::*;

fn script(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("plugin");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn inv() -> Invocation {
    Invocation {
        command: "ADD".into(),
        container_id: "c1".into(),
        netns: "/run/netns/x".into(),
        ifname: "eth0".into(),
        ..Default::default()
    }
}

fn within(t: Duration) -> ExecOptions {
    ExecOptions {
        timeout: Some(t),
        forward_stderr: false,
        ..Default::default()
    }
}

/// Alive means present in /proc and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

fn read_pid(p: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "{} never written", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn dies_soon(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Kills a leftover by pid if the test failed (never a broad name).
struct Reap(Vec<u32>);
impl Drop for Reap {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
}

#[test]
fn timeout_kills_the_plugin_and_the_delegate_it_started() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().display().to_string();
    let p = script(
        d.path(),
        &format!(
            "sleep 300 &\necho $! > '{dir}/child.pid'\necho $$ > '{dir}/plugin.pid'\nsleep 300"
        ),
    );
    let started = Instant::now();
    let e = exec_raw(&p, &inv(), b"{}", &within(Duration::from_millis(500))).unwrap_err();
    assert!(matches!(e, InvokeError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let (plugin, child) = (
        read_pid(&d.path().join("plugin.pid")),
        read_pid(&d.path().join("child.pid")),
    );
    let _reap = Reap(vec![plugin, child]);
    assert!(dies_soon(plugin), "plugin {plugin} survived the timeout");
    assert!(dies_soon(child), "delegate {child} survived the timeout");
}

// The plugin exits but a child it left holds stdout open: the run ends at the deadline and
// the child is killed with the group.
#[test]
fn a_child_holding_the_output_open_is_killed_at_the_deadline() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().display().to_string();
    let p = script(
        d.path(),
        &format!("sleep 300 &\necho $! > '{dir}/child.pid'\necho '{{}}'\nexit 0"),
    );
    let e = exec_raw(&p, &inv(), b"{}", &within(Duration::from_millis(500))).unwrap_err();
    assert!(matches!(e, InvokeError::Timeout { .. }), "{e}");
    let child = read_pid(&d.path().join("child.pid"));
    let _reap = Reap(vec![child]);
    assert!(dies_soon(child), "child {child} survived the timeout");
}

// Output closed early, exit late: the wait for the exit is not given a fresh timeout.
#[test]
fn the_deadline_is_applied_once() {
    let d = tempfile::tempdir().unwrap();
    let p = script(d.path(), "sleep 0.6\nexec >&- 2>&-\nsleep 0.8\nexit 0");
    let started = Instant::now();
    let e = exec_raw(&p, &inv(), b"{}", &within(Duration::from_millis(1000))).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, InvokeError::Timeout { .. }), "{e}");
    assert!(took < Duration::from_millis(1350), "took {took:?}");
    // Well inside the deadline the same plugin succeeds.
    exec_raw(&p, &inv(), b"{}", &within(Duration::from_secs(5))).unwrap();
}
