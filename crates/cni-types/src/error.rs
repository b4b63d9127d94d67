//! The CNI error object (SPEC.md, Section 5: Result Types, "Error"; Go's `pkg/types/types.go`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::version::SpecVersion;

/// Well-known error codes. Plugins may use any code from 100 on.
pub mod code {
    /// Go-only: an error of unknown kind (libcni also uses it for unparsable plugin output).
    pub const UNKNOWN: u32 = 0;
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODING_FAILURE: u32 = 6;
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    /// Go-only: the netns is invalid (for example the plugin's own namespace).
    pub const INVALID_NETNS: u32 = 8;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADD.
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// STATUS: the plugin cannot serve ADD and existing attachments may be degraded.
    pub const PLUGIN_NOT_AVAILABLE_LIMITED: u32 = 51;
    /// Go-only: an untyped internal error.
    pub const INTERNAL: u32 = 999;
    /// First code free for plugin-specific use.
    pub const PLUGIN_SPECIFIC_MIN: u32 = 100;
}

/// A CNI error: what a plugin prints on stdout when it fails.
///
/// The wire form follows the spec (`cniVersion`, `code`, `msg`, `details`); the Go form without
/// `cniVersion` is accepted when decoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    #[serde(
        rename = "cniVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cni_version: Option<String>,
    #[serde(default)]
    pub code: u32,
    #[serde(default)]
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        CniError {
            cni_version: None,
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub fn incompatible_version(msg: impl Into<String>) -> Self {
        CniError::new(code::INCOMPATIBLE_VERSION, msg)
    }
    pub fn unsupported_field(msg: impl Into<String>) -> Self {
        CniError::new(code::UNSUPPORTED_FIELD, msg)
    }
    pub fn unknown_container(msg: impl Into<String>) -> Self {
        CniError::new(code::UNKNOWN_CONTAINER, msg)
    }
    pub fn invalid_environment(msg: impl Into<String>) -> Self {
        CniError::new(code::INVALID_ENVIRONMENT, msg)
    }
    pub fn io(msg: impl Into<String>) -> Self {
        CniError::new(code::IO_FAILURE, msg)
    }
    pub fn decoding(msg: impl Into<String>) -> Self {
        CniError::new(code::DECODING_FAILURE, msg)
    }
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        CniError::new(code::INVALID_NETWORK_CONFIG, msg)
    }
    pub fn invalid_netns(msg: impl Into<String>) -> Self {
        CniError::new(code::INVALID_NETNS, msg)
    }
    pub fn try_again_later(msg: impl Into<String>) -> Self {
        CniError::new(code::TRY_AGAIN_LATER, msg)
    }
    pub fn not_available(msg: impl Into<String>) -> Self {
        CniError::new(code::PLUGIN_NOT_AVAILABLE, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        CniError::new(code::INTERNAL, msg)
    }

    /// Renders the error as the JSON a plugin prints, stamped with the request's version.
    pub fn to_json(&self, version: SpecVersion) -> String {
        let mut e = self.clone();
        e.cni_version = Some(version.to_string());
        // Serializing a struct of strings and an integer cannot fail.
        serde_json::to_string_pretty(&e).unwrap_or_else(|_| String::from("{}"))
    }

    /// Decodes an error object from a plugin's stdout.
    pub fn from_json(bytes: &[u8]) -> Result<CniError, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl std::error::Error for CniError {}

#[cfg(test)]
mod tests {
    use super::*;

    // Emit cniVersion, accept both forms, drop empty details.
    #[test]
    fn wire_forms() {
        let e = CniError::invalid_config("Invalid Configuration").with_details("subnet too small");
        let v: serde_json::Value = serde_json::from_str(&e.to_json(SpecVersion::V1_1_0)).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0");
        assert_eq!(v["code"], 7);
        assert_eq!(v["details"], "subnet too small");

        let go = CniError::from_json(br#"{"code":4,"msg":"missing"}"#).unwrap();
        assert_eq!(go.code, code::INVALID_ENVIRONMENT);
        assert_eq!(go.cni_version, None);
        let plain = CniError::internal("boom").to_json(SpecVersion::V0_2_0);
        assert!(!plain.contains("details"));
        assert_eq!(CniError::internal("boom").code, 999);
    }

    // The code table.
    #[test]
    fn code_table() {
        assert_eq!(
            [
                code::INCOMPATIBLE_VERSION,
                code::UNSUPPORTED_FIELD,
                code::UNKNOWN_CONTAINER,
                code::INVALID_ENVIRONMENT,
                code::IO_FAILURE,
                code::DECODING_FAILURE,
                code::INVALID_NETWORK_CONFIG,
                code::INVALID_NETNS,
                code::TRY_AGAIN_LATER,
                code::PLUGIN_NOT_AVAILABLE,
                code::PLUGIN_NOT_AVAILABLE_LIMITED,
                code::INTERNAL
            ],
            [1, 2, 3, 4, 5, 6, 7, 8, 11, 50, 51, 999]
        );
    }
}
