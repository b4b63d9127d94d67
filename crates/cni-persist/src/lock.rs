//! Lock files stores serialize on with `flock`, which the kernel releases when the holder
//! dies (so a crash never leaves a store locked).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::{PersistError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Many holders at once (e.g. ADD and DEL of different containers).
    Shared,
    /// One holder (e.g. GC).
    Exclusive,
}

/// Opens (creating, never truncating) a lock file: mode 0600 (an older 0644 one is
/// tightened), never through a symlink, a regular file, closed on exec.
pub fn open_lock_file(path: &Path) -> Result<File> {
    let fail = |e| PersistError::io("open lock file", path, e);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.is_file() {
        return Err(fail(std::io::Error::other("not a regular file")));
    }
    if meta.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(fail)?;
    }
    Ok(file)
}

/// Opens the lock file at `path` and blocks until it is held as `kind`; dropping the file
/// releases it.
pub fn lock(path: &Path, kind: LockKind) -> Result<File> {
    let file = open_lock_file(path)?;
    match kind {
        LockKind::Shared => file.lock_shared(),
        LockKind::Exclusive => file.lock(),
    }
    .map_err(|e| PersistError::io("lock", path, e))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_locks_coexist_and_exclude_an_exclusive_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let a = lock(&p, LockKind::Shared).unwrap();
        let _b = lock(&p, LockKind::Shared).unwrap();
        let other = open_lock_file(&p).unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(fs::TryLockError::WouldBlock)
        ));
        drop(a);
        drop(_b);
        other.try_lock().unwrap();
    }

    #[test]
    fn lock_files_are_private_and_symlinks_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        fs::write(&p, "").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        drop(lock(&p, LockKind::Exclusive).unwrap());
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(lock(&link, LockKind::Shared).is_err());
        assert!(lock(d.path(), LockKind::Shared).is_err());
    }
}
