//! A JSON object read the way Go's `encoding/json` fills a struct, which is what configs in the
//! wild were written against: the one typed reader of config sections, used by every plugin
//! and by `cni-ipam` (the top-level config is a [`crate::RawObject`], whose sections are
//! read through this). Keys follow the one rule of [`crate::go_decode`] (matched as Go folds
//! them, the last matching key wins, `null` leaves a field unset, every object given for a
//! section is merged); besides, unknown keys are ignored, an IP field given as `""` is unset,
//! a CIDR field given as `""` is an error, and integers reject fractions and exponents.
//!
//! Nothing is decoded into a value tree: an object is a list of (key, raw text) pairs borrowed
//! from the input, and only the fields a caller asks for are decoded. A value nothing reads is
//! checked for syntax only, so `1e400` or a 5-million-element array in an unknown key costs no
//! memory beyond the input.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::go_decode::{self, Member, SectionError};

/// Why a field cannot be read; `field` is its path (`ipam.ranges[0][1].subnet`).
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    #[error("field {field}: expected {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error("field {field}: invalid IP address {value:?}")]
    InvalidIp { field: String, value: String },
    #[error("field {field}: invalid CIDR address {value:?}")]
    InvalidCidr { field: String, value: String },
    #[error("field {field}: {value} is not an integer that fits")]
    InvalidInteger { field: String, value: String },
}

/// A JSON object viewed as a Go struct. `path` names it in error messages (`ipam.ranges[0][1]`).
#[derive(Debug, Clone)]
pub struct GoObject<'a> {
    /// Every member in input order, duplicates included; values are raw text.
    entries: Vec<Member<'a>>,
    path: String,
}

impl<'a> GoObject<'a> {
    /// The whole document: refused when nested deeper than Go allows or not valid JSON;
    /// anything but an object is a type error.
    pub fn document(bytes: &'a [u8]) -> Result<Self, FieldError> {
        go_decode::check_nesting(bytes).map_err(FieldError::Json)?;
        let raw: &'a RawValue = serde_json::from_slice(bytes).map_err(FieldError::Json)?;
        GoObject::new(Some(raw), "")
    }

    /// Views `value` as a struct. Absent or `null` is an empty struct; anything but an object is an error.
    pub fn new(value: Option<&'a RawValue>, path: impl Into<String>) -> Result<Self, FieldError> {
        let path = path.into();
        match value.filter(|raw| !is_null(raw)) {
            None => Ok(GoObject {
                entries: Vec::new(),
                path,
            }),
            Some(raw) if raw.get().starts_with('{') => {
                // The text is already known to be valid JSON, so this only splits it.
                let entries = go_decode::parse_members(raw.get()).map_err(FieldError::Json)?;
                Ok(GoObject { entries, path })
            }
            Some(_) => Err(FieldError::WrongType {
                field: path,
                expected: "an object",
            }),
        }
    }

    /// The section made of `members` (what [`go_decode::section_members`] gives), named `path`.
    pub fn from_members(members: Vec<Member<'a>>, path: impl Into<String>) -> Self {
        GoObject {
            entries: members,
            path: path.into(),
        }
    }

