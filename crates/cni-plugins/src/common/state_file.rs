//! Small per-attachment state files (tuning's backups, the sub-link and bandwidth records),
//! written through `cni_persist` so that neither a kill nor another user can leave or plant
//! something nobody can attribute.
//!
//! - The directory is made 0700 and used only when it passes [`DirRule::PRIVATE`].
//! - A file goes through a `cni_persist` temp file tagged with its owner (the attachment's
//!   tag prefix), renamed (or, when it must not replace an existing file, linked) into place,
//!   so a reader sees the old file or the new one. A kill before that leaves a temp file whose
//!   name says whose it is: DEL of that attachment and GC of its network remove it.
//! - Durability: [`Durability::Fsync`] (file and directory). A record a DEL finds after a
//!   crash must be whole: an unreadable one makes the DEL fail.
//! - Reads never follow a symlink, never block (`O_NONBLOCK`: a FIFO is refused) and stop at
//!   a size limit.

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use cni_persist::{DirRule, Durability, PersistError, TempFile, TempName};

/// `cni_persist`'s error, saying which kind of file `what` names ("backup", "sub-link
/// record", "bandwidth IFB record") when the directory is unsafe.
fn named(e: PersistError, what: &str) -> std::io::Error {
    match e {
        PersistError::UnsafeDir { path, reason } => std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("unsafe {what} directory {}: {reason}", path.display()),
        ),
        other => other.into(),
    }
}

/// Creates `dir` (0700) when missing, then checks it as [`check_dir`] does.
pub fn ensure_dir(dir: &Path, what: &str) -> std::io::Result<()> {
    cni_persist::ensure_dir(dir, DirRule::PRIVATE).map_err(|e| named(e, what))
}

/// `dir` must pass [`DirRule::PRIVATE`]: otherwise someone else could plant or swap its files.
pub fn check_dir(dir: &Path, what: &str) -> std::io::Result<()> {
    cni_persist::check_dir(dir, DirRule::PRIVATE).map_err(|e| named(e, what))
}

/// The owner a temp file name carries, if it is one.
pub fn temp_owner(name: &str) -> Option<String> {
    TempName::parse(name).map(|t| t.tag)
}

/// Whether [`write`] may replace a file that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Replace,
    /// Leave it: another call made it.
    Keep,
}

/// Writes `bytes` to `file` atomically through a temp file of `owner` (see the module
/// comment); creates and checks the directory first. Returns false when `existing` is
/// [`Existing::Keep`] and the file was already there (nothing was written).
pub fn write(
    file: &Path,
    owner: &str,
    bytes: &[u8],
    existing: Existing,
    what: &str,
) -> std::io::Result<bool> {
    let dir = file.parent().unwrap_or(Path::new("."));
    ensure_dir(dir, what)?;
    let mut temp = TempFile::create(dir, owner)?;
    temp.write_all(bytes)?;
    Ok(match existing {
        Existing::Replace => temp.replace(file, Durability::Fsync).map(|()| true)?,
        Existing::Keep => temp.link_new(file, Durability::Fsync)?,
    })
}

/// What reading a state file found.
#[derive(Debug)]
pub enum Contents {
    Missing,
    Bytes(Vec<u8>),
    /// The file exists but cannot be read (not a regular file, too long, an I/O error).
    Unreadable(String),
}

/// Reads `file` (not following a symlink, not blocking, at most `max` bytes). The caller has
/// checked the directory.
pub fn read(file: &Path, max: u64) -> Contents {
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file);
    let mut f = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Contents::Missing,
        Err(e) => return Contents::Unreadable(e.to_string()),
        Ok(f) => f,
    };
    match f.metadata() {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => return Contents::Unreadable("not a regular file".into()),
        Err(e) => return Contents::Unreadable(e.to_string()),
    }
    let mut bytes = Vec::new();
    if let Err(e) = (&mut f).take(max + 1).read_to_end(&mut bytes) {
        return Contents::Unreadable(e.to_string());
    }
    if bytes.len() as u64 > max {
        return Contents::Unreadable(format!("longer than {max} bytes"));
    }
    Contents::Bytes(bytes)
}

/// Removes the file; a missing one is fine.
pub fn remove(file: &Path) -> std::io::Result<()> {
    match fs::remove_file(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Names in `dir`; a missing directory has none.
pub fn entries(dir: &Path) -> std::io::Result<Vec<String>> {
    let list = match fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other?,
    };
    let mut names = Vec::new();
    for entry in list {
        if let Ok(name) = entry?.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// Removes the temp files a killed writer of `owner` left in `dir`.
pub fn remove_temps(dir: &Path, owner: &str) -> std::io::Result<()> {
    cni_persist::remove_temps(dir, |t| t.is_of(owner))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn keep_never_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d/x.json");
        assert!(write(&file, "own", b"1", Existing::Keep, "test").unwrap());
        assert!(!write(&file, "own", b"2", Existing::Keep, "test").unwrap());
        assert!(matches!(read(&file, 10), Contents::Bytes(b) if b == b"1"));
        assert!(write(&file, "own", b"3", Existing::Replace, "test").unwrap());
        assert!(matches!(read(&file, 10), Contents::Bytes(b) if b == b"3"));
        assert_eq!(entries(&dir.path().join("d")).unwrap(), ["x.json"]);
        let mode = fs::metadata(&file).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(read(&file, 0), Contents::Unreadable(_)));
        assert!(matches!(
            read(&dir.path().join("none"), 9),
            Contents::Missing
        ));
    }

    #[test]
    fn temp_files_carry_their_owner_and_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let a = TempFile::create(dir.path(), "abc-def").unwrap().keep();
        let b = TempFile::create(dir.path(), "abc-xyz").unwrap().keep();
        let name = a.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_owner(name).as_deref(), Some("abc-def"));
        assert_eq!(temp_owner("cid_eth0.json"), None);
        remove_temps(dir.path(), "abc-def").unwrap();
        assert!(!a.exists() && b.exists());
    }

    #[test]
    fn unsafe_dirs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        assert!(check_dir(&open, "test").is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(check_dir(&link, "test").is_err());
    }
}
