//! Network configuration (SPEC.md, Section 1: Network configuration format; libcni's
//! `libcni/conf.go`): the plugin's request config and the administrator's config list, each as
//! typed known keys over a byte-faithful [`RawObject`].

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::CniError;
use cni_attribution::AttachmentId;

use crate::gc;
use crate::names::validate_network_name;
use crate::raw::RawObject;
use crate::result::Dns;
use crate::version::{SpecVersion, VersionParseError};

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("error parsing configuration: {0}")]
    Json(#[from] serde_json::Error),
    #[error("error parsing configuration: invalid value for {key:?}: {reason}")]
    BadField { key: &'static str, reason: String },
    #[error("error parsing configuration: missing {0:?}")]
    Missing(&'static str),
    #[error("invalid version in configuration: {0}")]
    Version(#[from] VersionParseError),
    #[error("no plugins in list")]
    EmptyPlugins,
    #[error("loadOnlyInlinedPlugins is set but the list has no plugins")]
    InlineOnlyWithoutPlugins,
    #[error(
        "none of the configuration's versions {offered:?} is supported (supported: {supported})"
    )]
    NoSupportedVersion {
        offered: Vec<String>,
        supported: String,
    },
    #[error("{0}")]
    Invalid(CniError),
}

impl ConfigError {
    /// The CNI error a plugin prints for this problem: 6 for undecodable JSON, 7 otherwise.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            ConfigError::Json(e) => {
                CniError::decoding("error unmarshalling network config").with_details(e.to_string())
            }
            ConfigError::Invalid(e) => e.clone(),
            other => CniError::invalid_config(other.to_string()),
        }
    }
}

fn bad(key: &'static str, reason: impl ToString) -> ConfigError {
    ConfigError::BadField {
        key,
        reason: reason.to_string(),
    }
}

/// Reads an optional string key (exact key; null and absent are `None`).
fn opt_string(raw: &RawObject, key: &'static str) -> Result<Option<String>, ConfigError> {
    match raw.get(key).map(|r| serde_json::from_str::<Value>(r.get())) {
        None => Ok(None),
        Some(Ok(Value::Null)) => Ok(None),
        Some(Ok(Value::String(s))) => Ok(Some(s)),
        Some(Ok(_)) => Err(bad(key, "must be a string")),
        Some(Err(e)) => Err(e.into()),
    }
}

/// A bool that libcni also accepts as the string "true"/"false" in any case (libcni's
/// `NetworkConfFromBytes`).
fn lenient_bool(raw: &RawObject, key: &'static str) -> Result<bool, ConfigError> {
    match raw.get(key).map(|r| serde_json::from_str::<Value>(r.get())) {
        None => Ok(false),
        Some(Ok(Value::Bool(b))) => Ok(b),
        Some(Ok(Value::String(s))) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Ok(Value::String(s))) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(Ok(_)) => Err(bad(key, "must be a bool or \"true\"/\"false\"")),
        Some(Err(e)) => Err(e.into()),
    }
}

/// The `ipam` section's type.
#[derive(Debug, Clone, Default, Deserialize)]
struct IpamType {
    #[serde(rename = "type", default)]
    ipam_type: String,
}

/// The request config a plugin reads on stdin (SPEC.md, Section 3: "Deriving request configuration
/// from plugin configuration").
#[derive(Debug, Clone)]
pub struct NetConf {
    /// As written; empty means 0.1.0.
    pub cni_version: String,
    pub name: String,
    pub plugin_type: String,
    pub capabilities: BTreeMap<String, bool>,
    /// `ipam.type`, empty when there is no IPAM section.
    pub ipam_type: String,
    pub dns: Dns,
    pub prev_result: Option<Value>,
    /// GC only: `cni.dev/valid-attachments` (or the legacy key).
    /// Attachments of this network (`name`).
    pub valid_attachments: Option<Vec<AttachmentId>>,
    /// Every key, values byte for byte.
    pub raw: RawObject,
}

