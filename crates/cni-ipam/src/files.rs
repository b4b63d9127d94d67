//! How the store and its owner index read and write their files: whole, never through a
//! link. A new file appears under its name complete (an `O_TMPFILE` linked into place, or a
//! `cni_persist` temp file tagged with the final name); a rewrite is a temp file renamed over
//! the old one. Why a lease is written this way: the module comment of `store.rs`.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cni_persist::{Durability, TempFile};

/// A new temp file in `dir` holding `content`, tagged with `path`'s name (removed when
/// dropped uncommitted).
pub(crate) fn write_temp(dir: &Path, path: &Path, content: &[u8]) -> io::Result<TempFile> {
    let tag = path.file_name().and_then(|n| n.to_str()).unwrap_or("probe");
    let mut temp = TempFile::create(dir, tag)?;
    temp.write_all(content)?;
    Ok(temp)
}

/// Creates `path` (in `dir`) holding `content`, or fails with `AlreadyExists` when the name is
/// taken; the file never appears partially written (one change to the directory when
/// `O_TMPFILE` and `/proc` are there).
pub(crate) fn create_whole(dir: &Path, path: &Path, content: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let unnamed = OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir);
    if let Ok(mut file) = unnamed {
        file.write_all(content)?;
        let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let flags = nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW;
        let at = nix::fcntl::AT_FDCWD;
        match nix::unistd::linkat(at, proc_path.as_str(), at, path, flags) {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EEXIST) => return Err(io::ErrorKind::AlreadyExists.into()),
            // No /proc, or a filesystem that refuses: the named temp file below.
            Err(e) => log::debug!("linking an O_TMPFILE lease failed ({e}), using a temp file"),
        }
    }
    match write_temp(dir, path, content)?.link_new(path, Durability::Rename)? {
        true => Ok(()),
        false => Err(io::ErrorKind::AlreadyExists.into()),
    }
}

/// The content of a regular file; `None` for anything else (never follows a link, never
/// blocks on a FIFO) or when it cannot be read.
pub(crate) fn read_regular(path: &Path) -> Option<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Replaces `path` (in `dir`) with `content` atomically: temp file, then rename.
pub(crate) fn replace_file(dir: &Path, path: &Path, content: &[u8]) -> io::Result<()> {
    Ok(write_temp(dir, path, content)?.replace(path, Durability::Rename)?)
}
