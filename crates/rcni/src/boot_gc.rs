//! GC on the first `rcni pod` after the node (re)started: a marker file under a tmpfs run dir
//! (cleared at boot) says GC already ran for one state dir since then. The marker's name is
//! derived from the state dir, so two state dirs on one node each get their own first GC.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the markers live by default: tmpfs, empty after every boot.
pub const DEFAULT_RUN_DIR: &str = "/run/rcni";

/// The marker of `state_dir` under `run_dir`: `pod-gc-<first 16 hex of sha256(abs path)>`.
pub fn marker(run_dir: &Path, state_dir: &Path) -> PathBuf {
    let abs = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let digest = Sha256::digest(abs.as_os_str().as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    run_dir.join(format!("pod-gc-{hash}"))
}

/// Whether GC already ran for this boot.
pub fn done(marker: &Path) -> bool {
    marker.exists()
}

/// Records that GC ran for this boot.
pub fn mark(marker: &Path) -> std::io::Result<()> {
    if let Some(dir) = marker.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(marker, b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_depends_on_the_state_dir_only() {
        let run = Path::new("/run/x");
        let a = marker(run, Path::new("/var/lib/a"));
        assert_eq!(a, marker(run, Path::new("/var/lib/a")));
        assert_ne!(a, marker(run, Path::new("/var/lib/b")));
        assert!(a.starts_with(run));
        assert!(a
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("pod-gc-"));
    }

    // The name is the first 16 hex digits of SHA-256 of the absolute path (expected value from
    // coreutils: `printf /var/lib/rcni/pods | sha256sum | cut -c1-16`).
    #[test]
    fn marker_name_is_unchanged() {
        let m = marker(Path::new("/run/rcni"), Path::new("/var/lib/rcni/pods"));
        assert_eq!(m, Path::new("/run/rcni/pod-gc-e19b782abeb0e6e4"));
    }

    #[test]
    fn mark_creates_the_run_dir_and_done_sees_it() {
        let tmp = tempfile::tempdir().unwrap();
        let m = marker(&tmp.path().join("run"), Path::new("/state"));
        assert!(!done(&m));
        mark(&m).unwrap();
        assert!(done(&m));
    }
}
