//! Attributable temp files: `.rcni-tmp-<pid>-<random>-<tag>.tmp`.
//!
//! The tag is what the store attributes a file by (normally the final name; a tag longer than
//! [`MAX_TAG`] bytes is replaced by `#` and its FNV-1a 64 hash, so a name never exceeds
//! NAME_MAX), the pid is the writer's. A name that starts with [`TEMP_PREFIX`] is never one of
//! a store's records, and it never ends in a record's extension (`.json`, `.conflist`), so a
//! reader that lists by extension does not see it. The common prefix also matches the temp
//! files of earlier rcni versions.

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{PersistError, Result};

/// Prefix of every temp file name.
pub const TEMP_PREFIX: &str = ".rcni-tmp-";
const SUFFIX: &str = ".tmp";
/// The longest tag kept as it is.
pub const MAX_TAG: usize = 200;
const CREATE_TRIES: usize = 8;

/// Whether `name` is a temp file (of this or an earlier rcni version), not a record.
pub fn is_temp(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(TEMP_PREFIX.as_bytes())
}

/// What a temp file name says about its writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempName {
    pub pid: u32,
    /// The tag as written (hashed when the store's tag was long: compare with [`tag_of`]).
    pub tag: String,
}

impl TempName {
    /// Parses a name made by [`TempFile::create`]; `None` for anything else.
    pub fn parse(name: &str) -> Option<TempName> {
        let rest = name.strip_prefix(TEMP_PREFIX)?.strip_suffix(SUFFIX)?;
        let (pid, rest) = rest.split_once('-')?;
        let (random, tag) = rest.split_once('-')?;
        let digits = |s: &str, hex: bool| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (hex && b.is_ascii_hexdigit()))
        };
        if !digits(pid, false) || random.len() != 16 || !digits(random, true) || tag.is_empty() {
            return None;
        }
        Some(TempName {
            pid: pid.parse().ok()?,
            tag: tag.to_string(),
        })
    }

    /// A fresh file name for a temp file of `pid` and `tag` (a test plants a killed writer's
    /// leftover with it; writers use [`TempFile::create`]).
    pub fn file_name(pid: u32, tag: &str) -> String {
        format!(
            "{TEMP_PREFIX}{pid}-{:016x}-{}{SUFFIX}",
            random_u64(),
            tag_of(tag)
        )
    }

    /// Whether this file's tag is `tag` (as [`TempFile::create`] was given it).
    pub fn is_of(&self, tag: &str) -> bool {
        self.tag == tag_of(tag)
    }

    /// Whether the writing process is gone, so the file can never be completed. A pid reused
    /// since counts as alive: the file then stays, which is the safe side.
    pub fn writer_is_gone(&self) -> bool {
        let Ok(pid) = i32::try_from(self.pid) else {
            return false;
        };
        pid > 0
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH)
    }
}

/// The tag as it appears in a name: as given, or `#<hash>` when longer than [`MAX_TAG`].
pub fn tag_of(tag: &str) -> String {
    if tag.len() <= MAX_TAG {
        return tag.to_string();
    }
    let hash = tag.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("#{hash:016x}")
}

/// 64 unpredictable bits: std's per-process random hash keys over a counter and the clock.
/// Uniqueness is what matters (`O_EXCL` refuses a taken name).
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// A fresh name for a temp file of `tag`, written by this process.
pub fn new_name(tag: &str) -> String {
    TempName::file_name(std::process::id(), tag)
}

/// Opens `path` as a new file: it must not exist (`O_EXCL`), is never reached through a
/// symlink (`O_NOFOLLOW`), mode 0600, closed on exec.
pub fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A temp file being written. Dropped without [`TempFile::keep`] or a commit
/// (`crate::write`), it is removed.
#[derive(Debug)]
pub struct TempFile {
    pub(crate) path: PathBuf,
    pub(crate) file: Option<File>,
}

