//! Recycled inodes, for stores that rewrite and remove small files all the time.
//!
//! On an ext4 file system without a journal, a new inode is found by scanning the group's
//! bitmap from its start and skipping every inode freed in the last minute (up to six while
//! its inode table block is dirty; `recently_deleted` in the kernel's fs/ext4/ialloc.c). A
//! store that frees one inode per write (a temp file renamed over the old file frees the old
//! one) makes every later file creation nearby pay for all of them: under pod churn that scan
//! was most of a pod's file system time, and it grew with the pods created just before,
//! whatever their number on the node. So instead of freeing a file it no longer needs, a
//! store parks it in a spare directory of its own (at most [`SLOTS`] files), and its next temp
//! file is one of those, renamed to a fresh temp name and overwritten. Renames within a file
//! system allocate and free nothing, and a rename is atomic, so two processes never get the
//! same spare. An existing file is replaced by exchanging it with the temp file
//! (`RENAME_EXCHANGE`), which leaves the old inode under the temp name, ready to park.
//!
//! Spares are not emptied: truncating to zero makes ext4 flush the file on close and free (and
//! discard) its blocks, which cost as much as the scan. A recycled temp file is cut to the
//! length of its new content before it can take a name the store reads. A spare directory is
//! not listed by the store that owns it; a process killed at any point leaves at most a file
//! there, which the next park or take reuses or the store's GC removes ([`Spares::clear`]).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::temp::{new_name, TempFile};
use crate::write::{parent, tag, Durability};
use crate::{DirRule, PersistError, Result};

/// How many files a spare directory keeps for reuse.
pub const SLOTS: usize = 8;

/// The spare directory of one store, in the same file system as the files it recycles.
#[derive(Debug, Clone, Copy)]
pub struct Spares<'a> {
    dir: &'a Path,
}

impl<'a> Spares<'a> {
    pub fn new(dir: &'a Path) -> Self {
        Spares { dir }
    }

    fn slot(&self, k: usize) -> PathBuf {
        self.dir.join(format!("slot-{k}"))
    }

    /// Moves a spare to `to`, a fresh name only the caller uses (replaced if it exists);
    /// false when none is left.
    pub fn take(&self, to: &Path) -> bool {
        (0..SLOTS).any(|k| fs::rename(self.slot(k), to).is_ok())
    }

    /// Moves a spare to `to` unless that name exists; false when it exists or no spare is
    /// left. The file keeps its old bytes: for names whose content nobody reads (markers).
    pub fn take_new(&self, to: &Path) -> bool {
        (0..SLOTS).any(|k| rename_noreplace(&self.slot(k), to).is_ok())
    }

