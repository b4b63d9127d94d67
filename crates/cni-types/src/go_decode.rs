//! The one rule by which rcni reads a config key, modelled on how Go's `encoding/json` fills
//! a struct field (configs in the wild were written against the Go plugins).
//!
//! What Go does, measured with Go 1.19 by `tests/go_json/` (its output is the expected table
//! of `tests/go_json.rs`):
//!
//! 1. **Matching.** A member's key selects a field by exact name, else the first field whose
//!    name it equals under Go's folding: ASCII letters ignore case, the Kelvin sign `K`
//!    (U+212A) folds to `k` and the long s `ſ` (U+017F) to `s`; nothing else folds. Keys are
//!    compared after unescaping. No rcni struct has two fields whose names fold alike, so a
//!    field receives exactly the members whose keys fold to its name ([`fold_eq`]).
//! 2. **Order.** Members are assigned in input order, each overwriting the last: the last
//!    matching member wins, whatever its spelling (`{"mtu":1,"MTU":2,"mtu":3}` is 3).
//! 3. **`null`.** A pointer, slice or map field is cleared by `null`; any other field keeps
//!    what an earlier member gave it.
//! 4. **Objects merge.** An object assigned to a struct field, or to a pointer or map field
//!    that is set, is merged into it key by key under the same rules
//!    (`{"sub":{"a":1},"SUB":{"b":2}}` gives `a` and `b`); arrays replace.
//! 5. **Depth.** A document nested deeper than [`MAX_NESTING_DEPTH`] is refused before
//!    anything is decoded ([`check_nesting`]), as Go's scanner refuses it.
//!
//! rcni reads every optional field as Go reads a pointer field: an `Option` is `None` after a
//! trailing `null` ([`field_value`]), and a nested section starts afresh after a `null`
//! ([`section_members`]). For Go's non-pointer fields that is the one difference: Go keeps the
//! value from before the `null` (`{"mtu":1,"mtu":null}` is 1 in Go, unset in rcni).
//!
//! [`crate::RawObject`] (every plugin's top-level config) and [`crate::GoObject`] (a section of
//! it, and `cni-ipam`'s config) both decode through these functions.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The deepest nesting of arrays and objects a document may have, counting the outermost value:
/// Go's `encoding/json` limit, so a config is refused by both implementations or by neither.
pub const MAX_NESTING_DEPTH: usize = 10_000;

/// Refuses a document nested deeper than [`MAX_NESTING_DEPTH`]. Only brackets outside strings
/// count; the syntax itself is left to the decoder. Linear in the input, no allocation.
pub fn check_nesting(bytes: &[u8]) -> Result<(), serde_json::Error> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING_DEPTH {
                    return Err(serde::de::Error::custom(format!(
                        "exceeded max depth: nested deeper than {MAX_NESTING_DEPTH}"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// One member of a JSON object: the unescaped key and the value's raw text.
pub type Member<'a> = (Cow<'a, str>, &'a RawValue);

/// A character as Go's key folding sees it: ASCII letters lowercased, the Kelvin sign as `k`
/// and the long s as `s`, everything else unchanged.
pub fn fold_char(c: char) -> char {
    match c {
        '\u{212A}' => 'k',
        '\u{017F}' => 's',
        c => c.to_ascii_lowercase(),
    }
}

/// Whether the member key `key` fills the field named `name` (rule 1).
pub fn fold_eq(key: &str, name: &str) -> bool {
    key.chars().map(fold_char).eq(name.chars().map(fold_char))
}

/// JSON `null`.
pub fn is_null(value: &str) -> bool {
    value == "null"
}

/// The value a pointer field holds after the values assigned to it, in input order, were
/// assigned (rules 2 and 3): the last one, `None` when it is `null`.
pub fn last_assigned<'a>(assigned: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    assigned.into_iter().last().filter(|v| !is_null(v))
}

/// The value of field `name` among `members` (rules 1 to 3).
pub fn field_value<'a>(members: &[Member<'a>], name: &str) -> Option<&'a RawValue> {
    members
        .iter()
        .rev()
        .find(|(key, _)| fold_eq(key, name))
        .map(|&(_, value)| value)
        .filter(|value| !is_null(value.get()))
}

/// A value assigned to a struct field that is not an object (Go's type error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAnObject(pub String);

impl fmt::Display for NotAnObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected an object, got {}", self.0)
    }
}

impl std::error::Error for NotAnObject {}

/// The objects merged into a pointer-to-struct field, from the values assigned to it in input
/// order (rules 3 and 4): those after the last `null`. Empty when the field stays unset.
pub fn merged_objects<'a>(
    assigned: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<&'a str>, NotAnObject> {
    let mut objects = Vec::new();
    for value in assigned {
        if is_null(value) {
            objects.clear();
        } else if value.starts_with('{') {
            objects.push(value);
        } else {
            return Err(NotAnObject(value.to_string()));
        }
    }
    Ok(objects)
}

