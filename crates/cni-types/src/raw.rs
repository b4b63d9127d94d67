//! A JSON object whose values are kept as their original text.
//!
//! Configs pass through the runtime and into plugins unchanged (SC items 15, 21; L-9 is the Go
//! behaviour we improve on): key order is kept, and every value keeps its exact bytes, so large
//! numbers are never rounded and strings are never re-escaped.
//!
//! This is the one decoding rule every plugin shares: a value nothing reads is only checked for
//! syntax (so `1e400` or a 5-million-element array in an unknown key passes through untouched,
//! as Go's struct decoding skips it), and a document nested deeper than
//! [`MAX_NESTING_DEPTH`] is refused before anything is decoded, as Go's scanner refuses it.

use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
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

/// An ordered JSON object of raw values. Later duplicates of a key replace earlier ones (Go).
#[derive(Debug, Clone, Default)]
pub struct RawObject {
    entries: Vec<(String, Box<RawValue>)>,
    /// Position in `entries` of each key, so duplicates and lookups cost O(1), not O(n).
    index: HashMap<String, usize>,
    /// For each ASCII-lowercased key that has a spelling other than all-lowercase, the position
    /// of the entry among its spellings that was assigned last: what Go's decoder leaves in the
    /// field. All-lowercase keys without variants need no entry (the exact index answers), so
    /// objects of many plain keys cost nothing extra.
    folded: HashMap<String, usize>,
}

impl RawObject {
    pub fn new() -> Self {
        RawObject::default()
    }

    /// Parses bytes that must hold one JSON object, under the nesting limit.
    pub fn parse(bytes: &[u8]) -> Result<RawObject, serde_json::Error> {
        check_nesting(bytes)?;
        serde_json::from_slice(bytes)
    }

    /// The raw value of `key`, matched exactly.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.index.get(key).map(|&i| self.entries[i].1.as_ref())
    }

    /// The raw value of `key` matched ASCII case-insensitively, as Go's decoder fills a struct
    /// field (configs in the wild send `RuntimeConfig`, `bandWidth`, ...): Go assigns every
    /// matching key in turn, so the spelling that came last wins, exact or not.
    pub fn get_ci(&self, key: &str) -> Option<&RawValue> {
        let lower = key.to_ascii_lowercase();
        self.folded
            .get(&lower)
            .or_else(|| self.index.get(&lower))
            .map(|&i| self.entries[i].1.as_ref())
    }

    /// Decodes `key` (case-insensitive, see [`RawObject::get_ci`]); JSON `null` reads as absent.
    pub fn decode<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, serde_json::Error> {
        match self.get_ci(key) {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => serde_json::from_str(raw.get()).map(Some),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to raw JSON text, replacing an existing entry in place or appending.
    pub fn set_raw(&mut self, key: &str, value: Box<RawValue>) {
        let i = match self.index.get(key) {
            Some(&i) => {
                self.entries[i].1 = value;
                i
            }
            None => {
                let i = self.entries.len();
                self.index.insert(key.to_string(), i);
                self.entries.push((key.to_string(), value));
                i
            }
        };
        let lower = key.to_ascii_lowercase();
        if lower != key || self.folded.contains_key(&lower) {
            self.folded.insert(lower, i);
        }
    }

    /// Sets `key` to the JSON encoding of `value`.
    pub fn set<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let raw = serde_json::value::to_raw_value(value)?;
        self.set_raw(key, raw);
        Ok(())
    }

    /// Removes `key` (exact match); returns whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let Some(i) = self.index.remove(key) else {
            return false;
        };
        self.entries.remove(i);
        for pos in self.index.values_mut().chain(self.folded.values_mut()) {
            if *pos > i {
                *pos -= 1;
            }
        }
        // Another spelling, if any, is what a case-insensitive lookup finds now (the one
        // assigned last is no longer known: take the last in order).
        let lower = key.to_ascii_lowercase();
        if self.folded.get(&lower) == Some(&i) {
            match self
                .entries
                .iter()
                .rposition(|(k, _)| k.eq_ignore_ascii_case(key))
            {
                Some(other) => self.folded.insert(lower, other),
                None => self.folded.remove(&lower),
            };
        }
        true
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Compact JSON with every value exactly as it was read.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // A String always serializes.
            out.extend_from_slice(serde_json::to_string(k).unwrap_or_default().as_bytes());
            out.push(b':');
            out.extend_from_slice(v.get().as_bytes());
        }
        out.push(b'}');
        out
    }

    /// Decodes the whole object into a typed struct (unknown keys are the struct's business).
    pub fn to_typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.to_bytes())
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjVisitor;
        impl<'de> Visitor<'de> for ObjVisitor {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut obj = RawObject::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: Box<RawValue> = map.next_value()?;
                    obj.set_raw(&key, value);
                }
                Ok(obj)
            }
        }
        d.deserialize_map(ObjVisitor)
    }
}

