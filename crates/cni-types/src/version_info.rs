//! The VERSION result (SPEC.md, Section 5: "VERSION Success"; Go's `pkg/version/plugin.go`).

use serde::{Deserialize, Serialize};

use crate::version::SpecVersion;

/// `{"cniVersion": ..., "supportedVersions": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

/// Why a VERSION answer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionInfoError {
    #[error("decoding version info: {0}")]
    Decode(String),
    #[error("decoding version info: missing field cniVersion")]
    MissingVersion,
    #[error("decoding version info: missing field supportedVersions")]
    MissingSupported,
}

impl VersionInfo {
    pub fn new(cni_version: SpecVersion, supported: &[SpecVersion]) -> Self {
        VersionInfo {
            cni_version: cni_version.to_string(),
            supported_versions: supported.iter().map(ToString::to_string).collect(),
        }
    }

    /// Decodes a plugin's VERSION output with libcni's rules: a 0.2.0 answer without a list
    /// means 0.1.0 and 0.2.0.
    pub fn decode(bytes: &[u8]) -> Result<VersionInfo, VersionInfoError> {
        let mut info: VersionInfo =
            serde_json::from_slice(bytes).map_err(|e| VersionInfoError::Decode(e.to_string()))?;
        if info.cni_version.is_empty() {
            return Err(VersionInfoError::MissingVersion);
        }
        if info.supported_versions.is_empty() {
            if info.cni_version == "0.2.0" {
                info.supported_versions = vec!["0.1.0".into(), "0.2.0".into()];
            } else {
                return Err(VersionInfoError::MissingSupported);
            }
        }
        Ok(info)
    }

    /// What a plugin that does not know VERSION at all supports (libcni `GetVersionInfo`).
    pub fn legacy() -> VersionInfo {
        VersionInfo {
            cni_version: "0.1.0".into(),
            supported_versions: vec!["0.1.0".into()],
        }
    }

    pub fn supports(&self, v: &str) -> bool {
        self.supported_versions.iter().any(|s| s == v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Go's `PluginDecoder.Decode` rules.
    #[test]
    fn decode_rules() {
        let i = VersionInfo::decode(br#"{"cniVersion":"0.2.0"}"#).unwrap();
        assert_eq!(i.supported_versions, ["0.1.0", "0.2.0"]);
        assert!(VersionInfo::decode(br#"{"cniVersion":"1.0.0"}"#).is_err());
        assert!(VersionInfo::decode(br#"{"supportedVersions":["1.0.0"]}"#).is_err());
        let full = VersionInfo::new(SpecVersion::CURRENT, &SpecVersion::ALL);
        let back = VersionInfo::decode(serde_json::to_string(&full).unwrap().as_bytes()).unwrap();
        assert_eq!(back, full);
        assert!(back.supports("0.3.1"));
    }
}
