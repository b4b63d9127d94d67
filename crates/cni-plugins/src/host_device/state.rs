//! The restore record of one attachment: `<dataDir>/<containerID>_<ifname>.json`, written
//! before ADD moves the device and removed by DEL once the device is back (or gone).
//!
//! Written through `cni_persist` with `Durability::Fsync` (as before): a record DEL reads must
//! be whole, or the device's name and MTU could not be restored; the default directory is on
//! `/run` (a tmpfs), where the sync costs nothing. A temp file of a killed ADD carries the
//! record's name and is removed by DEL.

use std::fs;
use std::path::{Path, PathBuf};

use cni_persist::{DirRule, Durability};

use serde::{Deserialize, Serialize};

use cni_types::CniError;

/// What the host link looked like before ADD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// Its host name.
    pub name: String,
    pub mtu: u32,
    /// Its alias before ADD set it to the host name (empty: none).
    #[serde(default)]
    pub alias: String,
    pub container_id: String,
    pub ifname: String,
}

pub fn path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(cni_attribution::names::backup_file_name(
        container_id,
        ifname,
    ))
}

impl Saved {
    /// Writes the record (replacing an older one), readable only by root.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, CniError> {
        let io = |e: std::io::Error| {
            CniError::io(format!(
                "failed to write host-device state in {}: {e}",
                dir.display()
            ))
        };
        cni_persist::ensure_dir(dir, DirRule::PRIVATE).map_err(|e| io(e.into()))?;
        let p = path(dir, &self.container_id, &self.ifname);
        let data = serde_json::to_vec(self).expect("serializable");
        cni_persist::replace(&p, &data, Durability::Fsync).map_err(|e| io(e.into()))?;
        Ok(p)
    }

    /// The record of an attachment, `None` when there is none (or it is unreadable, logged).
    pub fn read(dir: &Path, container_id: &str, ifname: &str) -> Option<Saved> {
        let p = path(dir, container_id, ifname);
        let data = fs::read(&p).ok()?;
        match serde_json::from_slice(&data) {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("host-device: ignoring unreadable {}: {e}", p.display());
                None
            }
        }
    }

    /// Removes the record; a missing one is fine.
    pub fn remove(dir: &Path, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let p = path(dir, container_id, ifname);
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        cni_persist::remove_temps(dir, |t| t.is_of(name)).map_err(|e| {
            CniError::io(format!(
                "failed to remove host-device state temp files: {e}"
            ))
        })?;
        match fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CniError::io(format!(
                "failed to remove host-device state: {e}"
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_remove() {
        let dir = std::env::temp_dir().join(format!("rcni-hd-state-{}", std::process::id()));
        let s = Saved {
            name: "eth1".into(),
            mtu: 9000,
            alias: String::new(),
            container_id: "c1".into(),
            ifname: "net1".into(),
        };
        let p = s.write(&dir).unwrap();
        assert_eq!(p, dir.join("c1_net1.json"));
        // A killed ADD's temp file of this record goes with DEL.
        let left = cni_persist::TempFile::create(&dir, "c1_net1.json")
            .unwrap()
            .keep();
        assert_eq!(Saved::read(&dir, "c1", "net1"), Some(s));
        Saved::remove(&dir, "c1", "net1").unwrap();
        Saved::remove(&dir, "c1", "net1").unwrap();
        assert_eq!(Saved::read(&dir, "c1", "net1"), None);
        assert!(!left.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
