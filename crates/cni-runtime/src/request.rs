//! Building the request config a plugin reads on stdin (SPEC.md, Section 3: "Deriving request
//! configuration from plugin configuration"; libcni's `buildOneConfig` and `injectRuntimeConfig`).
//!
//! The plugin object is kept byte for byte ([`RawObject`]): its own keys, their order and their
//! numbers reach the plugin unchanged; only `name`, `cniVersion`, `prevResult`,
//! `runtimeConfig` and the GC keys are set.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use cni_attribution::AttachmentId;
use cni_types::gc::set_valid_attachments;
use cni_types::{RawObject, SpecVersion};

/// The capabilities a plugin object declares `true`, in name order.
pub fn declared_capabilities(plugin: &RawObject) -> Result<Vec<String>, serde_json::Error> {
    let caps = plugin
        .decode::<BTreeMap<String, bool>>("capabilities")?
        .unwrap_or_default();
    Ok(caps
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(k, _)| k)
        .collect())
}

/// `runtimeConfig` for a plugin: the capability args it declares `true` (SPEC.md, Section 3:
/// "Deriving `runtimeConfig`").
pub fn runtime_config(
    plugin: &RawObject,
    capability_args: &Map<String, Value>,
) -> Result<Map<String, Value>, serde_json::Error> {
    let declared = declared_capabilities(plugin)?;
    Ok(capability_args
        .iter()
        .filter(|(k, _)| declared.iter().any(|d| d == *k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// The request for ADD, DEL or CHECK. A non-empty derived `runtimeConfig` replaces a static
/// one as a whole; an empty one leaves the object alone (libcni's `injectRuntimeConfig`).
pub fn attachment_request(
    plugin: &RawObject,
    network: &str,
    version: SpecVersion,
    prev_result: Option<&Value>,
    capability_args: &Map<String, Value>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut obj = base(plugin, network, version)?;
    if let Some(prev) = prev_result {
        obj.set("prevResult", prev)?;
    }
    let rc = runtime_config(plugin, capability_args)?;
    if !rc.is_empty() {
        obj.set("runtimeConfig", &rc)?;
    }
    Ok(obj.to_bytes())
}

/// The request for STATUS: the plugin object with `name` and `cniVersion`.
pub fn status_request(
    plugin: &RawObject,
    network: &str,
    version: SpecVersion,
) -> Result<Vec<u8>, serde_json::Error> {
    Ok(base(plugin, network, version)?.to_bytes())
}

/// The request for GC: both the current and the legacy valid-attachments keys (as libcni's
/// `GCNetworkList`), always as an array (never `null`).
pub fn gc_request(
    plugin: &RawObject,
    network: &str,
    version: SpecVersion,
    valid: &[AttachmentId],
) -> Result<Vec<u8>, serde_json::Error> {
    let mut obj = base(plugin, network, version)?;
    set_valid_attachments(&mut obj, valid)?;
    Ok(obj.to_bytes())
}

fn base(
    plugin: &RawObject,
    network: &str,
    version: SpecVersion,
) -> Result<RawObject, serde_json::Error> {
    let mut obj = plugin.clone();
    obj.set("cniVersion", &version.to_string())?;
    obj.set("name", network)?;
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(s: &str) -> RawObject {
        RawObject::parse(s.as_bytes()).unwrap()
    }

    // Name and version override, other keys byte-faithful.
    #[test]
    fn keeps_plugin_bytes_and_overrides_name_and_version() {
        let p = plugin(
            r#"{"type":"bridge","name":"own","cniVersion":"0.1.0","mtu":12345678901234567890123,"f":1.50,"s":"<&>"}"#,
        );
        let req = attachment_request(&p, "net", SpecVersion::V1_1_0, None, &Map::new()).unwrap();
        assert_eq!(
            String::from_utf8(req).unwrap(),
            r#"{"type":"bridge","name":"net","cniVersion":"1.1.0","mtu":12345678901234567890123,"f":1.50,"s":"<&>"}"#
        );
    }

    // Only capabilities declared true and supplied; replaces a static value.
    #[test]
    fn runtime_config_from_declared_capabilities() {
        let caps = json!({"portMappings":[{"hostPort":8080}],"mac":"c2:11:22:33:44:55","ips":["198.18.0.5"]});
        let caps = caps.as_object().unwrap();
        let p = plugin(
            r#"{"type":"a","capabilities":{"portMappings":true,"mac":false,"bandwidth":true},"runtimeConfig":{"static":1}}"#,
        );
        let req = attachment_request(&p, "n", SpecVersion::V1_0_0, None, caps).unwrap();
        let v: Value = serde_json::from_slice(&req).unwrap();
        assert_eq!(
            v["runtimeConfig"],
            json!({"portMappings":[{"hostPort":8080}]})
        );
        assert_eq!(v["capabilities"]["mac"], false);
        // Nothing derived: a static runtimeConfig stays.
        let req = attachment_request(&p, "n", SpecVersion::V1_0_0, None, &Map::new()).unwrap();
        let v: Value = serde_json::from_slice(&req).unwrap();
        assert_eq!(v["runtimeConfig"], json!({"static":1}));
    }

    // GC keys: `cni.dev/valid-attachments` and the legacy `cni.dev/attachments`.
    #[test]
    fn gc_request_carries_both_keys() {
        let p = plugin(r#"{"type":"a"}"#);
        let valid = [AttachmentId::new("n", "c1", "eth0")];
        let v: Value =
            serde_json::from_slice(&gc_request(&p, "n", SpecVersion::V1_1_0, &valid).unwrap())
                .unwrap();
        let expect = json!([{"containerID":"c1","ifname":"eth0"}]);
        assert_eq!(v["cni.dev/valid-attachments"], expect);
        assert_eq!(v["cni.dev/attachments"], expect);
        let v: Value =
            serde_json::from_slice(&gc_request(&p, "n", SpecVersion::V1_1_0, &[]).unwrap())
                .unwrap();
        assert_eq!(v["cni.dev/valid-attachments"], json!([]));
        assert!(v.get("prevResult").is_none() && v.get("runtimeConfig").is_none());
    }
}
