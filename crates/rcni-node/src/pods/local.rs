//! The node's pods, by sandbox ID: what the bridge plugin told at ADD (namespace, name,
//! addresses; labels once known) and what the pod source lists (labels, addresses), put
//! together into the local pods the policy program is made for.
//!
//! - A pod is keyed by its sandbox (container) ID, never only by `namespace/name`: a pod
//!   replaced by another of the same name (new sandbox, maybe new labels and the same
//!   address) is another entry, and never gets its predecessor's treatment.
//! - Of two entries with one `namespace/name`, or one address, the later one (by its ADD,
//!   or by the sandbox's creation time for pods only a scan found) has it: the earlier is
//!   a sandbox on its way out, and its traffic is held.
//! - A pod told at ADD stays until its DEL, or until its address's lease names another
//!   attachment ([`LocalPods::prune`]); one a scan found goes when a later scan no longer
//!   lists it. A DEL's sandbox is not brought back by a scan that started before the DEL.
//! - Labels unknown: the pod is given to the enforcer without labels, which holds it
//!   wherever a policy might select it; it is never a peer member nor published.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cni_policy::compact::{Interner, PodInfo};
use cni_policy::nft::{Change, PodId};
use cni_policy::selector::Labels;
use cni_policy::Pod;

use super::{Labelled, SourcePod};

/// A pod told at ADD.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Announced {
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// Empty when the ADD named no pod (no `K8S_POD_NAMESPACE`, e.g. `rcni add`).
    pub namespace: String,
    pub name: String,
    pub ips: Vec<IpAddr>,
    /// Known at ADD when the source knows the sandbox then (`rcni pod` records).
    #[serde(default)]
    pub labels: Option<Labels>,
    /// When it was told (nanoseconds since the epoch).
    pub at: i64,
}

impl Announced {
    /// Whether the ADD named a pod (Kubernetes' or `rcni pod`'s).
    pub fn is_named(&self) -> bool {
        !self.namespace.is_empty() && !self.name.is_empty()
    }
}

/// Nanoseconds since the epoch, now.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[derive(Debug, Clone)]
struct Entry {
    namespace: String,
    name: String,
    labels: Option<Labels>,
    ips: Vec<IpAddr>,
    /// Orders entries: the ADD's time, or the sandbox's creation time.
    order: i64,
    /// Told at ADD (and when), until a scan lists it.
    announced: Option<Instant>,
    /// A scan listed it.
    listed: bool,
}

impl Entry {
    /// The id the enforcer knows it by: `namespace/name`, or `/<sandbox ID>` for a pod the
    /// ADD named not (no policy can select it).
    fn key(&self, id: &str) -> String {
        match self.namespace.is_empty() {
            true => format!("/{id}"),
            false => format!("{}/{}", self.namespace, self.name),
        }
    }
}

/// What the enforcer was last told about one local pod.
#[derive(Debug, Clone)]
struct Told {
    sandbox: String,
    pod: Arc<PodInfo>,
}

/// The node's pods.
#[derive(Debug, Default)]
pub struct LocalPods {
    entries: HashMap<String, Entry>,
    /// Sandboxes whose DEL came, and when.
    forgotten: HashMap<String, Instant>,
    interner: Interner,
    told: BTreeMap<String, Told>,
}

impl LocalPods {
    pub fn new() -> Self {
        Self::default()
    }

    /// A pod told at ADD (a repeated ADD of a sandbox replaces what it told before).
    pub fn announce(&mut self, a: &Announced) {
        self.forgotten.remove(&a.container_id);
        let (namespace, name) = match a.is_named() {
            true => (a.namespace.clone(), a.name.clone()),
            false => (String::new(), String::new()),
        };
        self.entries.insert(
            a.container_id.clone(),
            Entry {
                namespace,
                name,
                labels: a.labels.clone().filter(|_| a.is_named()),
                ips: a.ips.clone(),
                order: a.at,
                announced: Some(Instant::now()),
                listed: false,
            },
        );
    }

    /// The labels of told pods, as their source knows them now; whether any was new.
    pub fn learned(&mut self, found: &[Labelled]) -> bool {
        let mut changed = false;
        for l in found {
            let Some(e) = self.entries.get_mut(&l.id) else {
                continue;
            };
            if e.namespace != l.namespace || e.name != l.name {
                log::warn!(
                    "sandbox {} was told as {}/{} but is {}/{} to its runtime; held",
                    l.id,
                    e.namespace,
                    e.name,
                    l.namespace,
                    l.name
                );
                continue;
            }
            if e.labels.as_ref() != Some(&l.labels) {
                e.labels = Some(l.labels.clone());
                changed = true;
            }
        }
        changed
    }

    /// A DEL: the sandbox's pod is gone. Whether it was known.
    pub fn forget(&mut self, sandbox: &str) -> bool {
        self.forgotten.insert(sandbox.to_string(), Instant::now());
        self.entries.remove(sandbox).is_some()
    }

