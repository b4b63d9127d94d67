//! The state directory: one record per sandbox (`<dir>/<id>.json`), written through
//! `cni_persist` with [`Durability::Fsync`] (a record is what recovery after a crash or reboot
//! works from, so a write that returned must survive one), and the locks that keep verbs apart.
//!
//! Locks (`flock`, released by the kernel when a process dies, which is what recovery relies
//! on):
//! - `<dir>/.lock`: every verb holds it shared; `gc` holds it exclusively, so the set of
//!   records it takes as valid cannot grow under it.
//! - `<dir>/locks/<id>`: held exclusively by the verb working on that sandbox. A record in a
//!   transient state whose lock can be taken has no live owner: it was left by a crash.
//!   The plugins the verb starts inherit this lock: they run in process groups of their own
//!   and outlive a killed verb, finishing their ADD or DEL after it died. Until the last of
//!   them exits the sandbox stays locked, so recovery cannot DEL an attachment that a
//!   surviving plugin is still creating (which would leak whatever that plugin writes after
//!   the DEL, such as a lease). The descriptor is close-on-exec like every other: the verb
//!   passes it to its plugins alone ([`SandboxLock::descriptor`] in the runtime's
//!   `ExecOptions::pass_fds`), so no other child of the process (another sandbox's plugin,
//!   anything a library or a test starts) can hold a sandbox locked.
//!
//! Pending markers (`<dir>/<id>.pending`, empty): a record that needs recovery (a verb is
//! working on it, see [`SandboxRecord::needs_recovery`]) has one, created before the record
//! is written and removed after the record leaves that state. Every verb starts with
//! recovery, and with a marker per pending record it loads those few records instead of
//! every record on the node. A marker is created in the records' directory so the
//! directory sync of the record's write makes it durable too. `<dir>/.pending-complete`
//! says every pending record has its marker; without it (a state directory written by a
//! version before markers) the next recovery scans every record once and adds them.
//!
//! Temp files are `cni_persist`'s, tagged `<id>.json`: a writer killed before its rename
//! leaves one that the next `gc` (which excludes every writer) removes.
//!
//! Files are recycled (`cni_persist::spare`, in `<dir>/.spare/`): a record written again is
//! exchanged with its new version and the old inode parked, a removed record or marker is
//! parked instead of unlinked, and new temp files and markers are taken from there. A pod's
//! life writes its record five or six times; freeing an inode each time made every later file
//! creation on a journal-less ext4 scan past all of them. A reader holding no lock of the
//! sandbox may still have the old inode open when it is written again: [`RecordStore::load`]
//! reads again when the record's name no longer leads to what it read
//! (`cni_persist::spare::read_stable`).

use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_persist::spare::{self, Spares};
use cni_persist::{DirRule, Durability, LockKind};

use crate::error::SandboxError;
use crate::record::SandboxRecord;

/// The default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/rcni/sandboxes";

const RECORD_EXT: &str = "json";
const PENDING_EXT: &str = "pending";
/// Present once every record that needs recovery has its pending marker.
const PENDING_COMPLETE: &str = ".pending-complete";
/// The spare directory (see the module comment); a dot name, so never listed as a record.
const SPARE_DIR: &str = ".spare";
/// Temp files of rcni versions before `cni_persist` (`.<id>.json.tmp-<pid>`).
const LEGACY_TEMP_MARK: &str = ".tmp-";

/// The records under one state directory.
#[derive(Debug, Clone)]
pub struct RecordStore {
    dir: PathBuf,
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// The exclusive lock of one sandbox. `release_and_forget` removes the lock file too (after
/// the record is gone), without letting a waiter lock a file nobody else can see.
#[derive(Debug)]
pub struct SandboxLock {
    file: Arc<OwnedFd>,
    path: PathBuf,
}

impl SandboxLock {
    /// The locked descriptor (close-on-exec), for the plugins of the verb that holds the lock
    /// to inherit (see the module comment).
    pub fn descriptor(&self) -> Arc<OwnedFd> {
        self.file.clone()
    }

