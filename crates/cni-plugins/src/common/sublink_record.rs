//! The record of a sub-link attachment (macvlan, ipvlan, vlan, dummy; bandwidth keeps the same
//! records for its IFB): which network, container, interface and namespace it is, one small
//! file per attachment in the plugin's state directory (`dataDir`, default [`DEFAULT_DIR`]).
//! Every call names what its caller's records are ([`SUBLINK`], bandwidth's own) for errors
//! and logs.
//!
//! A sub-link lives only inside the container's namespace, and GC gets no namespace: without
//! the record, a link a killed direct ADD left (no runtime cache entry, so no DEL) would be
//! out of every cleanup's reach but the namespace's end. ADD writes the record before it
//! creates the link (and removes it when it undoes), DEL removes it after the link, and GC
//! enters the recorded namespace of every attachment not in the valid list to delete the
//! links carrying that attachment's tag, then drops the record. The file name is the
//! attachment's tag (`<hash16(net)>-<hash16(ifname:cid)>.json`), so no value from the request
//! ever becomes a path; the files follow [`state_file`]'s rules.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use cni_attribution::AttachmentId;
use cni_plugin::CmdArgs;
use cni_types::{CniError, RawObject};

use super::conf::field;
use super::state_file::{self, Contents, Existing};

/// Where the records go when the config names no `dataDir`.
pub use cni_attribution::names::SUBLINK_RECORD_DIR as DEFAULT_DIR;

/// What the sub-link plugins' records are called in errors and logs.
pub const SUBLINK: &str = "sub-link record";

/// A record is a few hundred bytes; anything past this is not one.
const MAX_RECORD_LEN: u64 = 16 * 1024;

/// One attachment of a sub-link plugin, and where its container was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RecordFile", into = "RecordFile")]
pub struct Record {
    pub id: AttachmentId,
    /// The container's namespace path as ADD got it.
    pub netns: PathBuf,
}

/// A record as its file holds it.
#[derive(Clone, Serialize, Deserialize)]
struct RecordFile {
    network: String,
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
    /// JSON text: serde refuses a path that is not UTF-8 (the runner has refused it before).
    netns: PathBuf,
}

impl From<RecordFile> for Record {
    fn from(f: RecordFile) -> Record {
        Record {
            id: AttachmentId::new(f.network, f.container_id, f.ifname),
            netns: f.netns,
        }
    }
}

impl From<Record> for RecordFile {
    fn from(r: Record) -> RecordFile {
        RecordFile {
            network: r.id.network,
            container_id: r.id.container_id,
            ifname: r.id.ifname,
            netns: r.netns,
        }
    }
}

impl Record {
    pub fn of(args: &CmdArgs) -> Record {
        Record {
            id: args.id(),
            netns: args.netns.clone(),
        }
    }
}

/// The state directory: the config's `dataDir` (an rcni key; Go keeps no such state), else
/// [`DEFAULT_DIR`].
pub fn state_dir(raw: &RawObject) -> Result<PathBuf, CniError> {
    state_dir_or(raw, DEFAULT_DIR)
}

/// The config's `dataDir`, else `default` (for another plugin keeping such records).
pub fn state_dir_or(raw: &RawObject, default: &str) -> Result<PathBuf, CniError> {
    Ok(PathBuf::from(
        field::<String>(raw, "dataDir")?
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| default.to_string()),
    ))
}

fn path(dir: &Path, owner: &AttachmentId) -> PathBuf {
    dir.join(owner.record_file_name())
}

fn io_error(dir: &Path, what: &str, e: std::io::Error) -> CniError {
    CniError::io(format!("{what} in {}: {e}", dir.display()))
}

/// Writes `record` unless its attachment has one already (a live attachment's, which this
/// call must not take over); returns whether this call wrote it.
/// `what` names the records in errors ([`SUBLINK`], bandwidth's own).
pub fn write(dir: &Path, what: &str, record: &Record) -> Result<bool, CniError> {
    let tag = &record.id;
    let text = serde_json::to_vec(record).map_err(|e| CniError::internal(e.to_string()))?;
    state_file::write(&path(dir, tag), &tag.prefix(), &text, Existing::Keep, what)
        .map_err(|e| io_error(dir, &format!("failed to write the {what}"), e))
}

