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
//! A lease is written whole before it appears under its name, so a reader that takes no lock
//! (tools) never sees a partial one: the content goes to an unnamed file (`O_TMPFILE`, mode 0600)
//! that is then linked to the lease's name, failing if the address is taken, so the reservation
//! stays exclusive. That is one change to the directory, which matters in an ext4 directory of
//! thousands of entries. Where `O_TMPFILE` or `/proc` is missing, a `cni_persist` temp file
//! (`.rcni-tmp-*`, tagged with the lease's name) is linked and removed instead. The hint goes to
//! such a temp file that is renamed over it. A temp file only exists under the lock; one left by
//! a killed writer is removed by the next full read of the directory (the killed writer changed
//! the directory, so the owner index no longer matches and forces one).
//!
//! Durability: [`Durability::Rename`], no fsync, as in Go: leases only matter while their
//! containers live, and none outlive a crash; the flock, not durability, is what prevents
//! double allocation.
//!
//! Finding an attachment's leases goes through the owner index ([`crate::owner_index`]), a
//! verified hint kept outside the network directory; without a usable one, every lease file is
//! read as Go does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni_attribution::AttachmentId;
use cni_persist::{DirRule, LockKind, PersistError};

use crate::error::{ConfigError, IpamError};
use crate::files::{create_whole, read_regular, write_temp};
use crate::ident;
use crate::ip;
use crate::owner_index::{self, Change, IndexFile, Journal, Stamp};

/// Name of the lock file inside a network directory.
pub const LOCK_FILE: &str = "lock";
/// Prefix of the round-robin hint files (`last_reserved_ip.<rangeID>`).
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// Separator between container ID and interface name in a lease file.
pub const LINE_BREAK: &str = cni_attribution::names::HOST_LOCAL_LINE_BREAK;

/// Prefix of the temp files writes go through (not an address, so never read as a lease).
pub const TEMP_PREFIX: &str = cni_persist::TEMP_PREFIX;

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
        match cni_attribution::recognise::host_local_lease(content) {
            (id, Some(ifname)) => LeaseOwner::Attachment {
                container_id: id.to_string(),
                ifname: ifname.to_string(),
            },
            (id, None) => LeaseOwner::Legacy {
                container_id: id.to_string(),
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

impl LeaseOwner {
    /// The owner a lookup for (container ID, ifname) matches: the ID trimmed, as Go writes it.
    fn attachment(container_id: &str, ifname: &str) -> Self {
        LeaseOwner::Attachment {
            container_id: container_id.trim().to_string(),
            ifname: ifname.to_string(),
        }
    }

    /// The legacy owner a lookup for a container ID matches.
    fn legacy(container_id: &str) -> Self {
        LeaseOwner::Legacy {
            container_id: container_id.trim().to_string(),
        }
    }

    /// The owner index's key: exactly one owner value per key, so a lookup and a lease that
    /// match each other always share it.
    fn index_key(&self) -> u64 {
        match self {
            LeaseOwner::Attachment {
                container_id,
                ifname,
            } => owner_index::owner_key(&format!("{container_id}{LINE_BREAK}{ifname}")),
            LeaseOwner::Legacy { container_id } => owner_index::owner_key(container_id),
        }
    }
}

/// The leases of one attachment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Written for exactly (container ID, ifname), in address order.
    pub current: Vec<Lease>,
    /// Legacy leases of the container ID, in address order.
    pub legacy: Vec<Lease>,
}

/// The file content recording a lease for an attachment.
pub fn lease_content(container_id: &str, ifname: &str) -> String {
    cni_attribution::names::host_local_lease(container_id, ifname)
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
        let deadline = self.lock_timeout.map(|t| Instant::now() + t);
        let held = cni_persist::take_lock(&file, LockKind::Exclusive, deadline)
            .map_err(|e| IpamError::io("lock", &path, e))?;
        if !held {
            return Err(IpamError::LockTimeout { path });
        }
        let index = IndexSession::open(&self.dir);
        Ok(LockedStore {
            dir: &self.dir,
            index: RefCell::new(index),
            _lock: file,
        })
    }
}

