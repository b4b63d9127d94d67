//! GC's valid-attachment list (SPEC.md, Section 2: "`GC`: Clean up any stale resources"; Go's
//! `GCAttachment` in `pkg/types/types.go`).

use serde::{Deserialize, Serialize};

use cni_attribution::AttachmentId;

use crate::raw::RawObject;

/// The key GC requests carry (spec `main`).
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The key of the `spec-v1.1.0` tag, still sent by libcni as a duplicate.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

/// One entry of the list as it travels (Go's `GCAttachment`): the network is the request's.
/// Note `containerID` here vs `containerId` in the cache.
#[derive(Serialize, Deserialize)]
struct Entry {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}

/// Reads the list under either key (the current one first), as attachments of `network` (the
/// request's). `None` when neither is present; JSON `null` reads as an empty list.
pub fn valid_attachments(
    conf: &RawObject,
    network: &str,
) -> Result<Option<Vec<AttachmentId>>, serde_json::Error> {
    for key in [VALID_ATTACHMENTS_KEY, LEGACY_ATTACHMENTS_KEY] {
        if let Some(raw) = conf.get(key) {
            let list: Option<Vec<Entry>> = serde_json::from_str(raw.get())?;
            let list = list.unwrap_or_default().into_iter();
            return Ok(Some(
                list.map(|e| AttachmentId::new(network, e.container_id, e.ifname))
                    .collect(),
            ));
        }
    }
    Ok(None)
}

/// Writes `valid` under both keys (as libcni's `GCNetworkList`), always as an array.
pub fn set_valid_attachments(
    conf: &mut RawObject,
    valid: &[AttachmentId],
) -> Result<(), serde_json::Error> {
    let list: Vec<Entry> = valid
        .iter()
        .map(|a| Entry {
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
        })
        .collect();
    conf.set(VALID_ATTACHMENTS_KEY, &list)?;
    conf.set(LEGACY_ATTACHMENTS_KEY, &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_keys() {
        let new = RawObject::parse(
            br#"{"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        let v = valid_attachments(&new, "n").unwrap().unwrap();
        assert_eq!(v, vec![AttachmentId::new("n", "c1", "eth0")]);
        let old = RawObject::parse(br#"{"cni.dev/attachments":null}"#).unwrap();
        assert_eq!(valid_attachments(&old, "n").unwrap(), Some(vec![]));
        assert_eq!(valid_attachments(&RawObject::new(), "n").unwrap(), None);
        let bad = RawObject::parse(br#"{"cni.dev/valid-attachments":5}"#).unwrap();
        assert!(valid_attachments(&bad, "n").is_err());
    }
}