/// Removes the record of `owner` and any temp file a killed write of it left. A directory
/// that is not there has nothing to remove.
pub fn remove(dir: &Path, what: &str, owner: &AttachmentId) -> Result<(), CniError> {
    let fail = |e| io_error(dir, &format!("failed to remove the {what}"), e);
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        _ => state_file::check_dir(dir, what).map_err(fail)?,
    }
    state_file::remove_temps(dir, &owner.prefix()).map_err(fail)?;
    state_file::remove(&path(dir, owner)).map_err(fail)
}

/// GC, first half: the records of `network` whose attachment is not in `valid`. Temp files of
/// such attachments are removed at once; a record that cannot be read is left (and logged).
pub fn stale(
    dir: &Path,
    what: &str,
    network: &str,
    valid: &[AttachmentId],
) -> Result<Vec<Record>, CniError> {
    let fail = |e| io_error(dir, &format!("GC of {what}s"), e);
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        _ => state_file::check_dir(dir, what).map_err(fail)?,
    }
    let net_prefix = AttachmentId::network_prefix(network);
    let keep: Vec<String> = valid.iter().map(|a| a.prefix()).collect();
    let is_stale = |owner: &str| owner.starts_with(&net_prefix) && !keep.iter().any(|k| k == owner);
    let mut out = Vec::new();
    for name in state_file::entries(dir).map_err(fail)? {
        if let Some(owner) = state_file::temp_owner(&name) {
            if is_stale(&owner) {
                state_file::remove(&dir.join(&name)).map_err(fail)?;
            }
            continue;
        }
        let Some(owner) = name.strip_suffix(".json") else {
            continue;
        };
        if !is_stale(owner) {
            continue;
        }
        let record = match state_file::read(&dir.join(&name), MAX_RECORD_LEN) {
            Contents::Bytes(bytes) => serde_json::from_slice::<Record>(&bytes),
            Contents::Missing => continue,
            Contents::Unreadable(e) => {
                log::warn!("GC: {what} {name} left: {e}");
                continue;
            }
        };
        match record {
            // Only a record whose content is the attachment its name says is trusted.
            Ok(r) if r.id.prefix() == owner => out.push(r),
            Ok(_) => log::warn!("GC: {what} {name} left: its content is another's"),
            Err(e) => log::warn!("GC: {what} {name} left: {e}"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(cid: &str) -> Record {
        Record {
            id: AttachmentId::new("net", cid, "eth0"),
            netns: format!("/var/run/netns/{cid}").into(),
        }
    }

    #[test]
    fn the_file_keeps_its_layout() {
        let text = serde_json::to_string(&record("a")).unwrap();
        assert_eq!(
            text,
            r#"{"network":"net","containerID":"a","ifname":"eth0","netns":"/var/run/netns/a"}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), record("a"));
    }

    #[test]
    fn write_keeps_a_live_record_and_gc_selects_only_stale_ones() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("records");
        assert!(write(&dir, SUBLINK, &record("a")).unwrap());
        let mut other = record("a");
        other.netns = "/elsewhere".into();
        assert!(
            !write(&dir, SUBLINK, &other).unwrap(),
            "a live record is not replaced"
        );
        assert!(write(&dir, SUBLINK, &record("b")).unwrap());
        let foreign = Record {
            id: AttachmentId::new("other", "c", "eth0"),
            ..record("c")
        };
        assert!(write(&dir, SUBLINK, &foreign).unwrap());
        let valid = [AttachmentId::new("net", "b", "eth0")];
        assert_eq!(stale(&dir, SUBLINK, "net", &valid).unwrap(), [record("a")]);
        remove(&dir, SUBLINK, &record("a").id).unwrap();
        assert!(stale(&dir, SUBLINK, "net", &valid).unwrap().is_empty());
        remove(&dir, SUBLINK, &record("a").id).unwrap();
        assert!(stale(&dir.join("none"), SUBLINK, "net", &[])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_record_under_another_attachments_name_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write(dir.path(), SUBLINK, &record("a")).unwrap());
        let a = path(dir.path(), &record("a").id);
        let b = path(dir.path(), &record("b").id);
        std::fs::rename(&a, &b).unwrap();
        assert!(stale(dir.path(), SUBLINK, "net", &[]).unwrap().is_empty());
    }
}