    /// A scan that started at `started` listed `pods`.
    pub fn scanned(&mut self, started: Instant, pods: &[SourcePod]) {
        let mut listed: HashMap<&str, &SourcePod> = HashMap::with_capacity(pods.len());
        for p in pods {
            let deleted_since = self.forgotten.get(&p.id).is_some_and(|at| *at >= started);
            if !deleted_since {
                listed.insert(&p.id, p);
            }
        }
        self.entries
            .retain(|id, e| !e.listed || listed.contains_key(id.as_str()));
        for (id, p) in listed {
            let e = self.entries.entry(id.to_string()).or_insert_with(|| Entry {
                namespace: p.pod.namespace.clone(),
                name: p.pod.name.clone(),
                labels: None,
                ips: Vec::new(),
                order: p.created,
                announced: None,
                listed: true,
            });
            e.namespace = p.pod.namespace.clone();
            e.name = p.pod.name.clone();
            e.labels = Some(p.pod.labels.clone());
            e.ips = p.pod.ips.clone();
            e.announced = None;
            e.listed = true;
        }
        self.forgotten.retain(|_, at| *at >= started);
    }

    /// Drops the told pods no scan listed whose addresses `leased` says are no longer
    /// theirs (a DEL the agent was not told about); the sandboxes dropped.
    pub fn prune(&mut self, leased: impl Fn(&str, &IpAddr) -> bool) -> Vec<String> {
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter(|(id, e)| !e.listed && !e.ips.iter().any(|ip| leased(id, ip)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.entries.remove(id);
        }
        gone
    }

    /// The sandboxes told at ADD whose labels are not known yet (named pods only), with
    /// how long the oldest has waited.
    pub fn pending(&self) -> (Vec<String>, Option<std::time::Duration>) {
        let mut ids = Vec::new();
        let mut oldest = None;
        for (id, e) in &self.entries {
            if let (None, Some(at), false) = (&e.labels, e.announced, e.namespace.is_empty()) {
                ids.push(id.clone());
                let waited = at.elapsed();
                oldest = Some(oldest.map_or(waited, |o: std::time::Duration| o.max(waited)));
            }
        }
        ids.sort();
        (ids, oldest)
    }

    /// The pods the program is made for, by enforcer id: for each `namespace/name` the
    /// latest sandbox, with the addresses no later sandbox took.
    fn wanted(&mut self) -> BTreeMap<String, Told> {
        let mut owners: HashMap<IpAddr, (i64, &str)> = HashMap::new();
        for (id, e) in &self.entries {
            for ip in &e.ips {
                let owner = owners.entry(*ip).or_insert((e.order, id));
                if (e.order, id.as_str()) > (owner.0, owner.1) {
                    *owner = (e.order, id);
                }
            }
        }
        let mut winners: BTreeMap<String, (&str, &Entry)> = BTreeMap::new();
        for (id, e) in &self.entries {
            let key = e.key(id);
            let better = winners
                .get(&key)
                .is_none_or(|(wid, w)| (e.order, id.as_str()) > (w.order, *wid));
            if better {
                winners.insert(key, (id, e));
            }
        }
        let mut out = BTreeMap::new();
        for (key, (id, e)) in winners {
            let ips: Vec<IpAddr> = e
                .ips
                .iter()
                .copied()
                .filter(|ip| owners.get(ip).is_some_and(|(_, owner)| *owner == id))
                .collect();
            if ips.is_empty() {
                continue;
            }
            let labels = e.labels.as_ref().map(|l| {
                self.interner
                    .labels(l.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            });
            let pod = PodInfo {
                namespace: self.interner.sym(&e.namespace),
                name: e.name.as_str().into(),
                labels,
                ips: ips.into_boxed_slice(),
                named_ports: None,
            };
            let told = Told {
                sandbox: id.to_string(),
                pod: Arc::new(pod),
            };
            out.insert(key, told);
        }
        out
    }

    /// The enforcer's changes since the last call. A pod whose sandbox changed is removed
    /// and added (its predecessor's connections are stale); others are updated in place.
    pub fn changes(&mut self) -> Vec<Change> {
        let wanted = self.wanted();
        let mut out = Vec::new();
        let remove = |key: &str| Change::Pod {
            id: PodId::from(key),
            pod: None,
            local: true,
        };
        for (key, told) in &self.told {
            match wanted.get(key) {
                None => out.push(remove(key)),
                Some(w) if w.sandbox != told.sandbox => out.push(remove(key)),
                Some(_) => {}
            }
        }
        for (key, w) in &wanted {
            let same = self
                .told
                .get(key)
                .is_some_and(|t| t.sandbox == w.sandbox && t.pod == w.pod);
            if !same {
                out.push(Change::Pod {
                    id: PodId::from(key.as_str()),
                    pod: Some(w.pod.clone()),
                    local: true,
                });
            }
        }
        self.told = wanted;
        out
    }

    /// The pods to publish: those with a name and known labels.
    pub fn published(&self) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self
            .told
            .values()
            .filter(|t| t.pod.labels.is_some() && !t.pod.namespace.is_empty())
            .map(|t| t.pod.to_pod())
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Whether the sandbox `id` is known.
    pub fn knows(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(id: &str, ns: &str, name: &str, ip: &str, at: i64) -> Announced {
        Announced {
            container_id: id.into(),
            ifname: "eth0".into(),
            netns: format!("/run/netns/{id}"),
            namespace: ns.into(),
            name: name.into(),
            ips: vec![ip.parse().unwrap()],
            labels: None,
            at,
        }
    }

    fn listed(id: &str, ns: &str, name: &str, label: &str, ip: &str, created: i64) -> SourcePod {
        SourcePod {
            id: id.into(),
            pod: Pod {
                namespace: ns.into(),
                name: name.into(),
                labels: [("app".to_string(), label.to_string())].into(),
                ips: vec![ip.parse().unwrap()],
                named_ports: Default::default(),
            },
            created,
        }
    }

    /// `(id, labels known, address count)` of every upsert, `id` of every removal.
    fn summary(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Pod {
                    id, pod: Some(p), ..
                } => format!(
                    "+{id} {} {}",
                    p.labels
                        .as_ref()
                        .and_then(|l| l.iter().next().map(|(_, v)| v.to_string()))
                        .unwrap_or("?".into()),
                    p.ips.len()
                ),
                Change::Pod { id, pod: None, .. } => format!("-{id}"),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_told_pod_is_held_until_its_labels_come_and_goes_with_its_del() {
        let mut l = LocalPods::new();
        l.announce(&told("s1", "x", "a", "198.18.1.2", 10));
        assert_eq!(summary(&l.changes()), ["+x/a ? 1"]);
        assert_eq!(l.pending().0, ["s1"]);
        assert!(l.published().is_empty(), "no labels: not published");
        let labels = Labelled {
            id: "s1".into(),
            namespace: "x".into(),
            name: "a".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
        };
        assert!(l.learned(std::slice::from_ref(&labels)));
        assert!(!l.learned(&[labels]));
        assert_eq!(summary(&l.changes()), ["+x/a web 1"]);
        assert!(l.pending().0.is_empty());
        assert_eq!(l.published().len(), 1);
        assert!(l.changes().is_empty());
        // A scan that started before the DEL does not bring it back.
        let started = Instant::now();
        assert!(l.forget("s1"));
        l.scanned(started, &[listed("s1", "x", "a", "web", "198.18.1.2", 1)]);
        assert_eq!(summary(&l.changes()), ["-x/a"]);
        assert!(!l.knows("s1"));
    }

    #[test]
    fn a_replaced_pod_is_another_pod_even_with_the_same_name_and_address() {
        let mut l = LocalPods::new();
        let t0 = Instant::now();
        l.scanned(t0, &[listed("old", "x", "a", "web", "198.18.1.2", 5)]);
        assert_eq!(summary(&l.changes()), ["+x/a web 1"]);
        // The new sandbox is told before the old one's DEL (or a scan) says it is gone.
        l.announce(&told("new", "x", "a", "198.18.1.2", 50));
        assert_eq!(summary(&l.changes()), ["-x/a", "+x/a ? 1"]);
        // The old one listed again (a stale scan): the new one keeps name and address.
        l.scanned(
            Instant::now(),
            &[listed("old", "x", "a", "web", "198.18.1.2", 5)],
        );
        assert!(l.changes().is_empty());
        // Another pod on the old one's address: the later ADD has it.
        l.announce(&told("other", "y", "b", "198.18.1.2", 60));
        let changes = summary(&l.changes());
        assert_eq!(changes, ["-x/a", "+y/b ? 1"]);
    }

    #[test]
    fn scans_add_and_remove_listed_pods_and_leave_told_ones_to_their_del() {
        let mut l = LocalPods::new();
        l.announce(&told("anon", "", "", "198.18.1.9", 1));
        l.scanned(
            Instant::now(),
            &[listed("s1", "x", "a", "web", "198.18.1.2", 1)],
        );
        assert_eq!(summary(&l.changes()), ["+/anon ? 1", "+x/a web 1"]);
        // A pod the ADD named no pod for is never waited on, nor published.
        assert!(l.pending().0.is_empty());
        assert_eq!(l.published().len(), 1);
        l.scanned(Instant::now(), &[]);
        assert_eq!(summary(&l.changes()), ["-x/a"]);
        // Its lease names another attachment: a DEL the agent missed.
        assert!(l.prune(|_, _| true).is_empty());
        assert_eq!(l.prune(|_, _| false), ["anon"]);
        assert_eq!(summary(&l.changes()), ["-/anon"]);
    }
}
