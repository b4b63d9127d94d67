//! Reading JSON the way Go's `encoding/json` fills a struct, which is what configs in the wild
//! were written against: keys match case-insensitively (the last matching key wins), `null` leaves a
//! field unset, unknown keys are ignored, an IP field given as `""` is unset, a CIDR field given as
//! `""` is an error, and integers reject fractions and exponents.
//!
//! Nothing is decoded into a value tree: an object is a list of (key, raw text) pairs borrowed
//! from the input, and only the fields a caller asks for are decoded. A value nothing reads is
//! checked for syntax only, so `1e400` or a 5-million-element array in an unknown key costs no
//! memory beyond the input (the decoding rule of `cni_types::raw`, shared by every plugin).

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::ConfigError;
use crate::ip;

/// A JSON object viewed as a Go struct. `path` names it in error messages (`ipam.ranges[0][1]`).
#[derive(Debug, Clone)]
pub(crate) struct GoObject<'a> {
    /// Every member in input order, duplicates included; values are raw text.
    entries: Vec<(Cow<'a, str>, &'a RawValue)>,
    path: String,
}

impl<'a> GoObject<'a> {
    /// The whole document: refused when nested deeper than Go allows or not valid JSON (code 6);
    /// anything but an object is a type error.
    pub(crate) fn document(bytes: &'a [u8]) -> Result<Self, ConfigError> {
        cni_types::raw::check_nesting(bytes).map_err(ConfigError::Json)?;
        let raw: &'a RawValue = serde_json::from_slice(bytes).map_err(ConfigError::Json)?;
        GoObject::new(Some(raw), "")
    }

    /// Views `value` as a struct. Absent or `null` is an empty struct; anything but an object is an error.
    pub(crate) fn new(
        value: Option<&'a RawValue>,
        path: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let path = path.into();
        match value.filter(|raw| !is_null(raw)) {
            None => Ok(GoObject {
                entries: Vec::new(),
                path,
            }),
            Some(raw) if raw.get().starts_with('{') => {
                // The text is already known to be valid JSON, so this only splits it.
                let Members(entries) =
                    serde_json::from_str(raw.get()).map_err(ConfigError::Json)?;
                Ok(GoObject { entries, path })
            }
            Some(_) => Err(ConfigError::WrongType {
                field: path,
                expected: "an object",
            }),
        }
    }

    /// The path of a member, for error messages.
    pub(crate) fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The value of field `name`: the last key equal to it ignoring case; `null` counts as absent.
    pub(crate) fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.entries
            .iter()
            .rev()
            .find(|(key, _)| fold_eq(key, name))
            .map(|&(_, value)| value)
            .filter(|value| !is_null(value))
    }

    /// A nested struct.
    pub(crate) fn object(&self, name: &str) -> Result<GoObject<'a>, ConfigError> {
        GoObject::new(self.get(name), self.path_of(name))
    }

    /// A string field.
    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, ConfigError> {
        self.get(name)
            .map(|value| as_str(value, &self.path_of(name)))
            .transpose()
    }

    /// A `net.IP` field: `""` is unset.
    pub(crate) fn ip(&self, name: &str) -> Result<Option<IpAddr>, ConfigError> {
        let field = self.path_of(name);
        match self.string(name)?.as_deref() {
            None | Some("") => Ok(None),
            Some(text) => ip::parse_ip(text).map(Some).ok_or(ConfigError::InvalidIp {
                field,
                value: text.to_string(),
            }),
        }
    }

    /// A `types.IPNet` field: the address keeps its host bits; `""` is an error.
    pub(crate) fn cidr(&self, name: &str) -> Result<Option<IpNet>, ConfigError> {
        let field = self.path_of(name);
        self.string(name)?
            .map(|text| {
                text.parse::<IpNet>()
                    .map_err(|_| ConfigError::InvalidCidr { field, value: text })
            })
            .transpose()
    }

    /// A Go `int` field (64-bit): whole numbers only.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, ConfigError> {
        let field = self.path_of(name);
        self.get(name)
            .map(|value| {
                let text = value.get();
                if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                    return Err(ConfigError::WrongType {
                        field,
                        expected: "an integer",
                    });
                }
                serde_json::from_str::<i64>(text).map_err(|_| ConfigError::InvalidInteger {
                    field,
                    value: text.to_string(),
                })
            })
            .transpose()
    }

    /// A slice field: absent or `null` is empty.
    pub(crate) fn list(&self, name: &str) -> Result<Vec<&'a RawValue>, ConfigError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(value) => as_list(value, &self.path_of(name)),
        }
    }
}

/// JSON `null`.
pub(crate) fn is_null(value: &RawValue) -> bool {
    value.get() == "null"
}

/// A JSON string, or a type error naming `field`.
pub(crate) fn as_str(value: &RawValue, field: &str) -> Result<String, ConfigError> {
    let wrong = || ConfigError::WrongType {
        field: field.to_string(),
        expected: "a string",
    };
    if !value.get().starts_with('"') {
        return Err(wrong());
    }
    serde_json::from_str(value.get()).map_err(|_| wrong())
}

/// A JSON list where `null` is empty, or a type error naming `field`.
pub(crate) fn as_list<'a>(
    value: &'a RawValue,
    field: &str,
) -> Result<Vec<&'a RawValue>, ConfigError> {
    let text = value.get();
    if is_null(value) {
        Ok(Vec::new())
    } else if text.starts_with('[') {
        serde_json::from_str(text).map_err(ConfigError::Json)
    } else {
        Err(ConfigError::WrongType {
            field: field.to_string(),
            expected: "a list",
        })
    }
}

/// Case-insensitive key comparison, close to Go's `foldName` for the keys configs use.
fn fold_eq(key: &str, name: &str) -> bool {
    key.chars()
        .flat_map(char::to_lowercase)
        .eq(name.chars().flat_map(char::to_lowercase))
}

/// An object's members in input order, keys borrowed unless they hold escapes.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut entries = Vec::new();
                while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    entries.push((key, value));
                }
                Ok(Members(entries))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// A member name, borrowed from the input when it can be.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
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
            Err(ConfigError::InvalidCidr { field, .. }) if field == "ipam.subnet"
        ));
    }

    #[test]
    fn integers_reject_fractions_and_strings() {
        let obj = doc(
            r#"{"a": 1.5, "b": "3", "c": 1e3, "d": -4, "e": 1e400, "f": 99999999999999999999}"#,
        );
        for name in ["a", "c", "e", "f"] {
            assert!(
                matches!(obj.int(name), Err(ConfigError::InvalidInteger { .. })),
                "{name}"
            );
        }
        assert!(matches!(obj.int("b"), Err(ConfigError::WrongType { .. })));
        assert_eq!(obj.int("d").unwrap(), Some(-4));
    }

    #[test]
    fn wrong_types_are_type_errors() {
        let obj = doc(r#"{"ipam": "x", "s": 5, "l": {}, "ip": true}"#);
        assert!(matches!(
            obj.object("ipam"),
            Err(ConfigError::WrongType { .. })
        ));
        assert!(matches!(
            obj.string("s"),
            Err(ConfigError::WrongType { .. })
        ));
        assert!(matches!(obj.list("l"), Err(ConfigError::WrongType { .. })));
        assert!(matches!(obj.ip("ip"), Err(ConfigError::WrongType { .. })));
        assert!(matches!(
            GoObject::document(b"[1]"),
            Err(ConfigError::WrongType { .. })
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
            Err(ConfigError::Json(_))
        ));
        assert!(matches!(
            GoObject::document(br#"{"a": tru}"#),
            Err(ConfigError::Json(_))
        ));
    }
}