    /// Removes the lock file while still holding the lock: a process that opened the old file
    /// and waits on it finds, once it gets the lock, that the path names another file (or
    /// none) and starts over (see [`RecordStore::lock_sandbox`]).
    pub fn release_and_forget(self) {
        let _ = fs::remove_file(&self.path);
        drop(self.file);
    }
}

impl RecordStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        RecordStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ensure_dirs(&self) -> Result<(), SandboxError> {
        for dir in [self.dir.clone(), self.dir.join("locks")] {
            cni_persist::ensure_dir(&dir, DirRule::PRIVATE)
                .map_err(|e| SandboxError::io("unusable state directory", &dir, e.into()))?;
        }
        Ok(())
    }

    fn spare_dir(&self) -> PathBuf {
        self.dir.join(SPARE_DIR)
    }

    /// The record file of `id`.
    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.{RECORD_EXT}"))
    }

    /// Takes the state directory lock: shared for a verb, exclusive for GC.
    pub fn lock_state(&self, exclusive: bool) -> Result<Lock, SandboxError> {
        self.ensure_dirs()?;
        let path = self.dir.join(".lock");
        let kind = if exclusive {
            LockKind::Exclusive
        } else {
            LockKind::Shared
        };
        let file = cni_persist::lock(&path, kind)
            .map_err(|e| SandboxError::io("cannot lock", &path, e.into()))?;
        Ok(Lock { _file: file })
    }

    /// Takes the exclusive lock of sandbox `id`, waiting for a live holder; `None` with
    /// `wait == false` when another process holds it.
    pub fn lock_sandbox(&self, id: &str, wait: bool) -> Result<Option<SandboxLock>, SandboxError> {
        if wait {
            self.lock_sandbox_until(id, None)
        } else {
            self.lock_sandbox_until(id, Some(Instant::now()))
        }
    }

    /// Takes the exclusive lock of sandbox `id`, trying for up to `limit` while another
    /// process (or a plugin of a killed verb) holds it; `None` when it is still held then.
    pub fn lock_sandbox_within(
        &self,
        id: &str,
        limit: Duration,
    ) -> Result<Option<SandboxLock>, SandboxError> {
        self.lock_sandbox_until(id, Some(Instant::now() + limit))
    }

    /// The lock of `id`: blocking without a deadline, given up at the deadline with one.
    fn lock_sandbox_until(
        &self,
        id: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<SandboxLock>, SandboxError> {
        self.ensure_dirs()?;
        let path = self.dir.join("locks").join(id);
        loop {
            let file = open_lock_file(&path)?;
            let held = cni_persist::take_lock(&file, LockKind::Exclusive, deadline)
                .map_err(|e| SandboxError::io("cannot lock", &path, e))?;
            if !held {
                return Ok(None);
            }
            // The holder we waited for may have removed the file: then this lock guards
            // nothing and the current file (if any) must be locked instead.
            let held = file
                .metadata()
                .map_err(|e| SandboxError::io("cannot stat", &path, e))?;
            match fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    let file = Arc::new(OwnedFd::from(file));
                    return Ok(Some(SandboxLock { file, path }));
                }
                _ => continue,
            }
        }
    }

    /// The record of `id`, if there is one. Callers that hold no lock of `id` may read while
    /// its verb replaces or removes the record, on an inode that is then recycled (see the
    /// module comment): `read_stable` reads again when that happened.
    pub fn load(&self, id: &str) -> Result<Option<SandboxRecord>, SandboxError> {
        let path = self.path(id);
        match spare::read_stable(&path, |b| serde_json::from_slice::<SandboxRecord>(b)) {
            Ok(parsed) => parsed.map(Some).map_err(|e| SandboxError::BadRecord {
                path,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SandboxError::io("cannot read record", &path, e)),
        }
    }

    /// Writes the record atomically.
    pub fn save(&self, rec: &SandboxRecord) -> Result<(), SandboxError> {
        self.ensure_dirs()?;
        let target = self.path(&rec.id);
        let bytes = serde_json::to_vec_pretty(rec).map_err(|e| SandboxError::BadRecord {
            path: target.clone(),
            message: e.to_string(),
        })?;
        let spare_dir = self.spare_dir();
        let spares = Spares::new(&spare_dir);
        let pending = rec.needs_recovery();
        if pending {
            let marker = self.pending_marker(&rec.id);
            // Only its name counts: a recycled marker keeps its old bytes.
            if !marker.exists() && !spares.take_new(&marker) {
                File::create(&marker)
                    .map_err(|e| SandboxError::io("cannot write pending marker", &marker, e))?;
            }
        }
        spare::replace(&target, &bytes, Durability::Fsync, spares)
            .map_err(|e| SandboxError::io("cannot write record", &target, e.into()))?;
        if !pending {
            self.clear_pending(&rec.id);
        }
        Ok(())
    }

    fn pending_marker(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.{PENDING_EXT}"))
    }

    /// Removes the pending marker of `id`; a marker left behind only costs recovery a load.
    /// Outside `save`/`remove`, only with the sandbox's lock held (a verb makes the marker
    /// before it writes a transient record).
    pub(crate) fn clear_pending(&self, id: &str) {
        let marker = self.pending_marker(id);
        if marker.exists() {
            Spares::new(&self.spare_dir()).park(&marker);
        }
    }

    /// The records recovery must look at: those with a pending marker (every record, once,
    /// for a state directory from before markers). A record whose marker outlived its
    /// transient state is returned too; the caller checks the state.
    pub fn pending_records(&self) -> Result<Vec<SandboxRecord>, SandboxError> {
        let complete = self.dir.join(PENDING_COMPLETE);
        if complete.exists() {
            let mut recs = Vec::new();
            for id in self.names_with_ext(PENDING_EXT)? {
                match self.load(&id) {
                    Ok(Some(r)) => recs.push(r),
                    Ok(None) => self.clear_pending(&id),
                    Err(e) => log::warn!("recovery: {e}"),
                }
            }
            return Ok(recs);
        }
        let (recs, _) = self.records()?;
        let pending: Vec<SandboxRecord> = recs.into_iter().filter(|r| r.needs_recovery()).collect();
        self.ensure_dirs()?;
        for rec in &pending {
            let marker = self.pending_marker(&rec.id);
            File::create(&marker)
                .map_err(|e| SandboxError::io("cannot write pending marker", &marker, e))?;
        }
        File::create(&complete)
            .map_err(|e| SandboxError::io("cannot write pending marker", &complete, e))?;
        let _ = cni_persist::sync_dir(&self.dir);
        Ok(pending)
    }

    /// Removes the record of `id` (a missing one is fine), keeping its inode as a spare.
    pub fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let path = self.path(id);
        let spare_dir = self.spare_dir();
        match Spares::new(&spare_dir).remove(&path) {
            Ok(()) => {
                self.clear_pending(id);
                let _ = cni_persist::sync_dir(&self.dir);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.clear_pending(id);
                Ok(())
            }
            Err(e) => Err(SandboxError::io("cannot remove record", &path, e)),
        }
    }

    /// The ids of every record, sorted.
    pub fn ids(&self) -> Result<Vec<String>, SandboxError> {
        self.names_with_ext(RECORD_EXT)
    }

    /// The sorted stems of the directory's `<stem>.<ext>` files (dot files excluded).
    fn names_with_ext(&self, ext: &str) -> Result<Vec<String>, SandboxError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(SandboxError::io(
                    "cannot read state directory",
                    &self.dir,
                    e,
                ))
            }
        };
        let mut ids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .filter_map(|n| n.strip_suffix(&format!(".{ext}")).map(String::from))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Every readable record; unreadable ones are reported, not fatal.
    pub fn records(&self) -> Result<(Vec<SandboxRecord>, Vec<SandboxError>), SandboxError> {
        let mut recs = Vec::new();
        let mut bad = Vec::new();
        for id in self.ids()? {
            match self.load(&id) {
                Ok(Some(r)) => recs.push(r),
                Ok(None) => {}
                Err(e) => bad.push(e),
            }
        }
        Ok((recs, bad))
    }

    /// Removes temp files of killed writers and lock files of sandboxes without a record.
    /// Only safe with the state lock held exclusively (no verb is running).
    pub fn sweep(&self) -> usize {
        let mut removed = cni_persist::remove_temps(&self.dir, |_| true).unwrap_or(0);
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
                if name.starts_with('.') && name.contains(LEGACY_TEMP_MARK) {
                    removed += usize::from(fs::remove_file(self.dir.join(&name)).is_ok());
                }
                let orphan_marker = name
                    .strip_suffix(&format!(".{PENDING_EXT}"))
                    .is_some_and(|id| !self.path(id).exists());
                if orphan_marker {
                    removed += usize::from(fs::remove_file(self.dir.join(&name)).is_ok());
                }
            }
        }
        if let Ok(entries) = fs::read_dir(self.dir.join("locks")) {
            for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
                if !self.path(&name).exists() {
                    removed +=
                        usize::from(fs::remove_file(self.dir.join("locks").join(&name)).is_ok());
                }
            }
        }
        removed
    }
}

