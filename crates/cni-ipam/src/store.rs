//! The on-disk store, byte-compatible with the Go host-local plugin so both can share a data
//! directory:
//!
//! * `<dataDir>/<network>/` holds everything, created with mode 0755; before use, it and
//!   `dataDir` must be owned by this user or root and writable by no one else (a directory
//!   others can write lets them plant links where leases are written);
//! * `lock` is opened (created with mode 0600 if missing, never truncated) and `flock(LOCK_EX)`ed
//!   for as long as a [`LockedStore`] lives;
//! * one file per reserved address, named by Go's text form of the address, mode 0600, holding
//!   `<containerID>\r\n<ifname>` without a trailing newline (files of pre-ifname versions hold
//!   only `<containerID>`);
//! * `last_reserved_ip.<rangeID>` holds the last address reserved in a range set, as plain text.
//!
//! Every file is written whole before it appears under its name, so a reader that takes no lock
//! (the Go plugin's readers, tools) never sees a partial file: the content goes to a temp file
//! with a random name (`.rcni-tmp-*`, opened `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600), which is
//! then hard-linked to the lease's name (failing if the address is taken, so the reservation
//! stays exclusive) or renamed over the hint. A temp file only exists under the lock; one left
//! by a killed writer is removed the next time the lock is taken.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Read;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{ConfigError, IpamError};
use crate::ident;
use crate::ip;

/// Name of the lock file inside a network directory.
pub const LOCK_FILE: &str = "lock";
/// Prefix of the round-robin hint files (`last_reserved_ip.<rangeID>`).
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// Separator between container ID and interface name in a lease file.
pub const LINE_BREAK: &str = "\r\n";

/// Prefix of the temp files writes go through (not an address, so never read as a lease).
pub const TEMP_PREFIX: &str = ".rcni-tmp-";

/// How often a lock with a timeout is retried.
const LOCK_POLL: Duration = Duration::from_millis(10);

/// Who holds a lease, as read from its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOwner {
    /// Current format: `<containerID>\r\n<ifname>`.
    Attachment {
        container_id: String,
        ifname: String,
    },
    /// Pre-ifname format: the container ID alone (also what any unrecognised content reads as).
    Legacy { container_id: String },
}

/// One reserved address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub ip: IpAddr,
    pub owner: LeaseOwner,
    /// The file that records it.
    pub path: PathBuf,
}

impl Lease {
    /// Parses lease file content the way Go compares it: surrounding whitespace is ignored.
    pub fn parse_owner(content: &str) -> LeaseOwner {
        let content = content.trim();
        match content.split_once(LINE_BREAK) {
            Some((id, ifname)) => LeaseOwner::Attachment {
                container_id: id.to_string(),
                ifname: ifname.to_string(),
            },
            None => LeaseOwner::Legacy {
                container_id: content.to_string(),
            },
        }
    }

    /// True when this lease was written for exactly this attachment.
    pub fn is_for(&self, container_id: &str, ifname: &str) -> bool {
        matches!(&self.owner, LeaseOwner::Attachment { container_id: id, ifname: name }
            if id == container_id.trim() && name == ifname)
    }

    /// True when this is a legacy lease of this container.
    pub fn is_legacy_for(&self, container_id: &str) -> bool {
        matches!(&self.owner, LeaseOwner::Legacy { container_id: id } if id == container_id.trim())
    }
}

/// The file content recording a lease for an attachment.
pub fn lease_content(container_id: &str, ifname: &str) -> String {
    format!("{}{LINE_BREAK}{ifname}", container_id.trim())
}

/// A network's directory in a data directory. Creating it does no I/O.
#[derive(Debug, Clone)]
pub struct DiskStore {
    dir: PathBuf,
    lock_timeout: Option<Duration>,
}

impl DiskStore {
    /// The store of `network` under `data_dir`. The network name must follow the CNI name rule,
    /// so it can never point outside `data_dir`.
    pub fn new(data_dir: &Path, network: &str) -> Result<Self, IpamError> {
        if !ident::is_valid_name(network) {
            return Err(ConfigError::InvalidNetworkName {
                name: network.to_string(),
            }
            .into());
        }
        Ok(DiskStore {
            dir: data_dir.join(network),
            lock_timeout: None,
        })
    }

