//! `rcni policy apply -f`: every object checked before anything is written, then all of them
//! written in one etcd transaction that holds only if no key changed since it was read.

use std::collections::BTreeMap;

use cni_types::code;
use serde_json::{json, Value};

use cni_policy::stored::Keys;

use super::object::Object;
use super::{Problem, StoreArgs};

/// How often a transaction that lost to a concurrent writer is planned again.
const ATTEMPTS: usize = 3;

/// What applying an object does, in `kubectl`'s words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Configured,
    Unchanged,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
        }
    }
}

/// The action of each object, in input order, given the stored values `current` (by key;
/// updated as the objects are applied one after the other, as `kubectl` would).
pub fn plan(objects: &[(String, Object)], current: &mut BTreeMap<String, Value>) -> Vec<Action> {
    objects
        .iter()
        .map(|(key, object)| {
            let action = match current.get(key) {
                None => Action::Created,
                Some(v) if *v == object.value => Action::Unchanged,
                Some(_) => Action::Configured,
            };
            current.insert(key.clone(), object.value.clone());
            action
        })
        .collect()
}

/// The objects of `text`, checked, with their keys; every refusal at once.
fn objects(text: &str, keys: &Keys) -> Result<Vec<(String, Object)>, Problem> {
    let docs = cni_policy::parse_documents(text)
        .map_err(|e| Problem::new(code::DECODING_FAILURE, format!("error: {e}")))?;
    if docs.is_empty() {
        return Err(Problem::new(
            code::DECODING_FAILURE,
            "error: no objects passed to apply",
        ));
    }
    let (good, bad): (Vec<_>, Vec<_>) = docs.iter().map(Object::of).partition(Result::is_ok);
    if !bad.is_empty() {
        let lines: Vec<String> = bad.into_iter().filter_map(Result::err).collect();
        return Err(Problem::new(code::DECODING_FAILURE, lines.join("\n")));
    }
    Ok(good
        .into_iter()
        .flatten()
        .map(|o| (o.key(keys), o))
        .collect())
}

/// Stores the objects of `text` and prints what happened to each; the input is checked
/// before etcd is asked anything.
pub fn run(store: &StoreArgs, text: &str, json: bool) -> Result<(), Problem> {
    let objects = objects(text, &Keys::new(&store.prefix))?;
    let ds = &mut super::open(store)?;
    for _ in 0..ATTEMPTS {
        let mut seen = Vec::new();
        let mut current = BTreeMap::new();
        for key in objects.iter().map(|(k, _)| k) {
            if seen.iter().any(|(k, _)| k == key) {
                continue;
            }
            let entry = ds.get(key)?;
            seen.push((key.clone(), entry.as_ref().map_or(0, |e| e.mod_revision)));
            if let Some(e) = entry {
                // A value that does not decode is replaced ("configured").
                let value = serde_json::from_slice(&e.value).unwrap_or(Value::Null);
                current.insert(key.clone(), value);
            }
        }
        let before = current.clone();
        let actions = plan(&objects, &mut current);
        let puts: Vec<(String, Vec<u8>)> = current
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), serde_json::to_vec(v).unwrap_or_default()))
            .collect();
        if puts.is_empty() || ds.put_if_unchanged(&seen, &puts)? {
            print(&objects, &actions, json);
            return Ok(());
        }
    }
    Err(Problem::new(
        code::TRY_AGAIN_LATER,
        "error: the objects kept changing while being applied; try again",
    ))
}

fn print(objects: &[(String, Object)], actions: &[Action], json: bool) {
    if json {
        let list: Vec<Value> = objects
            .iter()
            .zip(actions)
            .map(|((key, o), a)| json!({"key": key, "object": o.label(), "action": a.word()}))
            .collect();
        println!("{}", Value::Array(list));
        return;
    }
    for ((_, o), a) in objects.iter().zip(actions) {
        println!("{}", o.applied(a.word()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_configured_unchanged_follow_the_stored_values_and_the_input_order() {
        let docs = cni_policy::parse_documents(
            "kind: NetworkPolicy\nmetadata: {name: a}\nspec: {podSelector: {}}\n---\n\
             kind: NetworkPolicy\nmetadata: {name: b}\nspec: {podSelector: {}}\n---\n\
             kind: NetworkPolicy\nmetadata: {name: a}\nspec: {podSelector: {matchLabels: {x: y}}}\n",
        )
        .unwrap();
        let objects: Vec<(String, Object)> = docs
            .iter()
            .map(|d| Object::of(d).unwrap())
            .map(|o| (format!("/p/{}", o.name), o))
            .collect();
        let mut current = BTreeMap::new();
        current.insert("/p/b".to_string(), objects[1].1.value.clone());
        let actions = plan(&objects, &mut current);
        assert_eq!(
            actions,
            [Action::Created, Action::Unchanged, Action::Configured]
        );
        assert_eq!(current["/p/a"], objects[2].1.value);
    }
}