/// One object holding what Go leaves in a struct field after `objects` were assigned to it in
/// turn (rule 4): every exact key once, in the order of its last value, and for a key given
/// objects more than once their merge, recursively; so a reader that folds keys still finds
/// the spelling assigned last. (A map field merges its keys the same way; Go would replace,
/// not merge, an object held as a map value.) One object is returned as it is.
pub fn merge_objects(objects: &[&str]) -> Result<String, serde_json::Error> {
    if let [only] = objects {
        return Ok((*only).to_string());
    }
    let mut members = Vec::new();
    for object in objects {
        members.extend(parse_members(object)?);
    }
    let mut values: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut last: HashMap<&str, usize> = HashMap::new();
    for (i, (key, value)) in members.iter().enumerate() {
        values.entry(key.as_ref()).or_default().push(value.get());
        last.insert(key.as_ref(), i);
    }
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if last.get(key.as_ref()) != Some(&i) {
            continue;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key.as_ref())?);
        out.push(':');
        let given = values.get(key.as_ref()).map_or(&[][..], Vec::as_slice);
        match merged_objects(given.iter().copied()) {
            Ok(nested) if nested.len() > 1 => out.push_str(&merge_objects(&nested)?),
            _ => out.push_str(value.get()),
        }
    }
    out.push('}');
    Ok(out)
}

/// Decodes a field whose value is `last`, the value assigned to it last (`None`: never
/// assigned): `null` is `None`; an object is decoded merged with the other objects assigned
/// to the field since its last `null` (rule 4; `assigned` lists every value assigned to the
/// field in input order and is only asked for then); anything else is decoded as it is.
pub fn decode_field<'a, T: DeserializeOwned>(
    last: Option<&'a str>,
    assigned: impl FnOnce() -> Vec<&'a str>,
) -> Result<Option<T>, serde_json::Error> {
    match last {
        None => Ok(None),
        Some(value) if is_null(value) => Ok(None),
        Some(value) if value.starts_with('{') => {
            let objects = merged_objects(assigned()).map_err(serde::de::Error::custom)?;
            let merged = merge_objects(&objects)?;
            serde_json::from_str(&merged).map(Some)
        }
        Some(value) => serde_json::from_str(value).map(Some),
    }
}

/// The members of the nested struct field `name` of `members`: every object assigned to it
/// (see [`merged_objects`]), their members one after the other, so a lookup in the result
/// follows the same rules. Empty when the field is absent or ends `null`.
pub fn section_members<'a>(
    members: &[Member<'a>],
    name: &str,
) -> Result<Vec<Member<'a>>, SectionError> {
    let assigned = members
        .iter()
        .filter(|(key, _)| fold_eq(key, name))
        .map(|(_, value)| value.get());
    let mut out = Vec::new();
    for object in merged_objects(assigned)? {
        out.extend(parse_members(object)?);
    }
    Ok(out)
}

/// Why a nested section cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    #[error(transparent)]
    NotAnObject(#[from] NotAnObject),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The members of the JSON object `text`, in input order with duplicates kept; keys are
/// borrowed unless they hold escapes, values are raw text, so nothing is decoded.
pub fn parse_members(text: &str) -> Result<Vec<Member<'_>>, serde_json::Error> {
    let Members(members) = serde_json::from_str(text)?;
    Ok(members)
}

/// An object's members in input order.
struct Members<'a>(Vec<Member<'a>>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some((KeyText(key), value)) =
                    map.next_entry::<KeyText<'de>, &'de RawValue>()?
                {
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// An object key, borrowed from the input when it has no escapes.
pub(crate) struct KeyText<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<KeyText<'de>, E> {
                Ok(KeyText(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_is_gos() {
        assert!(fold_eq("RuntimeConfig", "runtimeConfig"));
        assert!(fold_eq("\u{212A}ind", "kind"));
        assert!(fold_eq("\u{017F}ub", "SUB"));
        assert!(!fold_eq("mtu\u{212A}", "mtu"));
        // Only letters fold: '@' and '`' differ from '[' and '{' by the case bit alone.
        assert!(!fold_eq("a@", "a`"));
    }

    #[test]
    fn merged_objects_merge_nested_sections() {
        let merged = merge_objects(&[
            r#"{"cni":{"a":1},"x":1}"#,
            r#"{"cni":{"b":2},"x":[2]}"#,
            r#"{"CNI":{"a":3},"y":null}"#,
        ])
        .unwrap();
        assert_eq!(
            merged,
            r#"{"cni":{"a":1,"b":2},"x":[2],"CNI":{"a":3},"y":null}"#
        );
    }

    #[test]
    fn sections_merge_and_restart_after_null() {
        let members =
            parse_members(r#"{"sub":{"a":1},"SUB":{"b":2},"x":3,"Sub":null,"sub":{"c":4}}"#)
                .unwrap();
        let merged = section_members(&members, "sub").unwrap();
        let keys: Vec<&str> = merged.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["c"]);
        let members = parse_members(r#"{"sub":{"a":1},"SUB":{"a":2,"b":2}}"#).unwrap();
        let merged = section_members(&members, "sub").unwrap();
        assert_eq!(field_value(&merged, "a").unwrap().get(), "2");
        assert_eq!(field_value(&merged, "B").unwrap().get(), "2");
        let members = parse_members(r#"{"sub":{"a":1},"sub":"x"}"#).unwrap();
        assert!(matches!(
            section_members(&members, "sub"),
            Err(SectionError::NotAnObject(_))
        ));
    }
}