    /// Gives up waiting for the lock after `timeout` (error code 11) instead of blocking like Go.
    pub fn with_lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The network directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directory if needed and takes the exclusive lock. Each call opens the lock file
    /// anew, so two callers in one process exclude each other like two processes do.
    ///
    /// The data directory and the network directory are checked for owner and mode first.
    pub fn lock(&self) -> Result<LockedStore<'_>, IpamError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.dir)
            .map_err(|e| IpamError::io("create directory", &self.dir, e))?;
        if let Some(data_dir) = self.dir.parent() {
            check_directory(data_dir)?;
        }
        check_directory(&self.dir)?;
        let path = self.dir.join(LOCK_FILE);
        let file = open_lock_file(&path).map_err(|e| IpamError::io("open", &path, e))?;
        match self.lock_timeout {
            None => file.lock().map_err(|e| IpamError::io("lock", &path, e))?,
            Some(timeout) => lock_with_timeout(&file, &path, timeout)?,
        }
        let locked = LockedStore {
            dir: &self.dir,
            _lock: file,
        };
        locked.remove_stale_temp_files();
        Ok(locked)
    }
}

/// Refuses a directory that someone other than this user (or root) could write to: owned by
/// another user, or writable by its group or by everyone.
fn check_directory(dir: &Path) -> Result<(), IpamError> {
    let meta = fs::metadata(dir).map_err(|e| IpamError::io("inspect", dir, e))?;
    let refuse = |reason: String| {
        Err(IpamError::UnsafeDirectory {
            path: dir.to_path_buf(),
            reason,
        })
    };
    if !meta.is_dir() {
        return refuse("not a directory".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return refuse(format!(
            "owned by uid {}, not by this user (uid {me}) or root",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return refuse(format!(
            "mode {mode:04o} lets other users write to it (chmod go-w)"
        ));
    }
    Ok(())
}

/// Writes `content` to a new temp file with a random name in `dir` (`O_CREAT|O_EXCL|
/// O_NOFOLLOW`, mode 0600) and returns its path; on failure nothing is left behind.
fn write_temp(dir: &Path, content: &[u8]) -> io::Result<PathBuf> {
    let mut attempts = 0;
    loop {
        let path = dir.join(format!("{TEMP_PREFIX}{}", random_suffix()?));
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path);
        let mut file = match opened {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 8 => {
                attempts += 1;
                continue;
            }
            other => other?,
        };
        // No fsync, as in Go: leases only matter while their containers live, and none outlive
        // a crash; the flock, not durability, is what prevents double allocation.
        return match file.write_all(content) {
            Ok(()) => Ok(path),
            Err(e) => {
                drop(file);
                let _ = fs::remove_file(&path);
                Err(e)
            }
        };
    }
}

/// 16 random hex digits from the kernel.
fn random_suffix() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Removes a temp file after it was linked or renamed; one that stays is only logged, since
/// the next lock holder removes it.
fn discard_temp(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            log::warn!("cannot remove temp file {}: {e}", path.display());
        }
    }
}

/// Opens the lock file without truncating it: read-only when it exists (works on a read-only
/// store, as Go's `O_RDONLY|O_CREAT` does), created with mode 0600 otherwise.
fn open_lock_file(path: &Path) -> io::Result<File> {
    match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path),
        other => other,
    }
}

fn lock_with_timeout(file: &File, path: &Path, timeout: Duration) -> Result<(), IpamError> {
    let deadline = Instant::now() + timeout;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(LOCK_POLL);
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(IpamError::LockTimeout {
                    path: path.to_path_buf(),
                })
            }
            Err(fs::TryLockError::Error(e)) => return Err(IpamError::io("lock", path, e)),
        }
    }
}

/// The store while its lock is held; dropping it closes the lock file, which releases the lock.
#[derive(Debug)]
pub struct LockedStore<'a> {
    dir: &'a Path,
    _lock: File,
}