impl NetConf {
    /// Parses and checks the keys every plugin relies on; `name` must be present and valid.
    pub fn parse(bytes: &[u8]) -> Result<NetConf, ConfigError> {
        let raw = RawObject::parse(bytes)?;
        let name = opt_string(&raw, "name")?.unwrap_or_default();
        validate_network_name(&name).map_err(ConfigError::Invalid)?;
        let cni_version = opt_string(&raw, "cniVersion")?.unwrap_or_default();
        let plugin_type = opt_string(&raw, "type")?.unwrap_or_default();
        let capabilities = raw
            .decode::<BTreeMap<String, bool>>("capabilities")
            .map_err(|e| bad("capabilities", e))?
            .unwrap_or_default();
        let ipam_type = raw
            .decode::<IpamType>("ipam")
            .map_err(|e| bad("ipam", e))?
            .unwrap_or_default()
            .ipam_type;
        let dns = raw
            .decode::<Dns>("dns")
            .map_err(|e| bad("dns", e))?
            .unwrap_or_default();
        // `runtimeConfig` and `args` stay raw: each plugin decodes only the keys it knows,
        // typed (`runtime_key`, `RawObject::decode_path`), as Go's structs do.
        let prev_result = raw
            .decode::<Value>("prevResult")
            .map_err(|e| bad("prevResult", e))?;
        let valid_attachments =
            gc::valid_attachments(&raw, &name).map_err(|e| bad("cni.dev/valid-attachments", e))?;
        Ok(NetConf {
            cni_version,
            name,
            plugin_type,
            capabilities,
            ipam_type,
            dns,
            prev_result,
            valid_attachments,
            raw,
        })
    }

    /// The version the config asks for (empty is 0.1.0).
    pub fn version(&self) -> Result<SpecVersion, VersionParseError> {
        SpecVersion::parse(&self.cni_version)
    }

    /// `runtimeConfig.<key>` (keys matched as Go matches struct fields), decoded as `T`;
    /// absent, `null`, or a `runtimeConfig` that is not an object is `None`. Nothing else of
    /// `runtimeConfig` is decoded, so an unknown key there is never held as a value tree.
    pub fn runtime_key<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ConfigError> {
        self.raw
            .decode_path(&["runtimeConfig", key])
            .map_err(|e| ConfigError::BadField {
                key: "runtimeConfig",
                reason: format!("{key}: {e}"),
            })
    }

    /// `runtimeConfig.<key>` as a JSON value, if present. Only that key is decoded; a value
    /// serde_json cannot hold (a number beyond f64) comes back as its raw text in a string, so
    /// a plugin that wants another type refuses it. Prefer [`NetConf::runtime_key`].
    pub fn runtime_value(&self, key: &str) -> Option<Value> {
        let raw = self
            .raw
            .decode_path::<Box<RawValue>>(&["runtimeConfig", key])
            .ok()??;
        Some(serde_json::from_str(raw.get()).unwrap_or_else(|_| Value::String(raw.get().into())))
    }

    /// `args.cni.<key>`, decoded as `T` (CONVENTIONS.md, "args" in network config); as
    /// [`NetConf::runtime_key`].
    pub fn cni_arg<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ConfigError> {
        self.raw
            .decode_path(&["args", "cni", key])
            .map_err(|e| ConfigError::BadField {
                key: "args",
                reason: format!("cni.{key}: {e}"),
            })
    }
}

/// An administrator's network config list (`.conflist`), as libcni loads it.
#[derive(Debug, Clone)]
pub struct NetConfList {
    pub name: String,
    pub cni_version: String,
    pub cni_versions: Vec<String>,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub load_only_inlined_plugins: bool,
    /// The plugin objects, each byte-faithful.
    pub plugins: Vec<RawObject>,
    /// Whether a `plugins` key was present at all.
    pub has_plugins_key: bool,
    /// The original bytes (what the result cache stores as `config`).
    pub bytes: Vec<u8>,
}

impl NetConfList {
    /// Parses a list config (as libcni's `NetworkConfFromBytes`). Sub-directory plugins are the
    /// runtime's job.
    pub fn parse(bytes: &[u8]) -> Result<NetConfList, ConfigError> {
        let raw = RawObject::parse(bytes)?;
        let name = opt_string(&raw, "name")?.ok_or(ConfigError::Missing("name"))?;
        let cni_version = opt_string(&raw, "cniVersion")?.unwrap_or_default();
        let cni_versions: Vec<String> = raw
            .decode::<Vec<String>>("cniVersions")
            .map_err(|e| bad("cniVersions", e))?
            .unwrap_or_default();
        for v in &cni_versions {
            SpecVersion::parse(v)?;
        }
        let load_only_inlined_plugins = lenient_bool(&raw, "loadOnlyInlinedPlugins")?;
        let (plugins, has_plugins_key) = match raw.get("plugins") {
            None => (Vec::new(), false),
            Some(r) => {
                let list: Vec<RawObject> =
                    serde_json::from_str(r.get()).map_err(|e| bad("plugins", e))?;
                if list.is_empty() {
                    return Err(ConfigError::EmptyPlugins);
                }
                (list, true)
            }
        };
        if load_only_inlined_plugins && !has_plugins_key {
            return Err(ConfigError::InlineOnlyWithoutPlugins);
        }
        for p in &plugins {
            match opt_string(p, "type")? {
                Some(t) if !t.is_empty() => {}
                _ => return Err(ConfigError::Missing("type")),
            }
        }
        Ok(NetConfList {
            name,
            cni_version,
            cni_versions,
            disable_check: lenient_bool(&raw, "disableCheck")?,
            disable_gc: lenient_bool(&raw, "disableGC")?,
            load_only_inlined_plugins,
            plugins,
            has_plugins_key,
            bytes: bytes.to_vec(),
        })
    }