impl Serialize for RawObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_bytes_order_and_big_numbers() {
        let src = br#"{"z":1,"big":123456789012345678901234567890,"f":1.50,"s":"a<b>&\u00e9","a":{"y":1,"x":2}}"#;
        let obj = RawObject::parse(src).unwrap();
        assert_eq!(obj.to_bytes(), src.to_vec());
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["z", "big", "f", "s", "a"]);
    }

    #[test]
    fn set_replace_remove_and_duplicates() {
        let mut obj = RawObject::parse(br#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(obj.get("a").unwrap().get(), "3");
        obj.set("b", &"x").unwrap();
        obj.set("c", &[1, 2]).unwrap();
        assert!(obj.remove("a"));
        assert_eq!(obj.to_bytes(), br#"{"b":"x","c":[1,2]}"#.to_vec());
    }

    // Go assigns each matching key in turn: the spelling assigned last wins, exact or not.
    #[test]
    fn case_insensitive_lookup_takes_the_last_assigned_spelling() {
        let obj =
            RawObject::parse(br#"{"RuntimeConfig":{"a":1},"runtimeConfig":{"b":2}}"#).unwrap();
        assert_eq!(obj.get_ci("runtimeConfig").unwrap().get(), r#"{"b":2}"#);
        let obj = RawObject::parse(br#"{"mtu":1,"MTU":2}"#).unwrap();
        assert_eq!(obj.get_ci("mtu").unwrap().get(), "2");
        assert_eq!(obj.get("mtu").unwrap().get(), "1");
        // A repeated spelling counts where it was assigned last.
        let mut obj = RawObject::parse(br#"{"mtu":1,"MTU":2,"mtu":3}"#).unwrap();
        assert_eq!(obj.get_ci("Mtu").unwrap().get(), "3");
        assert!(obj.remove("mtu"));
        assert_eq!(obj.get_ci("mtu").unwrap().get(), "2");
        assert!(obj.remove("MTU"));
        assert!(obj.get_ci("mtu").is_none());
        let only_upper = RawObject::parse(br#"{"RuntimeConfig":{"a":1},"n":null}"#).unwrap();
        assert!(only_upper.get_ci("runtimeconfig").is_some());
        assert_eq!(only_upper.decode::<u32>("n").unwrap(), None);
    }

    // Many duplicates of one key: linear, and the last one wins (Go).
    #[test]
    fn many_duplicates_are_linear_and_last_wins() {
        let n = 200_000;
        let mut src = String::from("{");
        for i in 0..n {
            src.push_str(&format!("\"k{}\":{i},", i % 2));
        }
        src.push_str("\"end\":0}");
        let started = std::time::Instant::now();
        let obj = RawObject::parse(src.as_bytes()).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(obj.len(), 3);
        assert_eq!(obj.get("k1").unwrap().get(), (n - 1).to_string());
        let mut distinct = String::from("{");
        for i in 0..n {
            distinct.push_str(&format!("\"k{i}\":{i},"));
        }
        distinct.push_str("\"end\":0}");
        let started = std::time::Instant::now();
        let obj = RawObject::parse(distinct.as_bytes()).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(obj.len(), n + 1);
    }

    fn nested(depth: usize) -> String {
        // The outer object counts as one level.
        let inner = depth - 1;
        format!(
            r#"{{"k":"[{{\"}}","x":{}{}}}"#,
            "[".repeat(inner),
            "]".repeat(inner)
        )
    }

    // Go's scanner: depth 10000 is fine, 10001 is refused; brackets in strings do not count.
    #[test]
    fn nesting_limit_is_gos() {
        let ok = RawObject::parse(nested(MAX_NESTING_DEPTH).as_bytes()).unwrap();
        assert!(ok.get("x").unwrap().get().starts_with("[["));
        let e = RawObject::parse(nested(MAX_NESTING_DEPTH + 1).as_bytes()).unwrap_err();
        assert!(e.to_string().contains("exceeded max depth"), "{e}");
        assert!(check_nesting(br#"{"s":"\"[[[[[[","t":"\\"}"#).is_ok());
        let strings = format!(r#"{{"s":"{}"}}"#, "[".repeat(MAX_NESTING_DEPTH * 2));
        assert!(RawObject::parse(strings.as_bytes()).is_ok());
    }

    // Values nothing reads are checked for syntax only.
    #[test]
    fn unread_values_pass_untouched() {
        let deep = format!("{}{}", "[".repeat(9_000), "]".repeat(9_000));
        let src = format!(
            r#"{{"huge":1e400,"neg":-1e-400,"deep":{deep},"n":123456789012345678901234567890}}"#
        );
        let obj = RawObject::parse(src.as_bytes()).unwrap();
        assert_eq!(obj.to_bytes(), src.as_bytes());
    }

    #[test]
    fn rejects_non_objects() {
        assert!(RawObject::parse(b"[1]").is_err());
        assert!(RawObject::parse(b"{not json").is_err());
    }
}