impl TempFile {
    /// Creates a temp file of `tag` in `dir` (which the caller has checked).
    pub fn create(dir: &Path, tag: &str) -> Result<TempFile> {
        for _ in 0..CREATE_TRIES {
            let path = dir.join(new_name(tag));
            match create_exclusive(&path) {
                Ok(file) => {
                    return Ok(TempFile {
                        path,
                        file: Some(file),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(PersistError::io("create", path, e)),
            }
        }
        Err(PersistError::NoTempName {
            dir: dir.to_path_buf(),
            tries: CREATE_TRIES,
        })
    }

    /// Adopts a file the caller created or moved to `path` itself (a recycled inode).
    pub fn adopt(path: PathBuf, file: File) -> TempFile {
        TempFile {
            path,
            file: Some(file),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("open until committed")
    }

    /// Sets the file's mode (created 0600), for files others must read: a runtime's network
    /// config, an executable.
    pub fn set_mode(&mut self, mode: u32) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path.clone();
        self.file()
            .set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| PersistError::io("chmod", path, e))
    }

    /// Writes all of `bytes` at the current position.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let path = self.path.clone();
        self.file()
            .write_all(bytes)
            .map_err(|e| PersistError::io("write", path, e))
    }

    /// Stops managing the file and hands over its path and open file: the caller renames or
    /// removes it.
    pub fn into_parts(mut self) -> (PathBuf, File) {
        let file = self.file.take().expect("open until committed");
        (self.keep(), file)
    }

    /// Stops managing the file: the caller renames or removes it.
    pub fn keep(mut self) -> PathBuf {
        self.file = None;
        std::mem::take(&mut self.path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Removes the temp files in `dir` that `which` selects (see [`TempName::writer_is_gone`],
/// [`TempName::is_of`]); names of other formats are left alone. A missing directory has none.
/// Returns how many were removed.
pub fn remove_temps(dir: &Path, which: impl Fn(&TempName) -> bool) -> Result<usize> {
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        other => other.map_err(|e| PersistError::io("list", dir, e))?,
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| PersistError::io("list", dir, e))?;
        let name = entry.file_name();
        let Some(temp) = name.to_str().and_then(TempName::parse) else {
            continue;
        };
        if which(&temp) {
            match fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(PersistError::io("remove", entry.path(), e)),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_pid_and_tag_and_parse_back() {
        let name = new_name("10.1.2.3");
        assert!(
            name.starts_with(TEMP_PREFIX) && name.ends_with(".tmp"),
            "{name}"
        );
        let t = TempName::parse(&name).unwrap();
        assert_eq!(t.pid, std::process::id());
        assert!(t.is_of("10.1.2.3") && !t.is_of("10.1.2.30"));
        // Tags may hold '-' and '.'.
        let t = TempName::parse(&new_name("a-b.json")).unwrap();
        assert_eq!(t.tag, "a-b.json");
        for other in [
            "10.1.2.3",
            ".rcni-tmp-0123456789abcdef",
            ".rcni-tmp-12-0123456789abcdef-x",
            ".rcni-tmp-x-0123456789abcdef-t.tmp",
            ".rcni-tmp-12-0123-t.tmp",
            ".rcni-tmp-12-0123456789abcdef-.tmp",
        ] {
            assert_eq!(TempName::parse(other), None, "{other}");
        }
        assert!(is_temp(OsStr::new(".rcni-tmp-0123456789abcdef")));
        assert!(!is_temp(OsStr::new("lease.json")));
    }

    #[test]
    fn long_tags_are_hashed_and_names_fit_name_max() {
        let long = "c".repeat(255);
        let name = new_name(&long);
        assert!(name.len() <= 255, "{}", name.len());
        assert!(TempName::parse(&name).unwrap().is_of(&long));
        assert!(!TempName::parse(&name).unwrap().is_of(&"d".repeat(255)));
    }

    #[test]
    fn a_symlink_at_the_temp_path_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let planted = d.path().join(new_name("x"));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(create_exclusive(&planted).is_err());
        // A dangling one is not created through either.
        let dangling = d.path().join(new_name("y"));
        std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
        assert!(create_exclusive(&dangling).is_err());
        assert!(!d.path().join("nowhere").exists());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_dropped_temp_file_is_removed_and_a_kept_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let mut t = TempFile::create(d.path(), "x").unwrap();
        t.write_all(b"partial").unwrap();
        let path = t.path().to_path_buf();
        assert!(path.exists());
        drop(t);
        assert!(!path.exists());
        let kept = TempFile::create(d.path(), "x").unwrap().keep();
        assert!(kept.exists());
        let mut readable = TempFile::create(d.path(), "y").unwrap();
        readable.set_mode(0o644).unwrap();
        let (path, _file) = readable.into_parts();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    /// A pid no process has: the highest possible one is not handed out while this runs.
    fn dead_pid() -> u32 {
        let max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4_194_304);
        (1..max)
            .rev()
            .find(|p| {
                TempName {
                    pid: *p,
                    tag: String::new(),
                }
                .writer_is_gone()
            })
            .expect("a free pid")
    }

    #[test]
    fn leftovers_of_dead_writers_are_removed_live_ones_are_not() {
        let d = tempfile::tempdir().unwrap();
        let live = TempFile::create(d.path(), "a.json").unwrap().keep();
        let dead_name = TempName::file_name(dead_pid(), "a.json");
        fs::write(d.path().join(&dead_name), "partial").unwrap();
        fs::write(d.path().join("a.json"), "record").unwrap();
        fs::write(d.path().join(".rcni-tmp-0123456789abcdef"), "").unwrap();
        assert_eq!(remove_temps(d.path(), TempName::writer_is_gone).unwrap(), 1);
        assert!(!d.path().join(&dead_name).exists());
        assert!(live.exists() && d.path().join("a.json").exists());
        // By tag, whoever wrote it (the caller excludes writers, e.g. by a lock).
        assert_eq!(remove_temps(d.path(), |t| t.is_of("b.json")).unwrap(), 0);
        assert_eq!(remove_temps(d.path(), |t| t.is_of("a.json")).unwrap(), 1);
        assert!(!live.exists());
        assert_eq!(remove_temps(&d.path().join("none"), |_| true).unwrap(), 0);
    }
}