    /// Wraps a legacy single-plugin `.conf` as a list (as libcni's `ConfListFromConf`).
    pub fn from_single_plugin(bytes: &[u8]) -> Result<NetConfList, ConfigError> {
        let plugin = RawObject::parse(bytes)?;
        match opt_string(&plugin, "type")? {
            Some(t) if !t.is_empty() => {}
            _ => return Err(ConfigError::Missing("type")),
        }
        let name = opt_string(&plugin, "name")?.ok_or(ConfigError::Missing("name"))?;
        let cni_version = opt_string(&plugin, "cniVersion")?.unwrap_or_default();
        let mut wrapper = RawObject::new();
        wrapper.set("cniVersion", &cni_version)?;
        wrapper.set("name", &name)?;
        wrapper.set("plugins", &[&plugin])?;
        Ok(NetConfList {
            name,
            cni_version,
            cni_versions: Vec::new(),
            disable_check: false,
            disable_gc: false,
            load_only_inlined_plugins: false,
            plugins: vec![plugin],
            has_plugins_key: true,
            bytes: wrapper.to_bytes(),
        })
    }

    /// The version to run the list at: the highest of `cniVersion` ∪ `cniVersions` that this
    /// implementation supports. Unlike libcni, an unsupported lone version is an error here
    /// rather than something every plugin would reject later.
    pub fn select_version(&self) -> Result<SpecVersion, ConfigError> {
        let mut offered: Vec<String> = self.cni_versions.clone();
        if !self.cni_version.is_empty() || offered.is_empty() {
            offered.push(self.cni_version.clone());
        }
        let best = offered
            .iter()
            .filter_map(|v| SpecVersion::parse(v).ok())
            .filter(|v| v.is_known())
            .max();
        best.ok_or_else(|| ConfigError::NoSupportedVersion {
            offered,
            supported: crate::version::go_list(&SpecVersion::ALL),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netconf_known_keys_and_passthrough() {
        let src = br#"{"cniVersion":"1.1.0","name":"dbnet","type":"bridge","bridge":"cni0","mtu":123456789012345678901,
            "RuntimeConfig":{"mac":"00:11:22:33:44:55"},"ipam":{"type":"host-local","subnet":"198.18.0.0/16"},
            "dns":{"nameservers":["198.18.1.1"]},"capabilities":{"mac":true},"args":{"cni":{"ips":["198.18.1.9"]}},
            "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#;
        let c = NetConf::parse(src).unwrap();
        assert_eq!(c.version().unwrap(), SpecVersion::V1_1_0);
        assert_eq!(c.plugin_type, "bridge");
        assert_eq!(c.ipam_type, "host-local");
        assert_eq!(c.dns.nameservers, ["198.18.1.1"]);
        assert_eq!(c.runtime_value("mac").unwrap(), "00:11:22:33:44:55");
        assert_eq!(
            c.runtime_key::<String>("MAC").unwrap().unwrap(),
            "00:11:22:33:44:55"
        );
        assert_eq!(
            c.cni_arg::<Vec<String>>("ips").unwrap().unwrap(),
            ["198.18.1.9"]
        );
        assert_eq!(c.capabilities.get("mac"), Some(&true));
        assert_eq!(c.valid_attachments.as_ref().unwrap().len(), 1);
        assert_eq!(c.raw.get("mtu").unwrap().get(), "123456789012345678901");
    }

    // runtimeConfig and args follow the one decoding rule: only known keys are decoded, typed;
    // an unknown key beside them (1e400, deep nesting) is never decoded. Before: both were
    // decoded as value trees when the config was read, so 1e400 there was code 7 everywhere.
    #[test]
    fn runtime_config_and_args_decode_only_known_keys() {
        let deep = format!("{}{}", "[".repeat(9_000), "]".repeat(9_000));
        let src = format!(
            r#"{{"name":"n","runtimeConfig":{{"x":1e400,"d":{deep},"mac":"02:00:00:00:00:01"}},
                "args":{{"cni":{{"y":-1e999,"ips":["198.18.1.9"]}},"z":1e400}}}}"#
        );
        let c = NetConf::parse(src.as_bytes()).unwrap();
        assert_eq!(
            c.runtime_key::<String>("mac").unwrap().as_deref(),
            Some("02:00:00:00:00:01")
        );
        assert_eq!(c.runtime_key::<String>("absent").unwrap(), None);
        assert_eq!(
            c.cni_arg::<Vec<String>>("ips").unwrap().unwrap(),
            ["198.18.1.9"]
        );
        // A known key of the wrong type is refused; an unreadable unknown one only if read.
        assert!(c.runtime_key::<u32>("mac").is_err());
        assert_eq!(c.runtime_value("x").unwrap(), "1e400");
        let not_object = NetConf::parse(br#"{"name":"n","runtimeConfig":"x","args":5}"#).unwrap();
        assert_eq!(not_object.runtime_key::<String>("mac").unwrap(), None);
        assert_eq!(not_object.cni_arg::<String>("mac").unwrap(), None);
    }

    // Bad JSON is 6, a missing or bad name is 7.
    #[test]
    fn netconf_errors() {
        let e = NetConf::parse(b"{not json").unwrap_err().to_cni_error();
        assert_eq!(e.code, 6);
        let e = NetConf::parse(br#"{"cniVersion":"1.1.0","type":"p"}"#)
            .unwrap_err()
            .to_cni_error();
        assert_eq!(e.code, 7);
        let e = NetConf::parse(br#"{"name":"../x"}"#)
            .unwrap_err()
            .to_cni_error();
        assert_eq!(e.code, 7);
        let e = NetConf::parse(br#"{"name":5}"#).unwrap_err().to_cni_error();
        assert_eq!(e.code, 7);
        assert_eq!(
            NetConf::parse(br#"{"name":"n"}"#)
                .unwrap()
                .version()
                .unwrap(),
            SpecVersion::V0_1_0
        );
    }

    // Version selection from `cniVersion` and `cniVersions`, as libcni does it.
    #[test]
    fn list_version_selection() {
        let l = NetConfList::parse(
            br#"{"name":"n","cniVersion":"0.3.1","cniVersions":["0.4.0","1.0.0","99.0.0"],"plugins":[{"type":"p"}]}"#,
        )
        .unwrap();
        assert_eq!(l.select_version().unwrap(), SpecVersion::V1_0_0);
        assert!(NetConfList::parse(
            br#"{"name":"n","cniVersions":["1.0.f"],"plugins":[{"type":"p"}]}"#
        )
        .is_err());
        let lone =
            NetConfList::parse(br#"{"name":"n","cniVersion":"1.2.3","plugins":[{"type":"p"}]}"#)
                .unwrap();
        assert!(lone.select_version().is_err());
        let none = NetConfList::parse(br#"{"name":"n","plugins":[{"type":"p"}]}"#).unwrap();
        assert_eq!(none.select_version().unwrap(), SpecVersion::V0_1_0);
    }

    // Flags, plugins rules.
    #[test]
    fn list_rules() {
        let l = NetConfList::parse(
            br#"{"name":"n","cniVersion":"1.1.0","disableCheck":"TRUE","disableGC":true,"plugins":[{"type":"a","x":1},{"type":"b"}]}"#,
        )
        .unwrap();
        assert!(l.disable_check && l.disable_gc && !l.load_only_inlined_plugins);
        assert_eq!(l.plugins[0].to_bytes(), br#"{"type":"a","x":1}"#.to_vec());
        assert!(matches!(
            NetConfList::parse(br#"{"name":"n","plugins":[]}"#),
            Err(ConfigError::EmptyPlugins)
        ));
        assert!(NetConfList::parse(br#"{"name":"n","plugins":{}}"#).is_err());
        assert!(NetConfList::parse(
            br#"{"name":"n","disableCheck":"yes","plugins":[{"type":"a"}]}"#
        )
        .is_err());
        assert!(NetConfList::parse(br#"{"name":"n","loadOnlyInlinedPlugins":true}"#).is_err());
        assert!(NetConfList::parse(br#"{"name":"n","plugins":[{"notype":1}]}"#).is_err());
        let sub = NetConfList::parse(br#"{"name":"n"}"#).unwrap();
        assert!(!sub.has_plugins_key && sub.plugins.is_empty());
    }

    // Legacy single-plugin files.
    #[test]
    fn single_plugin_wrap() {
        let l = NetConfList::from_single_plugin(
            br#"{"cniVersion":"0.2.0","name":"b","type":"bridge","big":1e400}"#,
        )
        .unwrap();
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(
            String::from_utf8(l.bytes.clone()).unwrap(),
            r#"{"cniVersion":"0.2.0","name":"b","plugins":[{"cniVersion":"0.2.0","name":"b","type":"bridge","big":1e400}]}"#
        );
        assert!(NetConfList::from_single_plugin(br#"{"name":"b"}"#).is_err());
    }
}