impl LockedStore<'_> {
    /// The path of the file that records `addr`.
    pub fn lease_path(&self, addr: IpAddr) -> PathBuf {
        self.dir.join(ip::go_string(addr))
    }

    /// Reserves `addr` for the attachment: the lease is written whole to a temp file, then
    /// linked to its name, which fails if someone already holds the address (`Ok(false)`). On
    /// success the range set's round-robin hint is updated.
    pub fn reserve(
        &self,
        container_id: &str,
        ifname: &str,
        addr: IpAddr,
        range_id: usize,
    ) -> Result<bool, IpamError> {
        let path = self.lease_path(addr);
        // Checked first so that a taken address costs no write.
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(false);
        }
        let content = lease_content(container_id, ifname);
        let temp = write_temp(self.dir, content.as_bytes())
            .map_err(|e| IpamError::io("write", &path, e))?;
        let linked = fs::hard_link(&temp, &path);
        discard_temp(&temp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(IpamError::io("create", &path, e)),
        }
        // The hint only steers round-robin; losing it must not fail a reservation that is made.
        if let Err(e) = self.write_last_reserved(range_id, addr) {
            log::warn!("{e}");
        }
        Ok(true)
    }

    /// Removes a lease file this process created (rollback of a failed ADD). Missing is fine.
    pub fn unreserve(&self, addr: IpAddr) -> Result<(), IpamError> {
        remove_if_present(&self.lease_path(addr))
    }

    /// The round-robin hint of a range set; missing or unparsable means none.
    pub fn last_reserved_ip(&self, range_id: usize) -> Option<IpAddr> {
        let text = fs::read_to_string(self.last_reserved_path(range_id)).ok()?;
        ip::parse_ip(text.trim())
    }

    fn last_reserved_path(&self, range_id: usize) -> PathBuf {
        self.dir.join(format!("{LAST_RESERVED_PREFIX}{range_id}"))
    }

    /// Replaces the hint atomically (temp file, rename), so a reader never sees half a hint. Go
    /// readers never see the temp file because they only look while holding the lock we hold.
    /// Not fsynced: the hint only steers round-robin, and after a crash any value is fine.
    fn write_last_reserved(&self, range_id: usize, addr: IpAddr) -> Result<(), IpamError> {
        let path = self.last_reserved_path(range_id);
        let temp = write_temp(self.dir, ip::go_string(addr).as_bytes())
            .map_err(|e| IpamError::io("write", &path, e))?;
        fs::rename(&temp, &path).map_err(|e| {
            discard_temp(&temp);
            IpamError::io("write", &path, e)
        })
    }

    /// Removes temp files: under the lock, any that exist were left by a killed writer. A
    /// store that cannot be changed (read-only) keeps them, which harms no reader.
    fn remove_stale_temp_files(&self) {
        let Ok(entries) = fs::read_dir(self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                if let Err(e) = fs::remove_file(entry.path()) {
                    log::debug!("cannot remove stale {}: {e}", entry.path().display());
                }
            }
        }
    }

    /// Every lease in the directory: regular files whose names are IP addresses. Files that cannot
    /// be read are skipped, as Go skips them.
    pub fn leases(&self) -> Result<Vec<Lease>, IpamError> {
        let entries = fs::read_dir(self.dir).map_err(|e| IpamError::io("read", self.dir, e))?;
        let mut leases = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IpamError::io("read", self.dir, e))?;
            let Some(addr) = entry.file_name().to_str().and_then(ip::parse_ip) else {
                continue;
            };
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            let Ok(bytes) = fs::read(&path) else {
                continue;
            };
            leases.push(Lease {
                ip: addr,
                owner: Lease::parse_owner(&String::from_utf8_lossy(&bytes)),
                path,
            });
        }
        leases.sort_by_key(|lease| (lease.ip.is_ipv6(), ip::to_u128(lease.ip)));
        Ok(leases)
    }

    /// Releases an attachment: every lease written for exactly (container ID, ifname); only if
    /// there is none, every legacy lease of the container ID (Go's fallback). Returns the
    /// released addresses.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>, IpamError> {
        let leases = self.leases()?;
        let mut doomed: Vec<&Lease> = leases
            .iter()
            .filter(|l| l.is_for(container_id, ifname))
            .collect();
        if doomed.is_empty() {
            doomed = leases
                .iter()
                .filter(|l| l.is_legacy_for(container_id))
                .collect();
        }
        remove_leases(doomed.into_iter()).map(|removed| removed.into_iter().map(|l| l.ip).collect())
    }

    /// Releases every lease whose owner is not in `valid` (container ID, ifname); a legacy lease
    /// stays when any valid pair has its container ID. `lock` and `last_reserved_ip.*` are never
    /// touched, nor any file whose name is not an address. Returns the released leases.
    pub fn gc(&self, valid: &[(String, String)]) -> Result<Vec<Lease>, IpamError> {
        let leases = self.leases()?;
        let stale = leases.iter().filter(|lease| {
            !valid
                .iter()
                .any(|(id, ifname)| lease.is_for(id, ifname) || lease.is_legacy_for(id))
        });
        remove_leases(stale)
    }

    /// Checks that the directory accepts new files, with a probe that only lives under the lock.
    pub fn probe_writable(&self) -> io::Result<()> {
        let probe = write_temp(self.dir, b"")?;
        fs::remove_file(&probe)
    }
}

/// Removes the files of `leases`, carrying on after errors; returns what was removed, or all
/// errors joined.
fn remove_leases<'l>(leases: impl Iterator<Item = &'l Lease>) -> Result<Vec<Lease>, IpamError> {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for lease in leases {
        match remove_if_present(&lease.path) {
            Ok(()) => removed.push(lease.clone()),
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Ok(removed),
        1 => Err(errors.remove(0)),
        _ => Err(IpamError::Multiple(errors)),
    }
}

fn remove_if_present(path: &Path) -> Result<(), IpamError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(IpamError::io("remove", path, e)),
        _ => Ok(()),
    }
}
