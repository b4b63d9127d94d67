//! Whether the bridge plugin the conflist chains tells the agent about pods: only rcni's does
//! (`rcniNodeSocket`), and NetworkPolicy's hold needs it. With another bridge (Debian's Go
//! plugins in `--cni-bin-dir`) the agent would never hear of a new pod before a scan found
//! it, and the hold would drop a CRI pod's traffic for seconds, or for ever where no source
//! lists it: the agent then enforces without the hold, as before it (a new pod is open until
//! a scan finds it), and says so.
//!
//! A plugin run without `CNI_COMMAND` prints what it is on stderr (the skeletons of rcni and
//! of containernetworking/plugins both do: `CNI bridge plugin (rcni-plugins v0.1.0)`, `CNI
//! bridge plugin v1.1.1`); this module asks once, at start.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the plugin may take to say what it is.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `<bin_dir>/bridge` is rcni's (blocking; at most [`ASK_TIMEOUT`]).
pub fn tells_pods(bin_dir: &Path) -> bool {
    about(&bin_dir.join("bridge")).is_some_and(|text| text.contains("(rcni-plugins"))
}

/// What `plugin` prints about itself, if it runs and exits in time.
fn about(plugin: &Path) -> Option<String> {
    let mut child = Command::new(plugin)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < ASK_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) {
        let path = dir.join("bridge");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn only_rcnis_bridge_tells_pods() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!tells_pods(dir.path()), "no bridge");
        script(dir.path(), "echo 'CNI bridge plugin v1.1.1' >&2");
        assert!(!tells_pods(dir.path()), "Go's");
        script(
            dir.path(),
            "echo 'CNI bridge plugin (rcni-plugins v0.1.0)' >&2",
        );
        assert!(tells_pods(dir.path()));
    }
}
