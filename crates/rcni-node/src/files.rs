//! Atomic file writes: a reader (a plugin, a runtime scanning the config dir) sees the old
//! content or the new one, never a torn file, and a runtime watching the directory with inotify
//! sees no name but the final one.
//!
//! The temp file (a `cni_persist` one, tagged with the final name) is written in [`TEMP_DIR`],
//! a private (0700) subdirectory of the target's directory (the same filesystem, so the rename
//! is atomic), renamed into place with [`Durability::Fsync`] (the conflist and subnet file
//! must be whole after a crash: runtimes and plugins read them at boot). Temp files of killed
//! agents are removed before each write. The watched directory reports the rename as the final name
//! appearing (`IN_MOVED_TO`); the temp file's own events happen in the subdirectory, which a
//! watch on the parent does not report. The one event left is the creation of the subdirectory
//! itself (`IN_CREATE | IN_ISDIR`), once (it is kept), which runtimes do not treat as a config
//! change (containerd ignores Create events of its conf dir, `pkg/cri/server/cni_conf_syncer.go`).
//! `O_TMPFILE` would not do: the kernel reports the writes to the unnamed file in the
//! directory, under the name `#<inode>`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cni_persist::{DirRule, Durability, TempFile, TempName};

/// The private subdirectory of temp files.
pub const TEMP_DIR: &str = ".rcni-tmp";

/// Writes `data` to `path` through a temp file in [`TEMP_DIR`], fsync and rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} has no file name", path.display())))?;
    let name = name
        .to_str()
        .ok_or_else(|| io::Error::other(format!("{} is not UTF-8", path.display())))?;
    let private = private_dir(dir)?;
    cni_persist::remove_temps(&private, TempName::writer_is_gone)?;
    let mut temp = TempFile::create(&private, name)?;
    // Configuration others read (runtimes, tools), 0644 as it always was.
    temp.set_mode(0o644)?;
    temp.write_all(data)?;
    Ok(temp.replace(path, Durability::Fsync)?)
}

/// Writes a config file a runtime watches: nothing when `path` already holds `data` (a
/// restarted agent makes no event), else [`write_atomic`] and then a size-preserving truncate
/// of the final file, which the watcher sees as a write of the final name: containerd reloads
/// its CNI config only on write, rename and remove events, and a rename into place is a create
/// to it. Returns whether the file was written.
pub fn publish(path: &Path, data: &[u8]) -> io::Result<bool> {
    if fs::read(path).is_ok_and(|current| current == data) {
        return Ok(false);
    }
    write_atomic(path, data)?;
    let file = fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(data.len() as u64)?;
    Ok(true)
}

/// `dir`'s temp subdirectory, made private (0700) if new; refused when it is a symlink or
/// others could write to it (it must not redirect the agent's writes).
fn private_dir(dir: &Path) -> io::Result<PathBuf> {
    let tmp = dir.join(TEMP_DIR);
    cni_persist::ensure_dir(&tmp, DirRule::PRIVATE)?;
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_dead_agents_temp_file_is_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-rcni.conflist");
        write_atomic(&path, b"one").unwrap();
        let private = dir.path().join(TEMP_DIR);
        let left = private.join(TempName::file_name(u32::MAX >> 1, "10-rcni.conflist"));
        fs::write(&left, b"par").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert!(names(&private).is_empty());
    }

    #[test]
    fn replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/10-rcni.conflist");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let sub = path.parent().unwrap();
        assert_eq!(names(sub), [TEMP_DIR, "10-rcni.conflist"]);
        assert!(names(&sub.join(TEMP_DIR)).is_empty());
        let mode = fs::metadata(sub.join(TEMP_DIR))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn publish_writes_only_a_change_and_refuses_a_planted_temp_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-rcni.conflist");
        assert!(publish(&path, b"one").unwrap());
        assert!(!publish(&path, b"one").unwrap());
        assert!(publish(&path, b"two").unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let other = tempfile::tempdir().unwrap();
        fs::remove_dir(dir.path().join(TEMP_DIR)).unwrap();
        std::os::unix::fs::symlink(other.path(), dir.path().join(TEMP_DIR)).unwrap();
        let err = write_atomic(&path, b"three").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"two");
    }
}