/// The owner index as seen by one lock holder, and what it changed.
#[derive(Debug, Default)]
struct IndexSession {
    /// Where the index lives; `None` when the directory has no parent to keep it in.
    file: Option<IndexFile>,
    /// The index when it matched the directory at lock time.
    journal: Option<Journal>,
    /// Every lease (address → owner key), after a full read of the directory.
    full: Option<BTreeMap<IpAddr, u64>>,
    /// Leases this holder created or removed since.
    changes: Vec<Change>,
    /// Whether this holder changed the directory's entries at all (temp files too).
    touched: bool,
}

impl IndexSession {
    /// Reads the index; it is used only if its stamp is the directory's current one.
    fn open(dir: &Path) -> IndexSession {
        let file = IndexFile::for_network_dir(dir);
        let journal = match (&file, fs::metadata(dir)) {
            (Some(file), Ok(meta)) => file.load(&Stamp::of(&meta)),
            _ => None,
        };
        if journal.is_none() {
            log::debug!("owner index of {} missing or stale", dir.display());
        }
        IndexSession {
            file,
            journal,
            ..IndexSession::default()
        }
    }

    /// Brings the index up to date before the lock is released: rewritten whole after a full
    /// read, appended to when it was fresh, left stale otherwise. Failing only costs the next
    /// holder a full read.
    fn flush(&mut self, dir: &Path) {
        let Some(file) = &self.file else {
            return;
        };
        let written = match (&mut self.full, &self.journal) {
            (Some(full), journal) if self.touched || journal.is_none() => {
                owner_index::apply(full, &self.changes);
                file.rewrite(dir, full)
            }
            (_, Some(journal)) if self.touched => file.append(dir, journal, &self.changes),
            _ => return,
        };
        if let Err(e) = written {
            log::debug!("owner index of {} not updated: {e}", dir.display());
            if self.journal.is_some() {
                file.discard();
            }
        }
    }
}

/// Refuses a directory that someone other than this user (or root) could write to: owned by
/// another user, or writable by its group or by everyone. A symlinked data dir (an admin's
/// choice) is checked where it points.
fn check_directory(dir: &Path) -> Result<(), IpamError> {
    let rule = DirRule {
        root_may_own: true,
        follow_symlink: true,
        check_parent: false,
    };
    cni_persist::check_dir(dir, rule).map_err(|e| match e {
        PersistError::UnsafeDir { path, reason } => IpamError::UnsafeDirectory { path, reason },
        other => IpamError::io("inspect", dir, other.into()),
    })
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

/// The store while its lock is held; dropping it brings the owner index up to date, then closes
/// the lock file, which releases the lock.
#[derive(Debug)]
pub struct LockedStore<'a> {
    dir: &'a Path,
    index: RefCell<IndexSession>,
    // Declared last: fields drop in order, and the lock must outlive the index update.
    _lock: File,
}

