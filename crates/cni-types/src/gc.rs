//! GC's valid-attachment list (SPEC.md, Section 2: "`GC`: Clean up any stale resources"; Go's
//! `GCAttachment` in `pkg/types/types.go`).

use serde::{Deserialize, Serialize};

use crate::raw::RawObject;

/// The key GC requests carry (spec `main`).
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// The key of the `spec-v1.1.0` tag, still sent by libcni as a duplicate.
pub const LEGACY_ATTACHMENTS_KEY: &str = "cni.dev/attachments";

/// One attachment that is still valid. Note `containerID` here vs `containerId` in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// Reads the list under either key (the current one first). `None` when neither is present;
/// JSON `null` reads as an empty list.
pub fn valid_attachments(conf: &RawObject) -> Result<Option<Vec<GcAttachment>>, serde_json::Error> {
    for key in [VALID_ATTACHMENTS_KEY, LEGACY_ATTACHMENTS_KEY] {
        if let Some(raw) = conf.get(key) {
            let list: Option<Vec<GcAttachment>> = serde_json::from_str(raw.get())?;
            return Ok(Some(list.unwrap_or_default()));
        }
    }
    Ok(None)
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
        let v = valid_attachments(&new).unwrap().unwrap();
        assert_eq!(
            v,
            vec![GcAttachment {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }]
        );
        let old = RawObject::parse(br#"{"cni.dev/attachments":null}"#).unwrap();
        assert_eq!(valid_attachments(&old).unwrap(), Some(vec![]));
        assert_eq!(valid_attachments(&RawObject::new()).unwrap(), None);
        let bad = RawObject::parse(br#"{"cni.dev/valid-attachments":5}"#).unwrap();
        assert!(valid_attachments(&bad).is_err());
    }
}
