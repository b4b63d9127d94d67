//! What a node knows for enforcement: the stored policies, namespaces and other nodes' pods
//! (from one read of the prefix and its watch), and the pods of this node (from the node's
//! own pod source, so they are enforced without waiting for their records to round-trip
//! through the datastore). The program is built from it once both have been read in full.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cni_nft::Batch;
use cni_policy::nft::{Enforcer, ProgramError, Summary};
use cni_policy::stored::{cluster_from, Key, Keys};
use cni_policy::{Cluster, Pod};

use cni_etcd::{Entry, WatchEvent};

/// The enforcement inputs of one node.
#[derive(Debug, Clone)]
pub struct View {
    keys: Keys,
    node: String,
    /// Stored policies, namespaces and other nodes' pods, by key.
    stored: BTreeMap<String, Vec<u8>>,
    /// The node's pods as its source last listed them.
    local: Option<Vec<Pod>>,
    loaded: bool,
}

/// What one build made, and what it was made from.
pub struct Built {
    pub batch: Batch,
    pub summary: Summary,
    pub policies: usize,
    pub cluster: Cluster,
    /// The addresses of this node's pods.
    pub local: BTreeSet<IpAddr>,
}

impl View {
    /// The view of `node` over the layout `keys`; nothing read yet.
    pub fn new(keys: Keys, node: &str) -> View {
        View {
            keys,
            node: node.to_string(),
            stored: BTreeMap::new(),
            local: None,
            loaded: false,
        }
    }

    /// Whether `key` is an input: a policy, a namespace or another node's pod (this node's
    /// own records are what it published from `local`).
    fn wanted(&self, key: &str) -> bool {
        match self.keys.parse(key) {
            Some(Key::Pod { node, .. }) => node != self.node,
            Some(_) => true,
            None => false,
        }
    }

    /// Takes a full read of the prefix; whether anything changed.
    pub fn load(&mut self, entries: Vec<Entry>) -> bool {
        let fresh: BTreeMap<String, Vec<u8>> = entries
            .into_iter()
            .filter(|e| self.wanted(&e.key))
            .map(|e| (e.key, e.value))
            .collect();
        let changed = !self.loaded || fresh != self.stored;
        self.stored = fresh;
        self.loaded = true;
        changed
    }

    /// Applies watched changes; whether any was an input.
    pub fn apply(&mut self, changes: Vec<WatchEvent>) -> bool {
        let mut changed = false;
        for change in changes {
            match change {
                WatchEvent::Put(e) if self.wanted(&e.key) => {
                    changed |= self.stored.get(&e.key) != Some(&e.value);
                    self.stored.insert(e.key, e.value);
                }
                WatchEvent::Delete { key } => changed |= self.stored.remove(&key).is_some(),
                WatchEvent::Put(_) => {}
            }
        }
        changed
    }

    /// Takes the node's pods as its source lists them now; whether they changed.
    pub fn set_local(&mut self, pods: Vec<Pod>) -> bool {
        let changed = self.local.as_ref() != Some(&pods);
        self.local = Some(pods);
        changed
    }

    /// Both the stored inputs and the local pods have been read in full: until then the
    /// program in the kernel (a previous run's) stays.
    pub fn ready(&self) -> bool {
        self.loaded && self.local.is_some()
    }

    /// The cluster as this node sees it, and the local pods' keys. Stored values that do
    /// not decode are logged and left out.
    pub fn cluster(&self) -> (Cluster, BTreeSet<String>) {
        let entries = self.stored.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        let (mut cluster, bad) = cluster_from(&self.keys, entries);
        for b in bad {
            log::warn!("policy input {b}; left out");
        }
        let local = self.local.clone().unwrap_or_default();
        let keys = local.iter().map(Pod::key).collect();
        // A pod of this node replaces a stale record of the same pod on another node.
        cluster
            .pods
            .retain(|p| !local.iter().any(|l| l.key() == p.key()));
        cluster.pods.extend(local);
        cluster
            .pods
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        (cluster, keys)
    }

    /// The program for this node's pods, as `enforcer`'s next batch (only what changed since
    /// the batch before, or the whole table first).
    pub fn build(&self, enforcer: &mut Enforcer) -> Result<Built, ProgramError> {
        let (cluster, local) = self.cluster();
        let (batch, summary) = enforcer.update(&cluster, |p| local.contains(&p.key()))?;
        let addresses = cluster
            .pods
            .iter()
            .filter(|p| local.contains(&p.key()))
            .flat_map(|p| p.ips.iter().copied())
            .collect();
        Ok(Built {
            batch,
            summary,
            policies: cluster.policies.len(),
            cluster,
            local: addresses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::stored::PodRecord;

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

    #[test]
    fn nothing_is_built_before_both_inputs_are_read_and_own_records_are_ignored() {
        let keys = Keys::new("/p");
        let mut view = View::new(keys.clone(), "n1");
        assert!(!view.ready());
        let remote =
            serde_json::to_vec(&PodRecord::of(&pod("x", "b", "198.18.2.2"), "n2")).unwrap();
        let own = serde_json::to_vec(&PodRecord::of(&pod("x", "old", "198.18.1.9"), "n1")).unwrap();
        assert!(view.load(vec![
            entry(keys.policy("x", "deny"), DENY),
            entry(keys.pod("n2", "x", "b"), &remote),
            entry(keys.pod("n1", "x", "old"), &own),
            entry("/p/subnets/198.19.1.0-24".into(), b"{}"),
        ]));
        assert!(!view.ready());
        assert!(view.set_local(vec![pod("x", "a", "198.18.1.2")]));
        assert!(view.ready());
        let (cluster, local) = view.cluster();
        let names: Vec<String> = cluster.pods.iter().map(Pod::key).collect();
        assert_eq!(names, ["x/a", "x/b"]);
        assert_eq!(local, ["x/a".to_string()].into());
        let built = view.build(&mut Enforcer::new()).unwrap();
        assert_eq!(built.policies, 1);
        // x/a is isolated by deny; x/b is on another node: not this node's to enforce.
        assert_eq!(built.summary.isolated_pods, 1);
    }

    #[test]
    fn only_changes_of_inputs_count() {
        let keys = Keys::new("/p");
        let mut view = View::new(keys.clone(), "n1");
        view.load(Vec::new());
        assert!(!view.load(Vec::new()));
        let own = keys.pod("n1", "x", "a");
        assert!(!view.apply(vec![WatchEvent::Put(entry(own, b"{}"))]));
        let subnet = "/p/subnets/198.19.1.0-24".to_string();
        assert!(!view.apply(vec![WatchEvent::Put(entry(subnet, b"{}"))]));
        let pol = keys.policy("x", "deny");
        let put = WatchEvent::Put(entry(pol.clone(), DENY));
        assert!(view.apply(vec![put.clone()]));
        assert!(!view.apply(vec![put]));
        assert!(view.apply(vec![WatchEvent::Delete { key: pol.clone() }]));
        assert!(!view.apply(vec![WatchEvent::Delete { key: pol }]));
        assert!(view.set_local(Vec::new()));
        assert!(!view.set_local(Vec::new()));
    }
}
