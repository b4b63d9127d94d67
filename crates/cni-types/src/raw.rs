//! A JSON object whose values are kept as their original text.
//!
//! Configs pass through the runtime and into plugins unchanged (libcni's `InjectConf` is the Go
//! behaviour we improve on): key order is kept, and every value keeps its exact bytes, so large
//! numbers are never rounded and strings are never re-escaped.
//!
//! Keys are read by the rule of [`crate::go_decode`] (Go's: case-insensitive matching, the last
//! assignment wins, repeated sections merge). This is also the one decoding rule every plugin
//! shares for size: a value nothing reads is only checked for syntax (so `1e400` or a 5-million-element array in an unknown key passes through untouched,
//! as Go's struct decoding skips it), and a document nested deeper than
//! [`go_decode::MAX_NESTING_DEPTH`] is refused before anything is decoded, as Go's scanner
//! refuses it.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};

use hashbrown::HashTable;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use crate::go_decode::{self, check_nesting, fold_char, fold_eq, KeyText};
use crate::go_object::{FieldError, GoObject};

/// The raw JSON text of one value of a [`RawObject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawText<'a>(&'a str);

impl<'a> RawText<'a> {
    /// The value's JSON text, byte for byte as it was read or set.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

impl fmt::Display for RawText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Where a key or a value sits in [`RawObject::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

/// One member; a removed member keeps its place with `value.start == REMOVED`.
#[derive(Debug, Clone, Copy)]
struct Member {
    key: Span,
    value: Span,
}

const REMOVED: u32 = u32::MAX;

/// An ordered JSON object of raw values. Later duplicates of a key replace earlier ones (Go);
/// the earlier values are remembered only to merge repeated sections (see
/// [`RawObject::decode_path`]).
///
/// Memory is one text buffer plus 16 bytes and an index slot per distinct key, never a value
/// tree or an allocation per key: a config of a million distinct unknown keys costs about
/// twice its size. The buffer holds each key (unescaped) and value (raw JSON) as read, back to
/// back; a replaced or removed value's bytes stay until the object is dropped, so it never
/// holds more than its input plus what was set later.
#[derive(Clone, Default)]
pub struct RawObject {
    text: String,
    members: Vec<Member>,
    /// Position in `members` of each key, so duplicates and lookups cost O(1), not O(n).
    index: HashTable<u32>,
    /// For each folded key ([`go_decode::fold_char`]) that has a spelling other than its folded
    /// form, the position of the member among its spellings that was assigned last: what Go's
    /// decoder leaves in the field. Folded keys without variants need no slot (the exact index
    /// answers), so objects of many plain keys cost nothing extra.
    folded: HashTable<u32>,
    /// Values a repeated key had before its last one while parsing (member position, value):
    /// Go merges every object assigned to a section, not only the last.
    earlier: Vec<(u32, Span)>,
    /// Keyed SipHash: hostile configs cannot pick colliding keys.
    hasher: RandomState,
    live: usize,
}

/// The text of `span`.
fn slice(text: &str, span: Span) -> &str {
    &text[span.start as usize..(span.start + span.len) as usize]
}

fn hash_exact(hasher: &RandomState, key: &str) -> u64 {
    hasher.hash_one(key)
}

/// The hash of `key` folded as Go folds keys, without allocating.
fn hash_folded(hasher: &RandomState, key: &str) -> u64 {
    let mut h = hasher.build_hasher();
    for c in key.chars() {
        h.write_u32(u32::from(fold_char(c)));
    }
    h.write_u8(0xff);
    h.finish()
}

/// The folded form of `key`: the one spelling the folded index leaves to the exact index.
fn folded(key: &str) -> String {
    key.chars().map(fold_char).collect()
}

fn too_large<E: serde::de::Error>() -> E {
    E::custom("JSON object larger than 4 GiB")
}

impl RawObject {
    pub fn new() -> Self {
        RawObject::default()
    }

    /// Parses bytes that must hold one JSON object, under the nesting limit.
    pub fn parse(bytes: &[u8]) -> Result<RawObject, serde_json::Error> {
        check_nesting(bytes)?;
        let mut de = serde_json::Deserializer::from_slice(bytes);
        // Keys and values together are never longer than the document.
        let obj = ObjectSeed {
            capacity: bytes.len(),
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok(obj)
    }

    fn key_of(&self, i: u32) -> &str {
        slice(&self.text, self.members[i as usize].key)
    }

    fn find(&self, key: &str) -> Option<u32> {
        let hash = hash_exact(&self.hasher, key);
        self.index.find(hash, |&i| self.key_of(i) == key).copied()
    }

    fn value_of(&self, i: u32) -> RawText<'_> {
        RawText(slice(&self.text, self.members[i as usize].value))
    }

    /// The raw value of `key`, matched exactly.
    pub fn get(&self, key: &str) -> Option<RawText<'_>> {
        self.find(key).map(|i| self.value_of(i))
    }

    /// The raw value field `key` gets, keys matched as Go's decoder fills a struct field
    /// (configs in the wild send `RuntimeConfig`, `bandWidth`, ...): Go assigns every matching
    /// key in turn, so the spelling that came last wins, exact or not ([`crate::go_decode`]).
    pub fn get_ci(&self, key: &str) -> Option<RawText<'_>> {
        let hash = hash_folded(&self.hasher, key);
        let spelled = self
            .folded
            .find(hash, |&i| fold_eq(self.key_of(i), key))
            .copied();
        spelled
            .or_else(|| self.find(&folded(key)))
            .map(|i| self.value_of(i))
    }

    /// Every value assigned to field `key` while parsing, in input order, whatever the
    /// spelling, repeated keys included (a linear scan when the object has repeated keys or
    /// `key` several spellings: for sections, not for every key).
    fn assigned(&self, key: &str) -> Vec<&str> {
        // No repeated key and no other spelling: the one value is all there is.
        let hash = hash_folded(&self.hasher, key);
        let respelled = self.folded.find(hash, |&i| fold_eq(self.key_of(i), key));
        if self.earlier.is_empty() && respelled.is_none() {
            return self.get_ci(key).map(|v| v.get()).into_iter().collect();
        }
        let live = self
            .members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| (m.value.start != REMOVED).then_some((i, m.value)));
        let earlier = self.earlier.iter().map(|&(i, value)| (i as usize, value));
        let mut found: Vec<Span> = live
            .chain(earlier)
            .filter(|&(i, _)| fold_eq(slice(&self.text, self.members[i].key), key))
            .map(|(_, value)| value)
            .collect();
        // The buffer only grows, so a value's position is the order it was assigned in.
        found.sort_by_key(|span| span.start);
        found
            .into_iter()
            .map(|span| slice(&self.text, span))
            .collect()
    }

    /// Decodes `key` (matched as [`RawObject::get_ci`] does); JSON `null` reads as absent. An
    /// object assigned more than once since the last `null` is decoded merged, as Go decodes
    /// every one of them into the same struct or map ([`go_decode::merge_objects`]).
    pub fn decode<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, serde_json::Error> {
        go_decode::decode_field(self.get_ci(key).map(|v| v.get()), || self.assigned(key))
    }

    /// The section `key` (matched as [`RawObject::get_ci`] does) as a [`GoObject`], every
    /// object assigned to it merged, as Go merges them into one struct
    /// ([`go_decode::section_members`]); absent or `null` is an empty section.
    pub fn section(&self, key: &str) -> Result<GoObject<'_>, FieldError> {
        let objects =
            go_decode::merged_objects(self.assigned(key)).map_err(|_| FieldError::WrongType {
                field: key.to_string(),
                expected: "an object",
            })?;
        let mut members = Vec::new();
        for object in objects {
            members.extend(go_decode::parse_members(object).map_err(FieldError::Json)?);
        }
        Ok(GoObject::from_members(members, key))
    }

    /// Decodes the value at `path`, each step a section (object) whose key is matched as
    /// [`RawObject::get_ci`] does; every object assigned to a section is merged, as Go merges
    /// them into one struct ([`RawObject::section`], [`GoObject::object`]). Only the last value
    /// is decoded as `T`, so nothing beside the path is ever held as a value tree (an unknown
    /// `1e400` next to it passes). A missing step, `null`, or a step that is not an object is
    /// `None`, as the plugins read optional sections.
    pub fn decode_path<T: DeserializeOwned>(
        &self,
        path: &[&str],
    ) -> Result<Option<T>, serde_json::Error> {
        let Some((last, steps)) = path.split_last() else {
            return Ok(None);
        };
        let Some((first, steps)) = steps.split_first() else {
            return self.decode(last);
        };
        let mut section = match self.section(first) {
            Ok(section) => section,
            Err(FieldError::Json(e)) => return Err(e),
            Err(_) => return Ok(None),
        };
        for step in steps {
            section = match section.object(step) {
                Ok(inner) => inner,
                Err(FieldError::Json(e)) => return Err(e),
                Err(_) => return Ok(None),
            };
        }
        match section.get(last) {
            None => Ok(None),
            Some(raw) => serde_json::from_str(raw.get()).map(Some),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    fn push_text(&mut self, s: &str) -> Option<Span> {
        let start = u32::try_from(self.text.len()).ok()?;
        let len = u32::try_from(s.len()).ok()?;
        start.checked_add(len)?;
        self.text.push_str(s);
        Some(Span { start, len })
    }

    /// Sets `key` to raw JSON text (already checked), replacing an existing member in place or
    /// appending; `None` when the object would pass 4 GiB. A replaced value is remembered when
    /// `parsing` (a repeated key of the input), forgotten when the caller sets a new value.
    fn set_text(&mut self, key: &str, value: &str, parsing: bool) -> Option<()> {
        let hash = hash_exact(&self.hasher, key);
        let i = match self.find(key) {
            Some(i) => {
                let old = self.members[i as usize].value;
                if parsing {
                    self.earlier.push((i, old));
                } else {
                    self.earlier.retain(|&(j, _)| j != i);
                }
                self.members[i as usize].value = self.push_text(value)?;
                i
            }
            None => {
                let key_span = self.push_text(key)?;
                let value = self.push_text(value)?;
                let i = u32::try_from(self.members.len()).ok()?;
                self.members.push(Member {
                    key: key_span,
                    value,
                });
                self.live += 1;
                let (text, members, hasher) = (&self.text, &self.members, &self.hasher);
                self.index.insert_unique(hash, i, |&j| {
                    hash_exact(hasher, slice(text, members[j as usize].key))
                });
                i
            }
        };
        let (text, members, hasher) = (&self.text, &self.members, &self.hasher);
        let folded_hash = hash_folded(hasher, key);
        let same = |&j: &u32| fold_eq(slice(text, members[j as usize].key), key);
        match self.folded.find_mut(folded_hash, same) {
            Some(slot) => *slot = i,
            None if key.chars().any(|c| fold_char(c) != c) => {
                self.folded.insert_unique(folded_hash, i, |&j| {
                    hash_folded(hasher, slice(text, members[j as usize].key))
                });
            }
            None => {}
        }
        Some(())
    }

    /// Sets `key` to the JSON encoding of `value`.
    pub fn set<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let text = serde_json::to_string(value)?;
        self.set_text(key, &text, false).ok_or_else(too_large)
    }

    /// Removes `key` (exact match); returns whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let hash = hash_exact(&self.hasher, key);
        let (text, members) = (&self.text, &self.members);
        let Ok(found) = self
            .index
            .find_entry(hash, |&j| slice(text, members[j as usize].key) == key)
        else {
            return false;
        };
        let (i, _) = found.remove();
        self.members[i as usize].value.start = REMOVED;
        self.earlier.retain(|&(j, _)| j != i);
        self.live -= 1;
        // Another spelling, if any, is what a case-insensitive lookup finds now (the one
        // assigned last is no longer known: take the last in order).
        let (text, members, hasher) = (&self.text, &self.members, &self.hasher);
        let folded_hash = hash_folded(hasher, key);
        if let Ok(slot) = self.folded.find_entry(folded_hash, |&j| j == i) {
            let other = members
                .iter()
                .rposition(|m| m.value.start != REMOVED && fold_eq(slice(text, m.key), key))
                .and_then(|o| u32::try_from(o).ok());
            match other {
                Some(o) => *slot.into_mut() = o,
                None => {
                    slot.remove();
                }
            }
        }
        true
    }

    fn live_members(&self) -> impl Iterator<Item = (&str, &str)> {
        self.members
            .iter()
            .filter(|m| m.value.start != REMOVED)
            .map(|m| (slice(&self.text, m.key), slice(&self.text, m.value)))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.live_members().map(|(k, _)| k)
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Compact JSON with every value exactly as it was read.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.text.len() + 4 * self.live + 2);
        out.push(b'{');
        for (i, (k, v)) in self.live_members().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // A str always serializes.
            let _ = serde_json::to_writer(&mut out, k);
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
        }
        out.push(b'}');
        out
    }

    /// Decodes the whole object into a typed struct (unknown keys are the struct's business).
    pub fn to_typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.to_bytes())
    }
}

impl fmt::Debug for RawObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.live_members()).finish()
    }
}

/// Reads one object into a [`RawObject`] whose buffer is sized up front.
struct ObjectSeed {
    capacity: usize,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = RawObject;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawObject, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed {
    type Value = RawObject;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
        let mut obj = RawObject::new();
        obj.text.reserve(self.capacity);
        while let Some(KeyText(key)) = map.next_key::<KeyText<'de>>()? {
            // A temporary copy of one value, freed at once: nothing is kept per key but the
            // bytes in the buffer.
            let value: Box<RawValue> = map.next_value()?;
            obj.set_text(&key, value.get(), true)
                .ok_or_else(too_large)?;
        }
        Ok(obj)
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ObjectSeed { capacity: 0 }.deserialize(d)
    }
}

impl Serialize for RawObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let mut m = s.serialize_map(Some(self.live))?;
        for (k, v) in self.live_members() {
            // Borrowed, so nothing is copied; the text was checked when it was stored.
            let raw: &RawValue = serde_json::from_str(v).map_err(S::Error::custom)?;
            m.serialize_entry(k, raw)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::go_decode::MAX_NESTING_DEPTH;

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

    // Many duplicates of one key, and many distinct keys: the last duplicate wins (Go). The
    // index keeps this linear; no wall-clock bound is asserted (tests never time the machine).
    #[test]
    fn many_duplicates_and_many_distinct_keys_parse_and_last_wins() {
        let n = 200_000;
        let mut src = String::from("{");
        for i in 0..n {
            src.push_str(&format!("\"k{}\":{i},", i % 2));
        }
        src.push_str("\"end\":0}");
        let obj = RawObject::parse(src.as_bytes()).unwrap();
        assert_eq!(obj.len(), 3);
        assert_eq!(obj.get("k1").unwrap().get(), (n - 1).to_string());
        let mut distinct = String::from("{");
        for i in 0..n {
            distinct.push_str(&format!("\"k{i}\":{i},"));
        }
        distinct.push_str("\"end\":0}");
        let obj = RawObject::parse(distinct.as_bytes()).unwrap();
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

    // Only the last step is decoded: what lies beside the path is never read.
    #[test]
    fn decode_path_reads_one_typed_value() {
        let obj = RawObject::parse(
            br#"{"RuntimeConfig":{"big":1e400,"Bandwidth":{"rate":5,"x":[1e400]}},"s":"x"}"#,
        )
        .unwrap();
        let rate: Option<u64> = obj
            .decode_path(&["runtimeConfig", "bandwidth", "rate"])
            .unwrap();
        assert_eq!(rate, Some(5));
        assert!(obj.decode_path::<u64>(&["runtimeConfig", "big"]).is_err());
        let missing: Option<u64> = obj.decode_path(&["runtimeConfig", "nope", "rate"]).unwrap();
        assert_eq!(missing, None);
        let through_string: Option<u64> = obj.decode_path(&["s", "rate"]).unwrap();
        assert_eq!(through_string, None);
        let inner: RawObject = obj
            .decode_path(&["runtimeConfig", "bandwidth"])
            .unwrap()
            .unwrap();
        assert_eq!(inner.to_bytes(), br#"{"rate":5,"x":[1e400]}"#.to_vec());
    }

    // Keys are unescaped once; a removed key's later spelling is what get_ci finds; the
    // serialized form is the same bytes.
    #[test]
    fn escaped_keys_removal_and_serialization() {
        let mut obj = RawObject::parse(br#"{"ab":1,"Ab":2,"c":{"d":1e400}}"#).unwrap();
        assert_eq!(obj.get("ab").unwrap().get(), "1");
        assert_eq!(obj.get_ci("AB").unwrap().get(), "2");
        assert!(obj.remove("Ab"));
        assert_eq!(obj.get_ci("AB").unwrap().get(), "1");
        assert_eq!(obj.len(), 2);
        assert_eq!(
            serde_json::to_string(&obj).unwrap(),
            r#"{"ab":1,"c":{"d":1e400}}"#
        );
        let back: RawObject = serde_json::from_str(r#"{"ab":1,"c":{"d":1e400}}"#).unwrap();
        assert_eq!(back.to_bytes(), obj.to_bytes());
        assert!(!obj.remove("Ab"));
        obj.set("Ab", &3).unwrap();
        assert_eq!(obj.get_ci("ab").unwrap().get(), "3");
        assert_eq!(obj.keys().collect::<Vec<_>>(), ["ab", "c", "Ab"]);
    }

    // Go decodes every object given for a section into the same struct: repeated sections
    // merge, spelling and exact repeats alike; a null starts afresh; a value set later
    // replaces what the input held under that spelling.
    #[test]
    fn repeated_sections_merge() {
        let mut obj = RawObject::parse(
            br#"{"args":{"cni":{"a":1}},"Args":{"cni":{"b":2}},"args":{"CNI":{"a":3}},"rc":{"x":1},"rc":null,"rc":{"y":2}}"#,
        )
        .unwrap();
        let at = |obj: &RawObject, path: &[&str]| obj.decode_path::<u32>(path).unwrap();
        assert_eq!(at(&obj, &["args", "cni", "a"]), Some(3));
        assert_eq!(at(&obj, &["args", "cni", "b"]), Some(2));
        assert_eq!(at(&obj, &["rc", "x"]), None);
        assert_eq!(at(&obj, &["rc", "y"]), Some(2));
        let whole: serde_json::Value = obj.decode("args").unwrap().unwrap();
        assert_eq!(whole["cni"], serde_json::json!({"a": 1, "b": 2}));
        assert_eq!(whole["CNI"], serde_json::json!({"a": 3}));
        obj.set("args", &serde_json::json!({"cni": {"c": 4}}))
            .unwrap();
        assert_eq!(at(&obj, &["args", "cni", "a"]), None);
        assert_eq!(at(&obj, &["args", "cni", "b"]), Some(2));
        assert_eq!(at(&obj, &["args", "cni", "c"]), Some(4));
    }

    #[test]
    fn rejects_non_objects() {
        assert!(RawObject::parse(b"[1]").is_err());
        assert!(RawObject::parse(b"{not json").is_err());
    }
}
