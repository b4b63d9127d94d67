//! Per-network exclusion of GC against ADD and DEL across processes (SPEC.md, Section 3: Execution
//! of Network Configurations, "Lifecycle & Ordering").
//!
//! One lock file per network, `<cacheDir>/locks/<network>.lock`. ADD and DEL hold it shared
//! (they may run concurrently for different containers), GC holds it exclusive, so GC starts
//! only after in-flight ADDs and DELs finish and no new one starts until GC is done. The lock
//! is released when the guard is dropped (or the process dies). The locks directory is
//! checked like every state directory, and lock files are `cni_persist`'s (0600, never
//! opened through a symlink).

use std::fs::File;
use std::path::{Path, PathBuf};

use cni_persist::LockKind;

use crate::error::RuntimeError;
use crate::statedir::ensure_private_dir;

/// A held network lock.
#[derive(Debug)]
pub struct NetworkLock {
    _file: File,
    path: PathBuf,
}

impl NetworkLock {
    /// Path of the lock file of `network` (the name is validated by the caller).
    pub fn path(cache_dir: &Path, network: &str) -> PathBuf {
        cache_dir.join("locks").join(format!("{network}.lock"))
    }

    /// Blocks until the lock is held shared (ADD, DEL).
    pub fn shared(cache_dir: &Path, network: &str) -> Result<NetworkLock, RuntimeError> {
        NetworkLock::take(cache_dir, network, false)
    }

    /// Blocks until the lock is held exclusively (GC).
    pub fn exclusive(cache_dir: &Path, network: &str) -> Result<NetworkLock, RuntimeError> {
        NetworkLock::take(cache_dir, network, true)
    }

    fn take(cache_dir: &Path, network: &str, exclusive: bool) -> Result<NetworkLock, RuntimeError> {
        let path = NetworkLock::path(cache_dir, network);
        let fail = |e| RuntimeError::io("cannot lock network", &path, e);
        if let Some(dir) = path.parent() {
            ensure_private_dir(dir).map_err(fail)?;
        }
        let kind = if exclusive {
            LockKind::Exclusive
        } else {
            LockKind::Shared
        };
        let file = cni_persist::lock(&path, kind).map_err(|e| fail(e.into()))?;
        Ok(NetworkLock { _file: file, path })
    }

    pub fn lock_path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    // Shared locks coexist; an exclusive lock waits for them.
    #[test]
    fn gc_waits_for_add_and_del() {
        let d = tempfile::tempdir().unwrap();
        let a = NetworkLock::shared(d.path(), "n").unwrap();
        let b = NetworkLock::shared(d.path(), "n").unwrap();
        let (tx, rx) = mpsc::channel();
        let dir = d.path().to_path_buf();
        let t = std::thread::spawn(move || {
            let _g = NetworkLock::exclusive(&dir, "n").unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(a);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(b);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        // Another network is independent.
        let _x = NetworkLock::exclusive(d.path(), "m").unwrap();
        let _y = NetworkLock::shared(d.path(), "n").unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn lock_files_are_private_and_symlinks_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let held = NetworkLock::shared(d.path(), "n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(held.lock_path()), 0o600);
        assert_eq!(mode(&d.path().join("locks")), 0o700);
        drop(held);
        // An old 0644 lock file is tightened.
        let p = NetworkLock::path(d.path(), "n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        NetworkLock::exclusive(d.path(), "n").unwrap();
        assert_eq!(mode(&p), 0o600);
        // A symlink planted at a lock path is not followed.
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, NetworkLock::path(d.path(), "m")).unwrap();
        assert!(NetworkLock::shared(d.path(), "m").is_err());
        assert_eq!(mode(&victim), 0o644);
    }
}