    /// The path of a member, for error messages.
    pub fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The value of field `name` (`go_decode::field_value`); `null` counts as absent.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        go_decode::field_value(&self.entries, name)
    }

    /// A nested struct: every object given for it, merged (`go_decode::section_members`).
    pub fn object(&self, name: &str) -> Result<GoObject<'a>, FieldError> {
        let path = self.path_of(name);
        match go_decode::section_members(&self.entries, name) {
            Ok(entries) => Ok(GoObject { entries, path }),
            Err(SectionError::NotAnObject(_)) => Err(FieldError::WrongType {
                field: path,
                expected: "an object",
            }),
            Err(SectionError::Json(e)) => Err(FieldError::Json(e)),
        }
    }

    /// A string field.
    pub fn string(&self, name: &str) -> Result<Option<String>, FieldError> {
        self.get(name)
            .map(|value| as_str(value, &self.path_of(name)))
            .transpose()
    }

    /// A `net.IP` field: `""` is unset.
    pub fn ip(&self, name: &str) -> Result<Option<IpAddr>, FieldError> {
        let field = self.path_of(name);
        match self.string(name)?.as_deref() {
            None | Some("") => Ok(None),
            // Go canonicalises an IPv4-mapped IPv6 address to IPv4.
            Some(text) => text
                .parse::<IpAddr>()
                .ok()
                .map(|ip| Some(ip.to_canonical()))
                .ok_or(FieldError::InvalidIp {
                    field,
                    value: text.to_string(),
                }),
        }
    }

    /// A `types.IPNet` field: the address keeps its host bits; `""` is an error.
    pub fn cidr(&self, name: &str) -> Result<Option<IpNet>, FieldError> {
        let field = self.path_of(name);
        self.string(name)?
            .map(|text| {
                text.parse::<IpNet>()
                    .map_err(|_| FieldError::InvalidCidr { field, value: text })
            })
            .transpose()
    }

    /// A Go `int` field (64-bit): whole numbers only.
    pub fn int(&self, name: &str) -> Result<Option<i64>, FieldError> {
        let field = self.path_of(name);
        self.get(name)
            .map(|value| {
                let text = value.get();
                if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                    return Err(FieldError::WrongType {
                        field,
                        expected: "an integer",
                    });
                }
                serde_json::from_str::<i64>(text).map_err(|_| FieldError::InvalidInteger {
                    field,
                    value: text.to_string(),
                })
            })
            .transpose()
    }

    /// Field `name` decoded as `T` (absent or `null`: `None`); objects assigned to it are
    /// decoded merged ([`go_decode::decode_field`]).
    pub fn decode<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, serde_json::Error> {
        let assigned = || {
            self.entries
                .iter()
                .filter(|(key, _)| go_decode::fold_eq(key, name))
                .map(|(_, value)| value.get())
                .collect()
        };
        go_decode::decode_field(self.get(name).map(RawValue::get), assigned)
    }

    /// A slice field: absent or `null` is empty.
    pub fn list(&self, name: &str) -> Result<Vec<&'a RawValue>, FieldError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(value) => as_list(value, &self.path_of(name)),
        }
    }
}

/// JSON `null`.
pub fn is_null(value: &RawValue) -> bool {
    go_decode::is_null(value.get())
}

/// A JSON string, or a type error naming `field`.
pub fn as_str(value: &RawValue, field: &str) -> Result<String, FieldError> {
    let wrong = || FieldError::WrongType {
        field: field.to_string(),
        expected: "a string",
    };
    if !value.get().starts_with('"') {
        return Err(wrong());
    }
    serde_json::from_str(value.get()).map_err(|_| wrong())
}

