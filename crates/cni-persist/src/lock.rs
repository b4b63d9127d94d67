//! Lock files stores serialize on with `flock`, which the kernel releases when the holder
//! dies (so a crash never leaves a store locked).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

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

/// How often a lock with a deadline is tried again.
const LOCK_POLL: Duration = Duration::from_millis(10);

/// Opens the lock file at `path` and blocks until it is held as `kind`; dropping the file
/// releases it.
pub fn lock(path: &Path, kind: LockKind) -> Result<File> {
    let file = open_lock_file(path)?;
    take_lock(&file, kind, None).map_err(|e| PersistError::io("lock", path, e))?;
    Ok(file)
}

/// Takes the lock of an open lock file as `kind`. Without a deadline, blocks until it is free;
/// with one, tries again every 10 ms until then (`flock` itself has no timeout), and returns
/// `false` when another holder still has it at the deadline (a deadline already passed is one
/// try). Dropping the file (every descriptor of its open file) releases the lock.
pub fn take_lock(file: &File, kind: LockKind, deadline: Option<Instant>) -> io::Result<bool> {
    let Some(deadline) = deadline else {
        match kind {
            LockKind::Shared => file.lock_shared()?,
            LockKind::Exclusive => file.lock()?,
        }
        return Ok(true);
    };
    loop {
        let tried = match kind {
            LockKind::Shared => file.try_lock_shared(),
            LockKind::Exclusive => file.try_lock(),
        };
        match tried {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(LOCK_POLL);
            }
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
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
    fn a_lock_with_a_deadline_waits_for_the_holder_and_gives_up_after_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let held = lock(&p, LockKind::Exclusive).unwrap();
        let other = open_lock_file(&p).unwrap();
        // A passed deadline is one try; a near one is waited for, then given up.
        assert!(!take_lock(&other, LockKind::Shared, Some(Instant::now())).unwrap());
        let started = Instant::now();
        let limit = Duration::from_millis(50);
        assert!(!take_lock(&other, LockKind::Exclusive, Some(started + limit)).unwrap());
        assert!(started.elapsed() >= limit);
        // Released during the wait: taken before the deadline.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(held);
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(take_lock(&other, LockKind::Exclusive, Some(deadline)).unwrap());
        release.join().unwrap();
        // Held now: a shared try elsewhere fails, and the holder's lock blocks nobody else's
        // shared try once it is gone.
        let third = open_lock_file(&p).unwrap();
        assert!(!take_lock(&third, LockKind::Shared, Some(Instant::now())).unwrap());
        drop(other);
        assert!(take_lock(&third, LockKind::Shared, Some(Instant::now())).unwrap());
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