fn open_lock_file(path: &Path) -> Result<File, SandboxError> {
    cni_persist::open_lock_file(path)
        .map_err(|e| SandboxError::io("cannot open lock", path, e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{NetnsOwner, PodMeta, State, RECORD_FORMAT};

    fn record(id: &str) -> SandboxRecord {
        SandboxRecord {
            format: RECORD_FORMAT,
            id: id.into(),
            pod: PodMeta::default(),
            netns: "/run/netns/x".into(),
            netns_owner: NetnsOwner::Caller,
            state: State::SettingUp,
            removing: false,
            networks: vec![],
            cni_args: vec![],
            capability_args: Default::default(),
            ips: vec![],
            results: vec![],
            errors: vec![],
            created: 1,
            updated: 1,
        }
    }

    /// A sandbox's life on the store frees no inode: each rewrite lands on a parked one and
    /// the replaced record, the cleared marker and the removed record are parked in turn.
    #[test]
    fn a_pod_life_recycles_its_files_instead_of_freeing_them() {
        use std::collections::BTreeSet;
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path().join("s"));
        let inodes = |dir: &Path| -> BTreeSet<u64> {
            fs::read_dir(dir)
                .map(|rd| rd.flatten().map(|e| e.metadata().unwrap().ino()).collect())
                .unwrap_or_default()
        };
        // A first pod leaves spares behind.
        let mut first = record("first");
        store.save(&first).unwrap();
        first.state = State::Ready;
        store.save(&first).unwrap();
        store.remove("first").unwrap();
        let spares = inodes(&store.spare_dir());
        assert_eq!(
            spares.len(),
            3,
            "old record, marker and removed record are parked"
        );

        let mut second = record("second");
        store.save(&second).unwrap();
        assert!(store.pending_marker("second").exists());
        second.state = State::Ready;
        store.save(&second).unwrap();
        assert!(!store.pending_marker("second").exists());
        assert_eq!(store.load("second").unwrap().unwrap().state, State::Ready);
        let record_inode = fs::metadata(store.path("second")).unwrap().ino();
        assert!(spares.contains(&record_inode), "written on a parked inode");
        store.remove("second").unwrap();
        assert!(store.ids().unwrap().is_empty());
        let now = inodes(&store.spare_dir());
        assert!(now.contains(&record_inode));
        assert!(
            now.is_subset(&spares),
            "no inode was created: {now:?} {spares:?}"
        );
        assert_eq!(
            fs::read_dir(store.dir())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .filter(|n| n != "locks")
                .collect::<BTreeSet<_>>(),
            BTreeSet::from([SPARE_DIR.to_string()]),
            "only the spare directory is left"
        );
    }

    #[test]
    fn records_round_trip_and_temp_files_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path().join("s"));
        assert!(store.ids().unwrap().is_empty());
        store.save(&record("b")).unwrap();
        let mut a = record("a");
        a.state = State::Ready;
        store.save(&a).unwrap();
        assert_eq!(store.ids().unwrap(), ["a", "b"]);
        assert_eq!(store.load("a").unwrap().unwrap().state, State::Ready);
        // A killed writer's temp file and a stale lock file.
        let temp = cni_persist::TempFile::create(store.dir(), "c.json").unwrap();
        fs::write(store.dir().join(".c.json.tmp-1"), b"{").unwrap();
        fs::write(store.dir().join("locks/c"), b"").unwrap();
        assert_eq!(store.ids().unwrap(), ["a", "b"]);
        assert_eq!(store.sweep(), 3);
        assert!(!temp.path().exists());
        store.remove("a").unwrap();
        store.remove("a").unwrap();
        assert_eq!(store.ids().unwrap(), ["b"]);
        fs::write(store.path("bad"), b"not json").unwrap();
        let (recs, bad) = store.records().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(bad.len(), 1);
    }

    fn ids_of(recs: &[SandboxRecord]) -> Vec<&str> {
        recs.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn recovery_reads_only_records_with_a_pending_marker() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let mut ready = record("ready");
        ready.state = State::Ready;
        store.save(&ready).unwrap();
        store.save(&record("busy")).unwrap();
        // The first recovery scans everything (no completeness marker yet), then only markers.
        assert_eq!(ids_of(&store.pending_records().unwrap()), ["busy"]);
        assert!(d.path().join(PENDING_COMPLETE).exists());
        // A record corrupted without a marker is no longer read by recovery at all.
        fs::write(store.path("ready"), b"not json").unwrap();
        assert_eq!(ids_of(&store.pending_records().unwrap()), ["busy"]);
        // Leaving the transient state removes the marker; entering one adds it.
        let mut busy = record("busy");
        busy.state = State::Ready;
        store.save(&busy).unwrap();
        assert!(store.pending_records().unwrap().is_empty());
        busy.removing = true;
        store.save(&busy).unwrap();
        assert_eq!(ids_of(&store.pending_records().unwrap()), ["busy"]);
        store.remove("busy").unwrap();
        assert!(!store.pending_marker("busy").exists());
        assert!(store.pending_records().unwrap().is_empty());
    }

    #[test]
    fn records_from_before_markers_are_found_once_and_orphan_markers_swept() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        store.save(&record("old")).unwrap();
        // What an older version leaves: the transient record without its marker.
        fs::remove_file(store.pending_marker("old")).unwrap();
        assert_eq!(ids_of(&store.pending_records().unwrap()), ["old"]);
        assert!(store.pending_marker("old").exists());
        fs::write(store.pending_marker("gone"), b"").unwrap();
        assert!(store.sweep() >= 1);
        assert!(!store.pending_marker("gone").exists());
        assert!(store.pending_marker("old").exists());
    }

    #[test]
    fn a_held_sandbox_lock_is_seen_and_a_forgotten_one_is_not_reused() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let held = store.lock_sandbox("x", true).unwrap().unwrap();
        assert!(store.lock_sandbox("x", false).unwrap().is_none());
        held.release_and_forget();
        assert!(!d.path().join("locks/x").exists());
        let again = store.lock_sandbox_within("x", Duration::from_secs(5));
        let again = again.unwrap().unwrap();
        assert!(d.path().join("locks/x").exists());
        drop(again);
        let _state = store.lock_state(false).unwrap();
        let _other = store.lock_state(false).unwrap();
    }

    // A child this process starts for anything else (another sandbox's plugin, a tool) must
    // not keep a sandbox locked after its verb let go: the descriptor is close-on-exec.
    #[test]
    fn an_unrelated_child_does_not_hold_a_sandbox_lock() {
        use std::io::BufRead;
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let held = store.lock_sandbox("x", true).unwrap().unwrap();
        // Once the child prints, its exec is complete (close-on-exec descriptors are closed
        // by then; a child still inside execve may briefly hold them).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo started; exec sleep 30"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        drop(held);
        // A while, not one try: a child of another test may be between fork and exec.
        let again = store.lock_sandbox_within("x", Duration::from_secs(5));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(line, "started\n");
        assert!(
            again.unwrap().is_some(),
            "a child started while the lock was held keeps it"
        );
    }
}