    /// A temp file of `tag` in `dir` (which the caller has checked), opened for writing from
    /// its start: a spare when there is one, else a new file. Write it with
    /// [`TempFile::write_whole`].
    pub fn temp_file(&self, dir: &Path, tag: &str) -> Result<TempFile> {
        let path = dir.join(new_name(tag));
        if self.take(&path) {
            match open_recycled(&path) {
                Ok(file) => {
                    let mut temp = TempFile::adopt(path, file);
                    // 0600 as a new temp file is, whatever file of the store it was before.
                    temp.set_mode(0o600)?;
                    return Ok(temp);
                }
                Err(_) => {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        TempFile::create(dir, tag)
    }

    /// Parks the file at `path` (a file being removed, or a temp name only the caller uses) in
    /// a free slot: it vanishes from `path` at once, as with an unlink. Removes it when every
    /// slot is taken or parking fails.
    pub fn park(&self, path: &Path) {
        let _ = self.remove(path);
    }

    /// [`Spares::park`], reporting what the unlink it falls back to reports (`NotFound` for a
    /// missing `path`).
    pub fn remove(&self, path: &Path) -> io::Result<()> {
        match self.try_park(path) {
            Ok(()) => Ok(()),
            Err(_) => fs::remove_file(path),
        }
    }

    fn try_park(&self, path: &Path) -> io::Result<()> {
        for k in 0..SLOTS {
            match rename_noreplace(path, &self.slot(k)) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound && k == 0 => {
                    crate::ensure_dir(self.dir, DirRule::PRIVATE_WITH_PARENT)?;
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
    pub fn clear(&self) {
        if let Ok(entries) = fs::read_dir(self.dir) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

impl TempFile {
    /// Writes `bytes` from the start and cuts whatever a recycled file held beyond them.
    pub fn write_whole(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all(bytes)?;
        let path = self.path.clone();
        let file = self.file();
        let len = bytes.len() as u64;
        let old = file
            .metadata()
            .map_err(|e| PersistError::io("stat", &path, e))?
            .len();
        if old > len {
            file.set_len(len)
                .map_err(|e| PersistError::io("truncate", &path, e))?;
        }
        Ok(())
    }

    /// Puts the temp file in place of `target` like [`TempFile::replace`], but an existing
    /// target is exchanged with it and parked in `spares` instead of being freed.
    pub fn replace_recycling(
        mut self,
        target: &Path,
        durability: Durability,
        spares: Spares<'_>,
    ) -> Result<()> {
        self.sync_if(durability)?;
        let exchanged = exchange_or_rename(&self.path, target)
            .map_err(|e| PersistError::io("rename to", target, e))?;
        let old = self.keep();
        if exchanged {
            spares.park(&old);
        }
        if durability == Durability::Fsync {
            crate::sync_dir(parent(target))?;
        }
        Ok(())
    }
}

/// Replaces `target` with `bytes` like [`crate::replace`], on a recycled inode when `spares`
/// has one, parking the replaced file there.
pub fn replace(
    target: &Path,
    bytes: &[u8],
    durability: Durability,
    spares: Spares<'_>,
) -> Result<()> {
    let mut temp = spares.temp_file(parent(target), tag(target)?)?;
    temp.write_whole(bytes)?;
    temp.replace_recycling(target, durability, spares)
}

/// How often [`read_stable`] reads a file that changed under it before it returns what it read.
const READ_TRIES: u32 = 3;

/// Reads `path` and parses its bytes with `parse`, for readers that do not hold the lock its
/// writers hold: the inode such a reader opened may be parked and written again for another
/// file while it reads. A recycled inode leaves its name before it is written, so a read after
/// which the name no longer leads to the inode read, or whose bytes do not parse, is done
/// again (up to three times; then the last parse is returned).
pub fn read_stable<T, E>(
    path: &Path,
    parse: impl Fn(&[u8]) -> std::result::Result<T, E>,
) -> io::Result<std::result::Result<T, E>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (bytes, stayed) = read_checked(fs::File::open(path)?, path)?;
        let parsed = parse(&bytes);
        if (stayed && parsed.is_ok()) || attempt == READ_TRIES {
            return Ok(parsed);
        }
    }
}

/// The bytes of `file` (opened at `path`), and whether `path` still names that file once they
/// are read.
pub(crate) fn read_checked(mut file: fs::File, path: &Path) -> io::Result<(Vec<u8>, bool)> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let opened = file.metadata()?;
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    let stayed = fs::symlink_metadata(path)
        .is_ok_and(|now| now.ino() == opened.ino() && now.dev() == opened.dev());
    Ok((bytes, stayed))
}

/// Opens a spare just moved to `path` for writing from its start, never through a symlink.
fn open_recycled(path: &Path) -> io::Result<fs::File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Puts `tmp` in place of `target` atomically. An existing target is swapped with
/// `RENAME_EXCHANGE`, so the old file is then at `tmp` (and the call returns true): besides
/// keeping its inode, this avoids ext4 writing the new file's data back before a rename over
/// an existing file (`auto_da_alloc`). Where exchange is unsupported (other file systems, no
/// target yet) it is a plain rename.
pub fn exchange_or_rename(tmp: &Path, target: &Path) -> io::Result<bool> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        match renameat2(
            AT_FDCWD,
            tmp,
            AT_FDCWD,
            target,
            RenameFlags::RENAME_EXCHANGE,
        ) {
            Ok(()) => return Ok(true),
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::EINVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    fs::rename(tmp, target).map(|()| false)
}

/// `rename` that fails with `AlreadyExists` instead of replacing `to`.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
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
    use std::os::unix::fs::MetadataExt;

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
        assert_eq!(fs::read_dir(&dir).unwrap().count(), SLOTS);
        let t = d.path().join("t1");
        assert!(spares.take(&t));
        assert_eq!(fs::read(&t).unwrap(), b"old entry");
        assert!(!spares.take_new(&t), "an existing name is never replaced");
        assert!(spares.take_new(&d.path().join("t2")));
        spares.clear();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn a_rewrite_reuses_the_replaced_inode_and_cuts_old_bytes() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("spare");
        let spares = Spares::new(&dir);
        let f = d.path().join("r.json");
        for durability in [Durability::Fsync, Durability::Rename] {
            replace(&f, b"a long first version", durability, spares).unwrap();
            let first = fs::metadata(&f).unwrap().ino();
            replace(&f, b"second", durability, spares).unwrap();
            assert_eq!(fs::read(&f).unwrap(), b"second");
            assert_eq!(
                fs::read_dir(&dir).unwrap().count(),
                1,
                "the first one is parked"
            );
            replace(&f, b"3", durability, spares).unwrap();
            assert_eq!(fs::read(&f).unwrap(), b"3");
            assert_eq!(
                fs::metadata(&f).unwrap().ino(),
                first,
                "written on the parked inode"
            );
            assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
            fs::remove_file(&f).unwrap();
            // A spare of another mode (a marker made by `File::create`) becomes a 0600 file.
            let marker = d.path().join("m");
            fs::write(&marker, b"").unwrap();
            fs::set_permissions(&marker, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .unwrap();
            spares.clear();
            spares.park(&marker);
            replace(&f, b"4", durability, spares).unwrap();
            assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
            fs::remove_file(&f).unwrap();
            spares.clear();
        }
        let names: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["spare"], "no temp file is left");
    }

    /// A reader that opened a file just before it was replaced holds an inode that is parked
    /// and then written for another file: the read sees that the name moved on.
    #[test]
    fn a_read_of_a_file_replaced_meanwhile_is_seen_as_moved() {
        let d = tempfile::tempdir().unwrap();
        let spare_dir = d.path().join("spare");
        let spares = Spares::new(&spare_dir);
        let f = d.path().join("f");
        replace(&f, b"first", Durability::Rename, spares).unwrap();
        let opened = fs::File::open(&f).unwrap();
        replace(&f, b"second", Durability::Rename, spares).unwrap();
        // The opened inode is the spare now; another file is written on it.
        replace(&d.path().join("g"), b"other", Durability::Rename, spares).unwrap();
        let (bytes, stayed) = read_checked(opened, &f).unwrap();
        assert_eq!((bytes.as_slice(), stayed), (&b"other"[..], false));
        let read = read_stable(&f, |b| std::str::from_utf8(b).map(str::to_owned)).unwrap();
        assert_eq!(read.unwrap(), "second");
        let missing = read_stable(&d.path().join("none"), |b| Ok::<_, ()>(b.len()));
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let spare_dir = d.path().join("spare");
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let f = d.path().join("r.json");
        std::os::unix::fs::symlink(&victim, &f).unwrap();
        replace(&f, b"new", Durability::Rename, Spares::new(&spare_dir)).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert_eq!(fs::read(&f).unwrap(), b"new");
        assert!(!fs::symlink_metadata(&f).unwrap().file_type().is_symlink());
    }
}
