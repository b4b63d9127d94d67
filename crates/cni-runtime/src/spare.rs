//! Recycled inodes for the cache's temp files.
//!
//! Every ADD writes two files (the claim and the final entry) and every DEL removes one. On
//! ext4 a new inode is found by scanning the group's bitmap from its start and skipping every
//! inode freed in the last half minute (`recently_deleted`), so under attachment churn most of
//! `rcni add`'s CPU went into that scan. Instead of unlinking a file it no
//! longer needs, the cache parks it in `<cacheDir>/spare/` (at most [`SLOTS`] files); the next
//! temp file is one of those, renamed into place and overwritten. Renames within a filesystem
//! allocate nothing, and a rename is atomic, so two processes never get the same spare.
//!
//! Spares are not emptied: truncating to zero makes ext4 flush the file on close and free (and
//! discard) its blocks, which cost as much as the scan. A spare lives outside `results/`, so
//! neither rcni nor Go libcni lists it, and its old bytes are overwritten (and cut to length)
//! under a temp name before that name can become an entry. A process killed at any point leaves
//! at most a file here, which the next park or take reuses or GC removes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// How many empty files are kept for reuse.
pub(crate) const SLOTS: usize = 8;

/// The spare directory of one cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spares<'a> {
    dir: &'a Path,
}

impl<'a> Spares<'a> {
    pub(crate) fn new(dir: &'a Path) -> Self {
        Spares { dir }
    }

    fn slot(&self, k: usize) -> PathBuf {
        self.dir.join(format!("slot-{k}"))
    }

    /// Moves a spare to `to` (a fresh name in the same filesystem); false when none is left.
    pub(crate) fn take(&self, to: &Path) -> bool {
        (0..SLOTS).any(|k| fs::rename(self.slot(k), to).is_ok())
    }

    /// Parks the file at `path` (an entry being removed, or a temp name only the caller uses)
    /// in a free slot: it vanishes from `path` at once, as with an unlink. Removes it when
    /// every slot is taken or parking fails.
    pub(crate) fn park(&self, path: &Path) {
        if self.try_park(path).is_err() {
            let _ = fs::remove_file(path);
        }
    }

    fn try_park(&self, path: &Path) -> io::Result<()> {
        for k in 0..SLOTS {
            match rename_noreplace(path, &self.slot(k)) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound && k == 0 => {
                    crate::statedir::ensure_private_dir(self.dir)?;
                    if rename_noreplace(path, &self.slot(0)).is_ok() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free spare slot"))
    }

    /// Removes every file here (GC). A concurrent take of a removed file just misses it and
    /// makes a new file.
    pub(crate) fn clear(&self) {
        if let Ok(entries) = fs::read_dir(self.dir) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// `rename` that fails with `AlreadyExists` instead of replacing `to`.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EINVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Without RENAME_NOREPLACE: a hard link fails on an existing name, as needed.
    fs::hard_link(from, to)?;
    fs::remove_file(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_files_come_back_and_slots_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("spare");
        let spares = Spares::new(&dir);
        assert!(!spares.take(&d.path().join("t0")), "no spare yet");
        for i in 0..SLOTS + 2 {
            let p = d.path().join(format!("used{i}"));
            fs::write(&p, "old entry").unwrap();
            spares.park(&p);
            assert!(!p.exists());
        }
        assert_eq!(fs::read_dir(d.path().join("spare")).unwrap().count(), SLOTS);
        let t = d.path().join("t1");
        assert!(spares.take(&t));
        assert_eq!(fs::read(&t).unwrap(), b"old entry");
        spares.clear();
        assert_eq!(fs::read_dir(d.path().join("spare")).unwrap().count(), 0);
    }
}
