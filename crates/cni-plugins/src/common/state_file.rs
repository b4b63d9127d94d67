//! Small per-attachment state files (tuning's backups, the sub-link and bandwidth records),
//! written so that neither a kill nor another user can leave or plant something nobody can
//! attribute.
//!
//! - The directory is made 0700 and used only when it is a real directory (not a symlink)
//!   owned by this user and not writable by group or others.
//! - A file is written to `.<owner>.<random>.tmp` (created `O_CREAT|O_EXCL|O_NOFOLLOW`, 0600),
//!   synced and then renamed (or, when it must not replace an existing file, linked) into
//!   place, so a reader sees the old file or the new one. A kill before that leaves a temp
//!   file whose name says whose it is: DEL of that attachment and GC of its network remove it.
//! - Reads never follow a symlink, never block (`O_NONBLOCK`: a FIFO is refused) and stop at
//!   a size limit.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::random;

/// Creates `dir` (0700) when missing, then checks it as [`check_dir`] does.
pub fn ensure_dir(dir: &Path, what: &str) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    check_dir(dir, what)
}

/// `dir` must be a directory (not a symlink to one), owned by this process's user and not
/// writable by group or others: otherwise someone else could plant or swap its files.
/// `what` names the files in the error ("backup", "sub-link record", "bandwidth IFB record").
pub fn check_dir(dir: &Path, what: &str) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("unsafe {what} directory {}: {why}", dir.display()),
        ))
    };
    if !meta.file_type().is_dir() {
        return refuse("not a directory".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return refuse(format!("owned by uid {}, not {me}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "mode {:04o} lets group or others write",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// The owner in a temp file name `.<owner>.<random>.tmp`, if it is one.
pub fn temp_owner(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (owner, random) = rest.rsplit_once('.')?;
    (!owner.is_empty() && !random.is_empty()).then_some(owner)
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
    let noise: String = random::bytes::<8>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let tmp = dir.join(format!(".{owner}.{noise}.tmp"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&tmp)?;
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        match existing {
            Existing::Replace => fs::rename(&tmp, file).map(|()| true),
            // A hard link never replaces: EEXIST says another call's file is there.
            Existing::Keep => match fs::hard_link(&tmp, file) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                other => other.map(|()| true),
            },
        }
    })();
    if result.is_err() || existing == Existing::Keep {
        let _ = fs::remove_file(&tmp);
    }
    result
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
    for name in entries(dir)? {
        if temp_owner(&name) == Some(owner) {
            remove(&dir.join(name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn temp_names_carry_their_owner() {
        assert_eq!(temp_owner(".abc-def.0123.tmp"), Some("abc-def"));
        for other in ["cid_eth0.json", ".x.tmp", "..tmp", "a.b.tmp", ".a..tmp"] {
            assert_eq!(temp_owner(other), None, "{other}");
        }
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
