//! rcni's decoding rule (`cni_types::go_decode`, through `RawObject` and the member-list reader
//! cni-ipam uses) against what Go's `encoding/json` did with the same inputs:
//! `tests/go_json/expected.jsonl`, the output of `tests/go_json/main.go` (see its README).

use std::borrow::Cow;

use cni_types::go_decode::{self, Member};
use cni_types::RawObject;
use serde_json::{json, Value};

const EXPECTED: &str = include_str!("go_json/expected.jsonl");

/// Where rcni reads differently from Go on purpose: an `Option` is read as Go reads a pointer
/// field, so a `null` after a value unsets what Go's non-pointer fields keep
/// (`cni_types::go_decode`, "rcni reads every optional field as Go reads a pointer field").
/// Each entry: input, field, what rcni reads.
const DIFFERENCES: &[(&str, &str, &str)] = &[
    (r#"{"mtu":1,"mtu":null}"#, "mtu", "0"),
    (r#"{"name":"a","NAME":null}"#, "name", r#""""#),
    (
        r#"{"sub":{"a":1},"sub":null}"#,
        "sub",
        r#"{"a":null,"b":null}"#,
    ),
];

/// A scalar, list or map field as RawObject reads it, and as the member list reads it.
fn leaf(obj: &RawObject, members: &[Member<'_>], name: &str) -> Result<Value, String> {
    let via_object = obj.decode::<Value>(name).map_err(|e| e.to_string())?;
    let via_members = go_decode::field_value(members, name)
        .map(|raw| {
            let objects = go_decode::merged_objects(
                members
                    .iter()
                    .filter(|(k, _)| go_decode::fold_eq(k, name))
                    .map(|(_, v)| v.get()),
            )
            .unwrap_or_default();
            if objects.len() > 1 {
                go_decode::merge_objects(&objects).unwrap()
            } else {
                raw.get().to_string()
            }
        })
        .map(|text| serde_json::from_str::<Value>(&text).unwrap());
    assert_eq!(via_object, via_members, "the two readers differ on {name}");
    Ok(via_object.unwrap_or(Value::Null))
}

/// Fields `a` and `b` of section `name`, read key by key through the section as the plugins
/// read `runtimeConfig` and cni-ipam reads `ipam`; `None` when the section is unset.
fn section(obj: &RawObject, members: &[Member<'_>], name: &str) -> Option<Value> {
    let inner = go_decode::section_members(members, name).unwrap();
    let mut out = serde_json::Map::new();
    for field in ["a", "b"] {
        let via_object: Option<Value> = obj.decode_path(&[name, field]).unwrap();
        let via_members = go_decode::field_value(&inner, field)
            .map(|raw| serde_json::from_str::<Value>(raw.get()).unwrap());
        assert_eq!(
            via_object, via_members,
            "the two readers differ on {name}.{field}"
        );
        out.insert(field.into(), via_object.unwrap_or(Value::Null));
    }
    (!inner.is_empty() || obj.get_ci(name).is_some_and(|v| v.get() != "null"))
        .then_some(Value::Object(out))
}

/// The `Conf` struct of main.go as rcni reads it; `Err` when a field fails to decode.
fn decode_conf(input: &str) -> Result<Value, String> {
    let obj = RawObject::parse(input.as_bytes()).unwrap();
    let members: Vec<Member<'_>> = go_decode::parse_members(input).unwrap();
    let int_or_zero = |v: Value| if v.is_null() { json!(0) } else { v };
    let mtu = leaf(&obj, &members, "mtu")?;
    if !(mtu.is_null() || mtu.is_i64()) {
        return Err(format!("mtu: {mtu} is not an int"));
    }
    let name = leaf(&obj, &members, "name")?;
    Ok(json!({
        "mtu": int_or_zero(mtu),
        "mtuPtr": leaf(&obj, &members, "mtuPtr")?,
        "name": if name.is_null() { json!("") } else { name },
        "kind": leaf(&obj, &members, "kind")?,
        "list": leaf(&obj, &members, "list")?,
        "map": leaf(&obj, &members, "map")?,
        "sub": section(&obj, &members, "sub").unwrap_or(json!({"a": null, "b": null})),
        "subPtr": section(&obj, &members, "subPtr"),
    }))
}

#[test]
fn decoding_matches_go_encoding_json() {
    let mut compared = 0;
    for line in EXPECTED.lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        // Go's rule among two fields whose names fold alike (exact match first) does not
        // arise: no rcni struct has such fields. The cases stay in the table as a record.
        if case["target"] != "conf" {
            continue;
        }
        let input = case["input"].as_str().unwrap();
        let mut want = case["decoded"].clone();
        for (diff_input, field, ours) in DIFFERENCES {
            if *diff_input == input {
                want[*field] = serde_json::from_str(ours).unwrap();
            }
        }
        match (decode_conf(input), case.get("error")) {
            (Ok(got), None) => assert_eq!(got, want, "{input}"),
            (Err(_), Some(_)) => {}
            (got, go_error) => panic!("{input}: rcni {got:?}, Go error {go_error:?}"),
        }
        compared += 1;
    }
    assert!(compared >= 30, "only {compared} cases compared");
}

// Every listed difference is a case of the table, so none is stale.
#[test]
fn every_listed_difference_is_in_the_table() {
    for (input, _, _) in DIFFERENCES {
        let quoted = serde_json::to_string(&Cow::Borrowed(*input)).unwrap();
        assert!(
            EXPECTED.contains(&quoted),
            "{input} is not a case of the table"
        );
    }
}
