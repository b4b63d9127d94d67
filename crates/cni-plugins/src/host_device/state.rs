//! The restore record of one attachment: `<dataDir>/<containerID>_<ifname>.json`, written
//! before ADD moves the device and removed by DEL once the device is back (or gone).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let p = path(dir, &self.container_id, &self.ifname);
        let tmp = p.with_extension("tmp");
        let data = serde_json::to_vec(self).expect("serializable");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(&data).and_then(|_| f.sync_all()).map_err(io)?;
        fs::rename(&tmp, &p).map_err(io)?;
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
        match fs::remove_file(path(dir, container_id, ifname)) {
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
        assert_eq!(Saved::read(&dir, "c1", "net1"), Some(s));
        Saved::remove(&dir, "c1", "net1").unwrap();
        Saved::remove(&dir, "c1", "net1").unwrap();
        assert_eq!(Saved::read(&dir, "c1", "net1"), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