impl Drop for LockedStore<'_> {
    fn drop(&mut self) {
        self.index.get_mut().flush(self.dir);
    }
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
        self.touch();
        match create_whole(self.dir, &path, content.as_bytes()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(IpamError::io("create", &path, e)),
        }
        let key = LeaseOwner::attachment(container_id, ifname).index_key();
        self.record(Change::Added(addr, key));
        // The hint only steers round-robin; losing it must not fail a reservation that is made.
        if let Err(e) = self.write_last_reserved(range_id, addr) {
            log::warn!("{e}");
        }
        Ok(true)
    }

    /// Removes a lease file this holder created (rollback of a failed ADD). Missing is fine.
    pub fn unreserve(&self, addr: IpAddr) -> Result<(), IpamError> {
        self.touch();
        remove_if_present(&self.lease_path(addr))?;
        let key = self
            .index
            .borrow()
            .changes
            .iter()
            .rev()
            .find_map(|c| match c {
                Change::Added(a, key) if *a == addr => Some(*key),
                _ => None,
            });
        match key {
            Some(key) => self.record(Change::Removed(addr, key)),
            // Not created under this lock: the index cannot say whose it was, so drop it.
            None => self.forget_index(),
        }
        Ok(())
    }

    /// Notes that this holder changes the directory's entries.
    fn touch(&self) {
        self.index.borrow_mut().touched = true;
    }

    fn record(&self, change: Change) {
        self.index.borrow_mut().changes.push(change);
    }

    /// Makes the index unusable for this holder: it will be left stale unless a full read
    /// rebuilds it.
    fn forget_index(&self) {
        self.index.borrow_mut().journal = None;
    }

    /// The round-robin hint of a range set; missing or unparsable means none.
    pub fn last_reserved_ip(&self, range_id: usize) -> Option<IpAddr> {
        let text = fs::read_to_string(self.last_reserved_path(range_id)).ok()?;
        ip::parse_ip(text.trim())
    }

    fn last_reserved_path(&self, range_id: usize) -> PathBuf {
        self.dir.join(format!("{LAST_RESERVED_PREFIX}{range_id}"))
    }

    /// Overwrites the hint in place, as Go does: every ADD writes it, and a temp file renamed
    /// over it freed an inode each time, which a journal-less ext4 then scans past on every
    /// file creation for a minute or more (see `cni_persist::spare`). Only lock holders read
    /// it (a tool that takes no lock may see a torn hint, as with Go's); not fsynced: the hint
    /// only steers round-robin, and after a crash any value, or none, is fine.
    fn write_last_reserved(&self, range_id: usize, addr: IpAddr) -> Result<(), IpamError> {
        let path = self.last_reserved_path(range_id);
        let text = ip::go_string(addr);
        self.touch();
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.set_len(text.len() as u64)
            })
            .map_err(|e| IpamError::io("write", &path, e))
    }

    /// Removes a temp file met while reading the directory: under the lock, any that exists
    /// was left by a killed writer. A store that cannot be changed (read-only) keeps it, which
    /// harms no reader.
    fn remove_stale_temp_file(&self, path: &Path) {
        self.touch();
        if let Err(e) = fs::remove_file(path) {
            log::debug!("cannot remove stale {}: {e}", path.display());
        }
    }

    /// The leases of one attachment. The owner index names them, and each is verified by
    /// reading its file; without a fresh index, or when a named file is missing or holds
    /// another owner, every lease file is read instead (and the index rebuilt from that).
    pub fn held_by(&self, container_id: &str, ifname: &str) -> Result<Held, IpamError> {
        let current = LeaseOwner::attachment(container_id, ifname);
        let legacy = LeaseOwner::legacy(container_id);
        if let Some(held) = self.held_from_index(&current, &legacy) {
            return Ok(held);
        }
        let (current, legacy): (Vec<Lease>, Vec<Lease>) = self
            .leases()?
            .into_iter()
            .filter(|l| l.owner == current || l.owner == legacy)
            .partition(|l| l.owner == current);
        Ok(Held { current, legacy })
    }

    /// [`Self::held_by`] from the index alone; `None` when it cannot be trusted.
    fn held_from_index(&self, current: &LeaseOwner, legacy: &LeaseOwner) -> Option<Held> {
        let session = self.index.borrow();
        let journal = session.journal.as_ref()?;
        let read = |owner: &LeaseOwner| -> Option<Vec<Lease>> {
            let mut addrs = journal.addresses_of(owner.index_key());
            addrs.sort_by_key(|addr| (addr.is_ipv6(), ip::to_u128(*addr)));
            addrs
                .into_iter()
                .map(|addr| {
                    let lease = self.read_lease(addr).filter(|l| l.owner == *owner);
                    if lease.is_none() {
                        log::debug!("owner index names {addr} wrongly: reading every lease");
                    }
                    lease
                })
                .collect()
        };
        Some(Held {
            current: read(current)?,
            legacy: read(legacy)?,
        })
    }

    /// The lease recorded for `addr`, when a regular file holds it (symlinks are not followed).
    fn read_lease(&self, addr: IpAddr) -> Option<Lease> {
        let path = self.lease_path(addr);
        let bytes = read_regular(&path)?;
        Some(Lease {
            ip: addr,
            owner: Lease::parse_owner(&String::from_utf8_lossy(&bytes)),
            path,
        })
    }

    /// Every lease in the directory: regular files whose names are IP addresses. Files that cannot
    /// be read are skipped, as Go skips them. Reads every file; the owner index is rebuilt from
    /// the result when the lock is released.
    pub fn leases(&self) -> Result<Vec<Lease>, IpamError> {
        let entries = fs::read_dir(self.dir).map_err(|e| IpamError::io("read", self.dir, e))?;
        let mut leases = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| IpamError::io("read", self.dir, e))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(TEMP_PREFIX) {
                self.remove_stale_temp_file(&entry.path());
                continue;
            }
            let Some(addr) = name.to_str().and_then(ip::parse_ip) else {
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
        let mut session = self.index.borrow_mut();
        session.full = Some(leases.iter().map(|l| (l.ip, l.owner.index_key())).collect());
        // Changes recorded before this read are already in it.
        session.changes.clear();
        Ok(leases)
    }

    /// Releases an attachment: every lease written for exactly (container ID, ifname); only if
    /// there is none, every legacy lease of the container ID (Go's fallback). Returns the
    /// released addresses.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Vec<IpAddr>, IpamError> {
        let held = self.held_by(container_id, ifname)?;
        let doomed = if held.current.is_empty() {
            held.legacy
        } else {
            held.current
        };
        self.remove_leases(doomed.iter())
            .map(|removed| removed.into_iter().map(|l| l.ip).collect())
    }

    /// Releases every lease whose owner is not in `valid` (the network is the store's); a
    /// legacy lease stays when any valid attachment has its container ID. `lock` and `last_reserved_ip.*` are never
    /// touched, nor any file whose name is not an address. Returns the released leases.
    pub fn gc(&self, valid: &[AttachmentId]) -> Result<Vec<Lease>, IpamError> {
        let leases = self.leases()?;
        let stale = leases.iter().filter(|lease| {
            !valid.iter().any(|a| {
                lease.is_for(&a.container_id, &a.ifname) || lease.is_legacy_for(&a.container_id)
            })
        });
        self.remove_leases(stale)
    }

    /// Checks that the directory accepts new files, with a probe that only lives under the lock.
    pub fn probe_writable(&self) -> io::Result<()> {
        self.touch();
        // Dropped uncommitted: removed.
        write_temp(self.dir, Path::new("probe"), b"").map(drop)
    }

    /// Removes the files of `leases`, carrying on after errors; returns what was removed, or
    /// all errors joined.
    fn remove_leases<'l>(
        &self,
        leases: impl Iterator<Item = &'l Lease>,
    ) -> Result<Vec<Lease>, IpamError> {
        let mut removed = Vec::new();
        let mut errors = Vec::new();
        for lease in leases {
            self.touch();
            match remove_if_present(&lease.path) {
                Ok(()) => {
                    self.record(Change::Removed(lease.ip, lease.owner.index_key()));
                    removed.push(lease.clone());
                }
                Err(e) => {
                    // Whether it is gone is unknown now.
                    self.forget_index();
                    errors.push(e);
                }
            }
        }
        match errors.len() {
            0 => Ok(removed),
            1 => Err(errors.remove(0)),
            _ => Err(IpamError::Multiple(errors)),
        }
    }
}

fn remove_if_present(path: &Path) -> Result<(), IpamError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(IpamError::io("remove", path, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn create_whole_is_exclusive_and_leaves_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("198.18.128.2");
        create_whole(dir.path(), &path, b"a\r\neth0").unwrap();
        let err = create_whole(dir.path(), &path, b"b\r\neth0").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"a\r\neth0");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o077, 0);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temp file left");
    }
}
