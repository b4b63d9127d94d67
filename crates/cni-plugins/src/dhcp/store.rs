//! The daemon's lease store: one JSON file per attachment in the state dir, written through
//! `cni_persist` with [`Durability::Fsync`], so that a restarted daemon (after a crash or a
//! reboot: the DHCP server still holds the lease) serves the same addresses and keeps
//! renewing them (Go's daemon keeps leases only in memory). A temp file a killed daemon left
//! is removed when the next one loads the store.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cni_attribution::AttachmentId;
use cni_persist::{DirRule, Durability, TempName};

use serde::{Deserialize, Serialize};

use super::conf::LeaseParams;
use super::lease::Lease;

/// Everything needed to answer, renew and release a lease after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRecord {
    /// Which attachment the lease belongs to (serialized as `AttachmentId` is).
    pub key: AttachmentId,
    /// The container's netns path, as the runtime gave it.
    pub netns: PathBuf,
    /// The interface's MAC when the lease was acquired (chaddr).
    pub mac: [u8; 6],
    pub params: LeaseParams,
    pub lease: Lease,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (and creates, mode 0700) the state directory, refused when another user could
    /// write to it or it is a symlink.
    pub fn open(dir: &Path) -> io::Result<Store> {
        cni_persist::ensure_dir(dir, DirRule::PRIVATE)?;
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of an attachment ([`AttachmentId::dhcp_lease_file_name`]).
    fn path(&self, key: &AttachmentId) -> PathBuf {
        self.dir.join(key.dhcp_lease_file_name())
    }

    /// Writes (or replaces) the record of its attachment.
    pub fn save(&self, record: &LeaseRecord) -> io::Result<()> {
        let path = self.path(&record.key);
        let data = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        Ok(cni_persist::replace(&path, &data, Durability::Fsync)?)
    }

    /// Removes the record of an attachment; a missing one is fine.
    pub fn remove(&self, key: &AttachmentId) -> io::Result<()> {
        match fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every readable record. Temp files of killed writers are removed first; unreadable
    /// records are logged and left for an operator.
    pub fn load_all(&self) -> io::Result<Vec<LeaseRecord>> {
        cni_persist::remove_temps(&self.dir, TempName::writer_is_gone)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if cni_persist::is_temp(&entry.file_name()) {
                continue;
            }
            let path = entry.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("json") => {}
                // The fixed temp name of versions before cni_persist; only a killed write of
                // a daemon that is gone now (one daemon runs per state dir) can have left it.
                Some("tmp") => {
                    let _ = fs::remove_file(&path);
                    continue;
                }
                _ => continue,
            }
            match fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|d| serde_json::from_slice(&d).map_err(|e| e.to_string()))
            {
                Ok(r) => out.push(r),
                Err(e) => log::warn!("dhcp: ignoring unreadable {}: {e}", path.display()),
            }
        }
        out.sort_by(|a: &LeaseRecord, b| a.key.container_id.cmp(&b.key.container_id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn record(cid: &str) -> LeaseRecord {
        LeaseRecord {
            key: AttachmentId::new("net/with/slashes", cid, "eth0"),
            netns: "/run/netns/x".into(),
            mac: [2, 0, 0, 0, 0, 1],
            params: LeaseParams::default(),
            lease: Lease {
                address: Ipv4Addr::new(198, 18, 0, 9),
                prefix_len: 24,
                server: Ipv4Addr::new(198, 18, 0, 1),
                routers: vec![],
                static_routes: vec![],
                classless_routes: vec![("198.19.0.0/16".parse().unwrap(), Ipv4Addr::UNSPECIFIED)],
                bound_at: 1,
                lease_secs: 120,
                t1_secs: 60,
                t2_secs: 105,
            },
        }
    }

    #[test]
    fn records_round_trip_and_are_replaced_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state")).unwrap();
        let mut a = record("a");
        store.save(&a).unwrap();
        store.save(&record("b")).unwrap();
        a.lease.bound_at = 2;
        store.save(&a).unwrap();
        // A temp file of a writer that is gone is swept; a live writer's is skipped and kept.
        let dead = store
            .dir()
            .join(TempName::file_name(u32::MAX >> 1, "lease-x.json"));
        fs::write(&dead, b"{").unwrap();
        let live = cni_persist::TempFile::create(store.dir(), "lease-y.json").unwrap();
        fs::write(store.dir().join("lease-z.tmp"), b"{").unwrap();
        let all = store.load_all().unwrap();
        assert_eq!(all, vec![a.clone(), record("b")]);
        assert!(!dead.exists() && live.path().exists());
        assert!(!store.dir().join("lease-z.tmp").exists());

        store.remove(&a.key).unwrap();
        store.remove(&a.key).unwrap();
        assert_eq!(store.load_all().unwrap(), vec![record("b")]);
    }

    #[test]
    fn an_unreadable_record_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        fs::write(dir.path().join("lease-bad.json"), b"not json").unwrap();
        store.save(&record("a")).unwrap();
        assert_eq!(store.load_all().unwrap(), vec![record("a")]);
    }
}
