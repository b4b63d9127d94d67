//! The datastore side of enforcement: each stored policy, namespace and other node's pod,
//! decoded once when it is read or changes, and handed to the enforcer as a change by key.
//! Nothing is rebuilt per change and no raw value is kept: the view keeps only which keys it
//! has given (so that a full read after a broken watch can tell what went), and pods are
//! decoded straight into their compact form, their strings interned.

use std::collections::HashSet;
use std::sync::Arc;

use cni_etcd::{Entry, WatchEvent};
use cni_policy::compact::{Interner, PodInfo};
use cni_policy::nft::{Change, PodId};
use cni_policy::stored::{decode, BadEntry, Key, Keys, PodRecord, Stored};

/// The stored inputs of one node's enforcement.
pub struct View {
    keys: Keys,
    node: String,
    interner: Interner,
    /// The keys whose values the enforcer has (pods share these with it as their ids).
    given: HashSet<PodId>,
    loaded: bool,
}

/// What a read or a watch event changed.
#[derive(Default)]
pub struct Changes {
    pub changes: Vec<Change>,
    /// Stored values left out because they cannot be read.
    pub bad: Vec<BadEntry>,
}

impl View {
    /// The view of `node` over the layout `keys`; nothing read yet.
    pub fn new(keys: Keys, node: &str) -> View {
        View {
            keys,
            node: node.to_string(),
            interner: Interner::default(),
            given: HashSet::new(),
            loaded: false,
        }
    }

    /// Whether a full read has been taken.
    pub fn loaded(&self) -> bool {
        self.loaded
    }

    /// Takes a full read of the prefix: every value in it, and the removal of what the
    /// enforcer has that it no longer holds.
    pub fn load(&mut self, entries: Vec<Entry>) -> Changes {
        let mut out = Changes::default();
        let mut seen: HashSet<PodId> = HashSet::with_capacity(entries.len());
        for entry in entries {
            if let Some(key) = self.put(entry, &mut out) {
                seen.insert(key);
            }
        }
        let gone: Vec<PodId> = self.given.difference(&seen).cloned().collect();
        for key in gone {
            self.delete(&key, &mut out);
        }
        self.loaded = true;
        out
    }

    /// Applies watched changes.
    pub fn apply(&mut self, events: Vec<WatchEvent>) -> Changes {
        let mut out = Changes::default();
        for event in events {
            match event {
                WatchEvent::Put(entry) => {
                    self.put(entry, &mut out);
                }
                WatchEvent::Delete { key } => self.delete(&key, &mut out),
            }
        }
        out
    }

    /// Takes one stored value; the key, when it is an input.
    fn put(&mut self, entry: Entry, out: &mut Changes) -> Option<PodId> {
        let decoded = match decode(&self.keys, &entry.key, &entry.value) {
            Ok(None) => return None,
            Ok(Some(Stored::Pod { node, .. })) if node == self.node => return None,
            Ok(Some(stored)) => Some(stored),
            Err(bad) => {
                out.bad.push(bad);
                None
            }
        };
        let key: PodId = match self.given.get(entry.key.as_str()) {
            Some(k) => k.clone(),
            None => Arc::from(entry.key.as_str()),
        };
        match decoded {
            // Left out: whatever the enforcer had under this key goes.
            None => {
                self.delete(&key, out);
                return Some(key);
            }
            Some(stored) => out.changes.push(self.change(&key, stored)),
        }
        self.given.insert(key.clone());
        Some(key)
    }

    fn change(&mut self, key: &PodId, stored: Stored) -> Change {
        match stored {
            Stored::Policy {
                namespace,
                name,
                policy,
            } => Change::Policy {
                key: format!("{namespace}/{name}"),
                policy: Some(Arc::from(policy)),
            },
            Stored::Namespace { name, labels } => Change::Namespace {
                name,
                labels: Some(labels),
            },
            Stored::Pod { record, .. } => Change::Pod {
                id: key.clone(),
                pod: Some(Arc::new(self.compact(record))),
                local: false,
            },
        }
    }

