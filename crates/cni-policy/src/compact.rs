//! Pods as the incremental pipeline keeps them: a node agent holds one for every pod of the
//! cluster, so each is small. Namespaces and label keys and values are interned strings,
//! and a label set is interned whole: the pods of one workload (a ReplicaSet's, a
//! StatefulSet's) carry the same labels and share one copy. One [`PodInfo`] is shared
//! (`Arc`) between the agent's view of the datastore and the [`crate::nft::Enforcer`].

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use crate::cluster::{Pod, Protocol};
use crate::selector::{LabelLookup, Labels};

/// An interned string.
pub type Sym = Arc<str>;

/// A pod's labels, sorted by key, shared by every pod with the same labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSet(Arc<[(Sym, Sym)]>);

impl Hash for LabelSet {
    // As the slice hashes, so that a set is found by a borrowed slice ([`Interner::labels`]).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0[..].hash(state);
    }
}

impl Borrow<[(Sym, Sym)]> for LabelSet {
    fn borrow(&self) -> &[(Sym, Sym)] {
        &self.0
    }
}

impl LabelLookup for LabelSet {
    fn label(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[i].1)
    }
}

impl LabelSet {
    /// The labels as a map.
    pub fn to_labels(&self) -> Labels {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

/// Interned strings and label sets. Entries nobody else holds any more are dropped from time
/// to time (when the tables have doubled since the last sweep), so churn of label values
/// (a Deployment's `pod-template-hash`) does not grow it for ever.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Sym>,
    label_sets: HashSet<LabelSet>,
    /// Table sizes after the last sweep.
    swept_at: usize,
}

/// Below this many entries the tables are never swept.
const SWEEP_FLOOR: usize = 4096;

impl Interner {
    /// The shared copy of `s`.
    pub fn sym(&mut self, s: &str) -> Sym {
        if let Some(found) = self.strings.get(s) {
            return found.clone();
        }
        self.sweep_if_grown();
        let sym: Sym = Arc::from(s);
        self.strings.insert(sym.clone());
        sym
    }

    /// The shared copy of the label set `labels`.
    pub fn labels<'a>(&mut self, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> LabelSet {
        let mut pairs: Vec<(Sym, Sym)> = labels
            .into_iter()
            .map(|(k, v)| (self.sym(k), self.sym(v)))
            .collect();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        if let Some(found) = self.label_sets.get(&pairs[..]) {
            return found.clone();
        }
        let set = LabelSet(Arc::from(pairs));
        self.label_sets.insert(set.clone());
        set
    }

    /// Entries held by nobody but this table.
    fn sweep_if_grown(&mut self) {
        let size = self.strings.len() + self.label_sets.len();
        if size < SWEEP_FLOOR.max(2 * self.swept_at) {
            return;
        }
        self.label_sets.retain(|s| Arc::strong_count(&s.0) > 1);
        self.strings.retain(|s| Arc::strong_count(s) > 1);
        self.swept_at = self.strings.len() + self.label_sets.len();
    }
}

/// A pod, compactly: what selectors and the program need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: Sym,
    pub name: Box<str>,
    /// `None` while they are not known (a pod the node agent learned from its ADD, before
    /// its runtime lists it): no selector selects it, and it is held wherever a policy
    /// might select it.
    pub labels: Option<LabelSet>,
    pub ips: Box<[IpAddr]>,
    /// Container port names, where known (for named ports).
    pub named_ports: Option<Box<BTreeMap<String, (Protocol, u16)>>>,
}

impl PodInfo {
    /// `pod`, with its strings interned in `interner`.
    pub fn of(pod: &Pod, interner: &mut Interner) -> PodInfo {
        PodInfo {
            namespace: interner.sym(&pod.namespace),
            name: pod.name.as_str().into(),
            labels: Some(interner.labels(pod.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))),
            ips: pod.ips.clone().into_boxed_slice(),
            named_ports: (!pod.named_ports.is_empty()).then(|| Box::new(pod.named_ports.clone())),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The pod as the model sees it (no labels while they are unknown).
    pub fn to_pod(&self) -> Pod {
        Pod {
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            labels: self
                .labels
                .as_ref()
                .map(LabelSet::to_labels)
                .unwrap_or_default(),
            ips: self.ips.to_vec(),
            named_ports: self.named_ports.as_deref().cloned().unwrap_or_default(),
        }
    }

    /// The named port `name` of this pod for `protocol`.
    pub fn named_port(&self, protocol: Protocol, name: &str) -> Option<u16> {
        let &(p, number) = self.named_ports.as_ref()?.get(name)?;
        (p == protocol).then_some(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::matches;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    #[test]
    fn equal_label_sets_are_one_copy_and_select_as_maps_do() {
        let mut i = Interner::default();
        let a = i.labels([("app", "web"), ("tier", "front")]);
        let b = i.labels([("tier", "front"), ("app", "web")]);
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a.label("app"), Some("web"));
        assert_eq!(a.label("zone"), None);
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        };
        assert_eq!(matches(&sel, &a), matches(&sel, &a.to_labels()));
        assert_eq!(a.to_labels().len(), 2);
    }

    #[test]
    fn strings_nobody_holds_are_swept_once_the_table_doubles() {
        let mut i = Interner::default();
        let kept = i.sym("kept");
        for n in 0..SWEEP_FLOOR * 3 {
            i.sym(&format!("gone-{n}"));
        }
        assert!(i.strings.len() < SWEEP_FLOOR * 2, "{}", i.strings.len());
        assert!(Arc::ptr_eq(&kept, &i.sym("kept")));
    }

    #[test]
    fn a_pod_round_trips() {
        let mut i = Interner::default();
        let pod = Pod {
            namespace: "x".into(),
            name: "a".into(),
            labels: [("pod".to_string(), "a".to_string())].into(),
            ips: vec!["198.18.0.5".parse().unwrap()],
            named_ports: [("http".to_string(), (Protocol::Tcp, 80))].into(),
        };
        let info = PodInfo::of(&pod, &mut i);
        assert_eq!(info.to_pod(), pod);
        assert_eq!(info.named_port(Protocol::Tcp, "http"), Some(80));
        assert_eq!(info.named_port(Protocol::Udp, "http"), None);
        assert_eq!(info.key(), "x/a");
    }
}
