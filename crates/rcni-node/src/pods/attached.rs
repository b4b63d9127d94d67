//! What the bridge plugin told the agent at ADD, kept on disk (`<state-dir>/attached/<sandbox
//! ID>.json`, one [`Announced`] each; removed at DEL), so that a restarted agent knows the
//! node's pods from their ADDs before any source lists them: pods the source never lists
//! (`rcni add` names no pod) keep their traffic, and pods held at the restart are released
//! when their labels come. Written with `cni-persist` temp files renamed into place, without
//! fsync: the records describe pods that a crash of the node takes with them (the state dir
//! is `/run/rcni` by default).

use std::io;
use std::path::{Path, PathBuf};

use cni_persist::{Durability, TempFile, TempName};

use super::local::Announced;

/// The records under one directory.
#[derive(Debug, Clone)]
pub struct Attached {
    dir: PathBuf,
}

impl Attached {
    /// The records in `dir` (made on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Attached {
        Attached { dir: dir.into() }
    }

    fn path(&self, sandbox: &str) -> PathBuf {
        self.dir.join(format!("{sandbox}.json"))
    }

    /// Writes `a`'s record (the sandbox ID was checked by the caller: it names a file).
    pub fn save(&self, a: &Announced) -> io::Result<()> {
        cni_persist::ensure_dir(&self.dir, cni_persist::DirRule::PRIVATE)?;
        let data = serde_json::to_vec(a)?;
        let mut temp = TempFile::create(&self.dir, &a.container_id)?;
        temp.write_all(&data)?;
        Ok(temp.replace(&self.path(&a.container_id), Durability::Rename)?)
    }

    /// Records the labels learned for `sandbox`, if it has a record.
    pub fn set_labels(
        &self,
        sandbox: &str,
        labels: &cni_policy::selector::Labels,
    ) -> io::Result<()> {
        let mut a = match read(&self.path(sandbox)) {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        a.labels = Some(labels.clone());
        self.save(&a)
    }

    /// Removes the record of `sandbox`, if any.
    pub fn remove(&self, sandbox: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(sandbox)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every record; unreadable ones are logged and removed, as are temp files of writers
    /// that are gone.
    pub fn load(&self) -> Vec<Announced> {
        if let Err(e) = cni_persist::remove_temps(&self.dir, TempName::writer_is_gone) {
            log::debug!("temp files in {}: {e}", self.dir.display());
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                log::warn!(
                    "read {}: {e}; no pod told before this start is known",
                    self.dir.display()
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            match read(&path) {
                Ok(a) => out.push(a),
                Err(e) => {
                    log::warn!("{}: {e}; removed", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out.sort_by_key(|a| a.at);
        out
    }
}

fn read(path: &Path) -> io::Result<Announced> {
    Ok(serde_json::from_slice(&std::fs::read(path)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_until_removed_and_bad_ones_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Attached::new(dir.path().join("attached"));
        assert!(store.load().is_empty());
        let a = Announced {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/c1".into(),
            namespace: "x".into(),
            name: "a".into(),
            ips: vec!["198.18.1.2".parse().unwrap()],
            labels: None,
            at: 7,
        };
        store.save(&a).unwrap();
        std::fs::write(dir.path().join("attached/broken.json"), b"{").unwrap();
        assert_eq!(store.load(), std::slice::from_ref(&a));
        let labels = [("app".to_string(), "web".to_string())].into();
        store.set_labels("c1", &labels).unwrap();
        store.set_labels("none", &labels).unwrap();
        assert_eq!(store.load()[0].labels, Some(labels));
        assert!(!dir.path().join("attached/broken.json").exists());
        store.remove("c1").unwrap();
        store.remove("c1").unwrap();
        assert!(store.load().is_empty());
    }
}
