//! A temp file becomes the final name: by rename (replacing what is there) or by hard link
//! (never replacing), with each store's durability stated.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use crate::temp::TempFile;
use crate::{PersistError, Result};

/// What survives a power loss or kernel crash. A killed process never leaves a partial final
/// file either way: that comes from the rename alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync of the file before the rename and of the directory after it: once the write
    /// returns, the new content survives a crash.
    Fsync,
    /// Rename only: after a crash the file may hold the old content, or be empty. For stores
    /// whose content describes only what a crash wipes anyway (links, namespaces).
    Rename,
}

/// Flushes a directory's entries (a rename or unlink in it) to disk.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| PersistError::io("sync directory", dir, e))
}

pub(crate) fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

impl TempFile {
    pub(crate) fn sync_if(&mut self, durability: Durability) -> Result<()> {
        if durability == Durability::Fsync {
            let path = self.path.clone();
            self.file()
                .sync_all()
                .map_err(|e| PersistError::io("sync", path, e))?;
        }
        Ok(())
    }

    /// Renames the temp file over `target` (same filesystem). A symlink at `target` is
    /// replaced, never followed.
    pub fn replace(mut self, target: &Path, durability: Durability) -> Result<()> {
        self.sync_if(durability)?;
        fs::rename(&self.path, target).map_err(|e| PersistError::io("rename to", target, e))?;
        self.keep();
        if durability == Durability::Fsync {
            sync_dir(parent(target))?;
        }
        Ok(())
    }

    /// Links the temp file to `target` unless that name exists (then `Ok(false)`, nothing
    /// changed), and removes the temp name.
    pub fn link_new(mut self, target: &Path, durability: Durability) -> Result<bool> {
        self.sync_if(durability)?;
        match fs::hard_link(&self.path, target) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            other => other.map_err(|e| PersistError::io("link to", target, e))?,
        }
        drop(self);
        if durability == Durability::Fsync {
            sync_dir(parent(target))?;
        }
        Ok(true)
    }
}

pub(crate) fn tag(target: &Path) -> Result<&str> {
    target
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| PersistError::NoFileName {
            path: target.to_path_buf(),
        })
}

/// Replaces `target` with `bytes` through a temp file of its name in its directory (which the
/// caller has checked).
pub fn replace(target: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
    let mut temp = TempFile::create(parent(target), tag(target)?)?;
    temp.write_all(bytes)?;
    temp.replace(target, durability)
}

/// Creates `target` holding `bytes`, whole from its first instant, unless it exists
/// (`Ok(false)`).
pub fn create_new(target: &Path, bytes: &[u8], durability: Durability) -> Result<bool> {
    let mut temp = TempFile::create(parent(target), tag(target)?)?;
    temp.write_all(bytes)?;
    temp.link_new(target, durability)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp::{remove_temps, TempName};
    use std::os::unix::fs::MetadataExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn replace_and_create_new_leave_only_the_record_0600() {
        for durability in [Durability::Fsync, Durability::Rename] {
            let d = tempfile::tempdir().unwrap();
            let f = d.path().join("r.json");
            replace(&f, b"1", durability).unwrap();
            replace(&f, b"22", durability).unwrap();
            assert_eq!(fs::read(&f).unwrap(), b"22");
            assert!(!create_new(&f, b"3", durability).unwrap());
            assert_eq!(fs::read(&f).unwrap(), b"22");
            let g = d.path().join("g");
            assert!(create_new(&g, b"4", durability).unwrap());
            assert_eq!(names(d.path()), ["g", "r.json"]);
            assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn a_symlink_at_the_final_path_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let f = d.path().join("r.json");
        std::os::unix::fs::symlink(&victim, &f).unwrap();
        assert!(!create_new(&f, b"x", Durability::Fsync).unwrap());
        replace(&f, b"new", Durability::Fsync).unwrap();
        assert!(fs::symlink_metadata(&f).unwrap().is_file());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_failed_commit_leaves_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("r.json")).unwrap();
        fs::write(d.path().join("r.json/x"), "").unwrap();
        assert!(replace(&d.path().join("r.json"), b"x", Durability::Rename).is_err());
        assert_eq!(names(d.path()), ["r.json"]);
    }

    const CHILD: &str = "CNI_PERSIST_TEST_WRITER";

    /// The writer the next test kills: rewrites the file with ever longer content until killed.
    #[test]
    fn killed_writer_child() {
        let Ok(target) = std::env::var(CHILD) else {
            return;
        };
        let target = Path::new(&target);
        for n in 1.. {
            let body = format!("{n}:{}", "x".repeat(n % 100_000));
            replace(target, body.as_bytes(), Durability::Rename).unwrap();
        }
    }

    /// A process killed at an arbitrary point of its writes leaves the final file whole (one of
    /// its complete versions), and its leftover temp file is removed as a dead writer's.
    #[test]
    fn a_killed_writer_never_leaves_a_partial_final_file() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("r.json");
        for round in 0..5 {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "write::tests::killed_writer_child",
                    "--nocapture",
                ])
                .env(CHILD, &target)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // Let it write a while (the number of writes is not asserted), then kill it.
            while !target.exists() || fs::read(&target).unwrap().len() < 1000 * (round + 1) {
                std::thread::yield_now();
            }
            child.kill().unwrap();
            child.wait().unwrap();
            let body = String::from_utf8(fs::read(&target).unwrap()).unwrap();
            let (n, xs) = body.split_once(':').expect("whole record");
            let n: usize = n.parse().unwrap();
            assert_eq!(xs.len(), n % 100_000, "partial record after kill");
            remove_temps(d.path(), TempName::writer_is_gone).unwrap();
            assert_eq!(names(d.path()), ["r.json"]);
        }
    }
}
