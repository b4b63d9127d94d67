//! The backup of link attributes tuning changes:
//! `<dataDir>/<containerID>_<ifname>.json`, written before ADD changes anything and applied
//! back by DEL. Same file name and JSON keys as the Go plugin, so either can restore what the
//! other saved; rcni adds one key Go ignores, `rcniOwner`, the attachment's tag
//! (`<hash16(net)>-<hash16(ifname:cid)>`, as in rule comments and veth aliases), so GC can
//! tell which network a backup belongs to.
//!
//! Files follow [`state_file`]: a checked 0700 directory, writes through a `cni_persist` temp
//! file tagged with the attachment tag (exclusive, no symlink followed, 0600) renamed into
//! place; a kill before the rename leaves a temp file whose name says whose it is, which DEL of
//! that attachment and GC of its network remove.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cni_attribution::AttachmentId;
use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, MacAddr};

use super::conf::TuningConf;
use crate::common::state_file::{self, Contents, Existing};

/// A backup is a few hundred bytes; anything past this is not one.
const MAX_BACKUP_LEN: u64 = 64 * 1024;

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
    /// The attachment's tag ([`AttachmentId::prefix`]); empty in backups Go wrote.
    #[serde(
        rename = "rcniOwner",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub owner: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Backup {
    /// The current values of exactly the attributes `conf` changes, owned by `owner`.
    pub fn of(link: &Link, conf: &TuningConf, owner: &AttachmentId) -> Backup {
        Backup {
            owner: owner.prefix(),
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
            steps.push((
                "MTU",
                text(h.change_link(&LinkChange::of(index).mtu(self.mtu))),
            ));
        }
        if !self.mac.is_empty() {
            let r = match self.mac.parse::<MacAddr>() {
                Ok(mac) => text(h.change_link(&LinkChange::of(index).mac(mac))),
                Err(e) => Err(e.to_string()),
            };
            steps.push(("MAC address", r));
        }
        if let Some(on) = self.promisc {
            steps.push((
                "promiscuous mode",
                text(h.change_link(&LinkChange::of(index).promisc(on))),
            ));
        }
        if let Some(on) = self.allmulti {
            steps.push((
                "all-multicast mode",
                text(h.change_link(&LinkChange::of(index).allmulti(on))),
            ));
        }
        if let Some(len) = self.tx_qlen {
            steps.push((
                "transmit queue length",
                text(h.change_link(&LinkChange::of(index).txqlen(len))),
            ));
        }
        steps
            .into_iter()
            .filter_map(|(what, r)| r.err().map(|e| format!("failed to restore {what}: {e}")))
            .collect()
    }
}

/// The backup file of one attachment.
pub fn path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(cni_attribution::names::backup_file_name(
        container_id,
        ifname,
    ))
}

/// What the directory's checks call its files.
const WHAT: &str = "backup";

/// Creates `dir` (0700) when missing, then checks it (see [`state_file::check_dir`]).
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    state_file::ensure_dir(dir, WHAT)
}

/// `dir` must be a real directory of this user that group and others cannot write.
pub fn check_dir(dir: &Path) -> std::io::Result<()> {
    state_file::check_dir(dir, WHAT)
}

/// Writes the backup atomically through a random temp file of its owner (see
/// [`state_file::write`]).
pub fn write(file: &Path, backup: &Backup) -> std::io::Result<()> {
    // Go's layout: one-space indentation.
    let mut text = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut text, fmt);
    backup.serialize(&mut ser).map_err(std::io::Error::other)?;
    state_file::write(file, &backup.owner, &text, Existing::Replace, WHAT).map(drop)
}

/// What reading a backup file found.
#[derive(Debug)]
pub enum Saved {
    None,
    Backup(Backup),
    /// The file exists but cannot be read or does not decode.
    Unreadable(String),
}

/// Reads the backup `file` (not following a symlink, at most [`MAX_BACKUP_LEN`] bytes).
/// The caller has checked the directory.
pub fn read(file: &Path) -> Saved {
    match state_file::read(file, MAX_BACKUP_LEN) {
        Contents::Missing => Saved::None,
        Contents::Unreadable(e) => Saved::Unreadable(e),
        Contents::Bytes(bytes) => match serde_json::from_slice(&bytes) {
            Ok(b) => Saved::Backup(b),
            Err(e) => Saved::Unreadable(e.to_string()),
        },
    }
}

/// Removes the file; a missing one is fine.
pub fn remove(file: &Path) -> std::io::Result<()> {
    state_file::remove(file)
}

/// Removes the temp files a killed ADD of `owner` left in `dir`.
pub fn remove_temps(dir: &Path, owner: &AttachmentId) -> std::io::Result<()> {
    state_file::remove_temps(dir, &owner.prefix())
}

/// GC: removes the backups and temp files in `dir` that belong to `network` (by their
/// `rcniOwner` tag or temp name) but to no attachment in `valid`; returns the names removed.
/// Backups without a tag (written by Go) or that do not decode are not attributable and stay.
pub fn gc(dir: &Path, network: &str, valid: &[AttachmentId]) -> std::io::Result<Vec<String>> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        _ => check_dir(dir)?,
    }
    let net_prefix = AttachmentId::network_prefix(network);
    let keep: Vec<String> = valid.iter().map(|a| a.prefix()).collect();
    let stale = |owner: &str| owner.starts_with(&net_prefix) && !keep.iter().any(|k| k == owner);
    let mut removed = Vec::new();
    for name in state_file::entries(dir)? {
        let path = dir.join(&name);
        let owner = match state_file::temp_owner(&name) {
            Some(owner) => owner.to_string(),
            None if name.ends_with(".json") => match read(&path) {
                Saved::Backup(b) => b.owner,
                Saved::None | Saved::Unreadable(_) => continue,
            },
            None => continue,
        };
        if stale(&owner) {
            remove(&path)?;
            removed.push(name);
        }
    }
    Ok(removed)
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
            owner: String::new(),
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
        // Only the backup is left: the temp file was renamed.
        assert!(state_file::entries(file.parent().unwrap())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_owner_tag_is_an_extra_key_go_ignores() {
        let tag = AttachmentId::new("net", "cid", "eth0");
        let b = Backup {
            mtu: 1500,
            owner: tag.prefix(),
            ..Backup::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "cid", "eth0");
        write(&file, &b).unwrap();
        let text = fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\n \"mtu\": 1500,\n \"rcniOwner\": \"{}\"\n}}",
                tag.prefix()
            )
        );
        assert!(matches!(read(&file), Saved::Backup(r) if r == b));
    }

    #[test]
    fn unsafe_directories_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_dir(&open).unwrap_err();
        assert!(err.to_string().contains("lets other users write"), "{err}");
        let link = dir.path().join("link");
        let fine = dir.path().join("fine");
        ensure_dir(&fine).unwrap();
        std::os::unix::fs::symlink(&fine, &link).unwrap();
        let err = check_dir(&link).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        let file = path(&open, "cid", "eth0");
        assert!(write(&file, &Backup::default()).is_err());
        assert!(!file.exists());
    }
}