    fn compact(&mut self, r: PodRecord) -> PodInfo {
        let labels = self
            .interner
            .labels(r.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let named_ports = (!r.named_ports.is_empty()).then(|| {
            let ports = r
                .named_ports
                .iter()
                .map(|(n, p)| (n.clone(), (p.protocol.into(), p.port)))
                .collect();
            Box::new(ports)
        });
        PodInfo {
            namespace: self.interner.sym(&r.namespace),
            name: r.name.into_boxed_str(),
            labels: Some(labels),
            ips: r.ips.into_boxed_slice(),
            named_ports,
        }
    }

    /// The removal of what the enforcer has under `key`, if anything.
    fn delete(&mut self, key: &str, out: &mut Changes) {
        let Some(given) = self.given.take(key) else {
            return;
        };
        let change = match self.keys.parse(key) {
            Some(Key::Policy { namespace, name }) => Change::Policy {
                key: format!("{namespace}/{name}"),
                policy: None,
            },
            Some(Key::Namespace { name }) => Change::Namespace { name, labels: None },
            Some(Key::Pod { .. }) => Change::Pod {
                id: given,
                pod: None,
                local: false,
            },
            None => return,
        };
        out.changes.push(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::Pod;

    fn pod(ns: &str, name: &str, ip: &str) -> Pod {
        crate::policy::test_pod(ns, name, ip)
    }

    fn entry(key: String, value: &[u8]) -> Entry {
        Entry {
            key,
            value: value.to_vec(),
            create_revision: 1,
            mod_revision: 1,
            lease: 0,
        }
    }

    const DENY: &[u8] =
        br#"{"metadata":{"name":"deny","namespace":"x"},"spec":{"podSelector":{}}}"#;

    fn kinds(c: &Changes) -> Vec<String> {
        c.changes
            .iter()
            .map(|c| match c {
                Change::Pod { id, pod, .. } => format!("pod {id} {}", pod.is_some()),
                Change::Policy { key, policy } => format!("policy {key} {}", policy.is_some()),
                Change::Namespace { name, labels } => {
                    format!("namespace {name} {}", labels.is_some())
                }
            })
            .collect()
    }

    #[test]
    fn a_full_read_gives_every_input_but_this_nodes_pods_and_removes_what_went() {
        let keys = Keys::new("/p");
        let mut view = View::new(keys.clone(), "n1");
        assert!(!view.loaded());
        let remote =
            serde_json::to_vec(&PodRecord::of(&pod("x", "b", "198.18.2.2"), "n2")).unwrap();
        let own = serde_json::to_vec(&PodRecord::of(&pod("x", "old", "198.18.1.9"), "n1")).unwrap();
        let first = view.load(vec![
            entry(keys.policy("x", "deny"), DENY),
            entry(keys.pod("n2", "x", "b"), &remote),
            entry(keys.pod("n1", "x", "old"), &own),
            entry("/p/subnets/198.19.1.0-24".into(), b"{}"),
            entry(keys.namespace("x"), br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x","labels":{"ns":"x"}}}"#),
        ]);
        assert!(view.loaded());
        assert_eq!(
            kinds(&first),
            [
                "policy x/deny true",
                "pod /p/pods/n2/x/b true",
                "namespace x true"
            ]
        );
        // Read again without the policy: it goes.
        let second = view.load(vec![entry(keys.pod("n2", "x", "b"), &remote)]);
        let mut got = kinds(&second);
        got.sort();
        assert_eq!(
            got,
            [
                "namespace x false",
                "pod /p/pods/n2/x/b true",
                "policy x/deny false"
            ]
        );
    }

    #[test]
    fn watched_changes_and_bad_values() {
        let keys = Keys::new("/p");
        let mut view = View::new(keys.clone(), "n1");
        view.load(Vec::new());
        let own = keys.pod("n1", "x", "a");
        assert!(view
            .apply(vec![WatchEvent::Put(entry(own, b"{}"))])
            .changes
            .is_empty());
        let pol = keys.policy("x", "deny");
        let put = WatchEvent::Put(entry(pol.clone(), DENY));
        assert_eq!(kinds(&view.apply(vec![put])), ["policy x/deny true"]);
        // An unreadable value: reported, and what was there goes.
        let bad = view.apply(vec![WatchEvent::Put(entry(pol.clone(), b"{broken"))]);
        assert_eq!(bad.bad.len(), 1);
        assert_eq!(kinds(&bad), ["policy x/deny false"]);
        assert!(view
            .apply(vec![WatchEvent::Delete { key: pol.clone() }])
            .changes
            .is_empty());
        let put = WatchEvent::Put(entry(pol.clone(), DENY));
        view.apply(vec![put]);
        let deleted = view.apply(vec![WatchEvent::Delete { key: pol }]);
        assert_eq!(kinds(&deleted), ["policy x/deny false"]);
    }
}
