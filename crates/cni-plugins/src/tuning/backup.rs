//! The backup of link attributes tuning changes (PL §1.14):
//! `<dataDir>/<containerID>_<ifname>.json`, written before ADD changes anything and applied
//! back by DEL. Same file name and JSON keys as the Go plugin, so either can restore what the
//! other saved.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cni_linux::rtnl::link::Link;
use cni_linux::{Handle, MacAddr};

use super::conf::TuningConf;

/// The old values of the attributes ADD is about to change; `None` means "not changed".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// 0: not changed (Go's `omitempty` int).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    #[serde(rename = "txQLen", default, skip_serializing_if = "Option::is_none")]
    pub tx_qlen: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Backup {
    /// The current values of exactly the attributes `conf` changes.
    pub fn of(link: &Link, conf: &TuningConf) -> Backup {
        Backup {
            mac: match (conf.mac, link.mac) {
                (Some(_), Some(old)) => old.to_string(),
                _ => String::new(),
            },
            promisc: conf.promisc.then_some(link.promisc),
            mtu: if conf.mtu.is_some() { link.mtu } else { 0 },
            allmulti: conf.allmulti.map(|_| link.allmulti),
            tx_qlen: conf.tx_qlen.map(|_| link.txqlen),
        }
    }

    /// Applies the saved values to link `index` in Go's order (MTU, MAC, promisc, allmulti,
    /// txqueuelen), keeping on after a failure; returns the failures.
    pub fn restore(&self, h: &mut Handle, index: u32) -> Vec<String> {
        let mut steps: Vec<(&str, Result<(), String>)> = Vec::new();
        let text = |r: Result<(), cni_linux::NetlinkError>| r.map_err(|e| e.to_string());
        if self.mtu != 0 {
            steps.push(("MTU", text(h.set_link_mtu(index, self.mtu))));
        }
        if !self.mac.is_empty() {
            let r = match self.mac.parse::<MacAddr>() {
                Ok(mac) => text(h.set_link_mac(index, mac)),
                Err(e) => Err(e.to_string()),
            };
            steps.push(("MAC address", r));
        }
        if let Some(on) = self.promisc {
            steps.push(("promiscuous mode", text(h.set_link_promisc(index, on))));
        }
        if let Some(on) = self.allmulti {
            steps.push(("all-multicast mode", text(h.set_link_allmulti(index, on))));
        }
        if let Some(len) = self.tx_qlen {
            steps.push(("transmit queue length", text(h.set_link_txqlen(index, len))));
        }
        steps
            .into_iter()
            .filter_map(|(what, r)| r.err().map(|e| format!("failed to restore {what}: {e}")))
            .collect()
    }
}

/// The backup file of one attachment.
pub fn path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}_{ifname}.json"))
}

/// Writes the backup atomically (temp file, fsync, rename), creating the directory (0700).
pub fn write(file: &Path, backup: &Backup) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // Go's layout: one-space indentation.
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    backup.serialize(&mut ser).map_err(std::io::Error::other)?;
    let tmp = file.with_extension(format!("json.tmp{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// What reading a backup file found.
#[derive(Debug)]
pub enum Saved {
    None,
    Backup(Backup),
    /// The file exists but does not decode.
    Unreadable(String),
}

pub fn read(file: &Path) -> Saved {
    match fs::read(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::None,
        Err(e) => Saved::Unreadable(e.to_string()),
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(b) => Saved::Backup(b),
            Err(e) => Saved::Unreadable(e.to_string()),
        },
    }
}

/// Removes the file; a missing one is fine.
pub fn remove(file: &Path) -> std::io::Result<()> {
    match fs::remove_file(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_layout_round_trips() {
        let b = Backup {
            mac: "02:00:00:00:00:01".into(),
            promisc: Some(false),
            mtu: 1500,
            allmulti: None,
            tx_qlen: Some(1000),
        };
        let dir = tempfile::tempdir().unwrap();
        let file = path(&dir.path().join("sub"), "cid", "eth0");
        assert!(file.ends_with("sub/cid_eth0.json"));
        write(&file, &b).unwrap();
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "{\n \"mac\": \"02:00:00:00:00:01\",\n \"promisc\": false,\n \"mtu\": 1500,\n \"txQLen\": 1000\n}"
        );
        assert!(matches!(read(&file), Saved::Backup(r) if r == b));
        // What the Go plugin writes for an MTU-only change.
        fs::write(&file, "{\n \"mtu\": 9000\n}").unwrap();
        let Saved::Backup(go) = read(&file) else {
            panic!("Go backup not read")
        };
        assert_eq!(
            go,
            Backup {
                mtu: 9000,
                ..Backup::default()
            }
        );
        fs::write(&file, "not json").unwrap();
        assert!(matches!(read(&file), Saved::Unreadable(_)));
        remove(&file).unwrap();
        remove(&file).unwrap();
        assert!(matches!(read(&file), Saved::None));
    }
}
