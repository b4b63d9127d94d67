//! Reading JSON the way Go's `encoding/json` fills a struct, which is what configs in the wild
//! were written against: keys match case-insensitively (the last matching key wins), `null` leaves a
//! field unset, unknown keys are ignored, an IP field given as `""` is unset, a CIDR field given as
//! `""` is an error, and integers reject fractions and exponents.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value};

use crate::error::ConfigError;
use crate::ip;

/// A JSON object viewed as a Go struct. `path` names it in error messages (`ipam.ranges[0][1]`).
#[derive(Debug, Clone)]
pub(crate) struct GoObject<'a> {
    map: Option<&'a Map<String, Value>>,
    path: String,
}

impl<'a> GoObject<'a> {
    /// Views `value` as a struct. Absent or `null` is an empty struct; anything but an object is an error.
    pub(crate) fn new(
        value: Option<&'a Value>,
        path: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let path = path.into();
        match value {
            None | Some(Value::Null) => Ok(GoObject { map: None, path }),
            Some(Value::Object(map)) => Ok(GoObject {
                map: Some(map),
                path,
            }),
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
    pub(crate) fn get(&self, name: &str) -> Option<&'a Value> {
        let map = self.map?;
        map.iter()
            .rev()
            .find(|(key, _)| fold_eq(key, name))
            .map(|(_, value)| value)
            .filter(|value| !value.is_null())
    }

    /// A nested struct.
    pub(crate) fn object(&self, name: &str) -> Result<GoObject<'a>, ConfigError> {
        GoObject::new(self.get(name), self.path_of(name))
    }

    /// A string field.
    pub(crate) fn string(&self, name: &str) -> Result<Option<&'a str>, ConfigError> {
        self.get(name)
            .map(|value| as_str(value, &self.path_of(name)))
            .transpose()
    }

    /// A `net.IP` field: `""` is unset.
    pub(crate) fn ip(&self, name: &str) -> Result<Option<IpAddr>, ConfigError> {
        let field = self.path_of(name);
        match self.string(name)? {
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
                text.parse::<IpNet>().map_err(|_| ConfigError::InvalidCidr {
                    field,
                    value: text.to_string(),
                })
            })
            .transpose()
    }

    /// A Go `int` field (64-bit): whole numbers only.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, ConfigError> {
        let field = self.path_of(name);
        self.get(name)
            .map(|value| match value {
                Value::Number(number) => {
                    number.as_i64().ok_or_else(|| ConfigError::InvalidInteger {
                        field,
                        value: number.to_string(),
                    })
                }
                _ => Err(ConfigError::WrongType {
                    field,
                    expected: "an integer",
                }),
            })
            .transpose()
    }

    /// A slice field: absent or `null` is empty.
    pub(crate) fn list(&self, name: &str) -> Result<&'a [Value], ConfigError> {
        match self.get(name) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(_) => Err(ConfigError::WrongType {
                field: self.path_of(name),
                expected: "a list",
            }),
        }
    }
}

/// A JSON string, or a type error naming `field`.
pub(crate) fn as_str<'a>(value: &'a Value, field: &str) -> Result<&'a str, ConfigError> {
    value.as_str().ok_or_else(|| ConfigError::WrongType {
        field: field.to_string(),
        expected: "a string",
    })
}

/// A JSON list where `null` is empty, or a type error naming `field`.
pub(crate) fn as_list<'a>(value: &'a Value, field: &str) -> Result<&'a [Value], ConfigError> {
    match value {
        Value::Null => Ok(&[]),
        Value::Array(items) => Ok(items),
        _ => Err(ConfigError::WrongType {
            field: field.to_string(),
            expected: "a list",
        }),
    }
}

/// Case-insensitive key comparison, close to Go's `foldName` for the keys configs use.
fn fold_eq(key: &str, name: &str) -> bool {
    key.chars()
        .flat_map(char::to_lowercase)
        .eq(name.chars().flat_map(char::to_lowercase))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_match_ignoring_case_and_last_wins() {
        let value = json!({"Subnet": "10.0.0.0/8", "SUBNET": "10.1.0.0/16", "other": 1});
        let obj = GoObject::new(Some(&value), "ipam").unwrap();
        assert_eq!(
            obj.cidr("subnet").unwrap(),
            Some("10.1.0.0/16".parse().unwrap())
        );
        assert_eq!(obj.get("missing"), None);
    }

    #[test]
    fn null_is_unset_and_empty_ip_is_unset() {
        let value = json!({"gateway": "", "rangeStart": null});
        let obj = GoObject::new(Some(&value), "").unwrap();
        assert_eq!(obj.ip("gateway").unwrap(), None);
        assert_eq!(obj.ip("rangeStart").unwrap(), None);
    }

    #[test]
    fn empty_cidr_is_an_error() {
        let value = json!({"subnet": ""});
        let obj = GoObject::new(Some(&value), "ipam").unwrap();
        assert!(matches!(
            obj.cidr("subnet"),
            Err(ConfigError::InvalidCidr { field, .. }) if field == "ipam.subnet"
        ));
    }

    #[test]
    fn integers_reject_fractions_and_strings() {
        let value = json!({"a": 1.5, "b": "3", "c": 1e3, "d": -4});
        let obj = GoObject::new(Some(&value), "").unwrap();
        assert!(matches!(
            obj.int("a"),
            Err(ConfigError::InvalidInteger { .. })
        ));
        assert!(matches!(obj.int("b"), Err(ConfigError::WrongType { .. })));
        assert!(matches!(
            obj.int("c"),
            Err(ConfigError::InvalidInteger { .. })
        ));
        assert_eq!(obj.int("d").unwrap(), Some(-4));
    }

    #[test]
    fn non_objects_are_type_errors() {
        let value = json!("x");
        assert!(matches!(
            GoObject::new(Some(&value), "ipam"),
            Err(ConfigError::WrongType { .. })
        ));
    }
}