/// A JSON list where `null` is empty, or a type error naming `field`.
pub fn as_list<'a>(value: &'a RawValue, field: &str) -> Result<Vec<&'a RawValue>, FieldError> {
    let text = value.get();
    if is_null(value) {
        Ok(Vec::new())
    } else if text.starts_with('[') {
        serde_json::from_str(text).map_err(FieldError::Json)
    } else {
        Err(FieldError::WrongType {
            field: field.to_string(),
            expected: "a list",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> GoObject<'_> {
        GoObject::document(text.as_bytes()).unwrap()
    }

    #[test]
    fn keys_match_ignoring_case_and_last_wins() {
        // Go assigns every matching key in turn, so the last one wins even when an earlier
        // spelling repeats.
        let obj = doc(
            r#"{"Subnet": "198.18.0.0/15", "SUBNET": "198.18.144.0/20", "Subnet": "198.18.160.0/20", "other": 1}"#,
        );
        assert_eq!(
            obj.cidr("subnet").unwrap(),
            Some("198.18.160.0/20".parse().unwrap())
        );
        assert!(obj.get("missing").is_none());
        let escaped = doc(r#"{"sub\u006eet": "198.18.176.0/20"}"#);
        assert_eq!(
            escaped.cidr("subnet").unwrap(),
            Some("198.18.176.0/20".parse().unwrap())
        );
    }

    // Go decodes every object given for a struct into it: later keys win, earlier ones stay.
    #[test]
    fn repeated_sections_merge() {
        let obj = doc(
            r#"{"ipam": {"subnet": "198.18.0.0/15", "gateway": "198.18.0.1"}, "IPAM": {"Subnet": "198.18.144.0/20"}}"#,
        );
        let ipam = obj.object("ipam").unwrap();
        assert_eq!(
            ipam.cidr("subnet").unwrap(),
            Some("198.18.144.0/20".parse().unwrap())
        );
        assert_eq!(
            ipam.ip("gateway").unwrap(),
            Some("198.18.0.1".parse().unwrap())
        );
        let cleared = doc(r#"{"ipam": {"gateway": "198.18.0.1"}, "ipam": null}"#);
        assert_eq!(cleared.object("ipam").unwrap().ip("gateway").unwrap(), None);
        assert!(matches!(
            doc(r#"{"ipam": {}, "ipam": 5}"#).object("ipam"),
            Err(FieldError::WrongType { .. })
        ));
    }

    #[test]
    fn null_is_unset_and_empty_ip_is_unset() {
        let obj = doc(r#"{"gateway": "", "rangeStart": null}"#);
        assert_eq!(obj.ip("gateway").unwrap(), None);
        assert_eq!(obj.ip("rangeStart").unwrap(), None);
    }

    #[test]
    fn empty_cidr_is_an_error() {
        let obj = doc(r#"{"ipam": {"subnet": ""}}"#).object("ipam").unwrap();
        assert!(matches!(
            obj.cidr("subnet"),
            Err(FieldError::InvalidCidr { field, .. }) if field == "ipam.subnet"
        ));
    }

    #[test]
    fn integers_reject_fractions_and_strings() {
        let obj = doc(
            r#"{"a": 1.5, "b": "3", "c": 1e3, "d": -4, "e": 1e400, "f": 99999999999999999999}"#,
        );
        for name in ["a", "c", "e", "f"] {
            assert!(
                matches!(obj.int(name), Err(FieldError::InvalidInteger { .. })),
                "{name}"
            );
        }
        assert!(matches!(obj.int("b"), Err(FieldError::WrongType { .. })));
        assert_eq!(obj.int("d").unwrap(), Some(-4));
    }

    #[test]
    fn wrong_types_are_type_errors() {
        let obj = doc(r#"{"ipam": "x", "s": 5, "l": {}, "ip": true}"#);
        assert!(matches!(
            obj.object("ipam"),
            Err(FieldError::WrongType { .. })
        ));
        assert!(matches!(obj.string("s"), Err(FieldError::WrongType { .. })));
        assert!(matches!(obj.list("l"), Err(FieldError::WrongType { .. })));
        assert!(matches!(obj.ip("ip"), Err(FieldError::WrongType { .. })));
        assert!(matches!(
            GoObject::document(b"[1]"),
            Err(FieldError::WrongType { .. })
        ));
    }

    // Unread members are only checked for syntax; the nesting limit is Go's.
    #[test]
    fn unread_members_pass_and_depth_is_limited() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let text = format!(r#"{{"big": 1e400, "deep": {}, "name": "n"}}"#, deep(9_999));
        assert_eq!(doc(&text).string("name").unwrap().as_deref(), Some("n"));
        let text = format!(r#"{{"deep": {}}}"#, deep(10_000));
        assert!(matches!(
            GoObject::document(text.as_bytes()),
            Err(FieldError::Json(_))
        ));
        assert!(matches!(
            GoObject::document(br#"{"a": tru}"#),
            Err(FieldError::Json(_))
        ));
    }
}
