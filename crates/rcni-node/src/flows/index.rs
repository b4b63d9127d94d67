//! The agent's names for the flow log: the same changes the policy worker gives its enforcer
//! (pods of every node, policies), indexed by what a record carries: an address, a pod
//! chain's name, a policy chain's name. Pods are the enforcer's own shared values (`Arc`),
//! so the index adds only its maps: an address and two chain names per pod, two chain names
//! per policy. Namespace labels do not matter here: a policy selects pods of its own
//! namespace by their labels only.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use cni_policy::compact::PodInfo;
use cni_policy::effective::{policy_namespace, policy_types};
use cni_policy::nft::{pod_chain_name, policy_chain_name, Change, PodId};
use cni_policy::selector::matches;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use rcni_flows::Direction;

use super::names::{ClusterNames, LocalPod, PodRef};

const DIRECTIONS: [cni_policy::Direction; 2] = [
    cni_policy::Direction::Egress,
    cni_policy::Direction::Ingress,
];

/// What the index knows.
#[derive(Debug, Default)]
pub struct ClusterIndex {
    pods: HashMap<PodId, (Arc<PodInfo>, bool)>,
    by_ip: HashMap<IpAddr, PodId>,
    /// Local pods by the names of their chains.
    pod_chains: HashMap<String, PodId>,
    policies: HashMap<String, Arc<NetworkPolicy>>,
    /// Policies and directions by the names of their chains.
    policy_chains: HashMap<String, (String, cni_policy::Direction)>,
    /// Policy keys by namespace.
    by_namespace: HashMap<String, BTreeSet<String>>,
}

impl ClusterIndex {
    /// Takes one change (after the enforcer took it).
    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::Pod { id, pod, local } => {
                self.remove_pod(id);
                if let Some(pod) = pod {
                    self.add_pod(id, pod, *local);
                }
            }
            Change::Policy { key, policy } => {
                self.remove_policy(key);
                if let Some(policy) = policy {
                    self.add_policy(key, policy);
                }
            }
            Change::Namespace { .. } => {}
        }
    }

    fn add_pod(&mut self, id: &PodId, pod: &Arc<PodInfo>, local: bool) {
        for ip in pod.ips.iter() {
            self.by_ip.insert(*ip, id.clone());
        }
        if local {
            for d in DIRECTIONS {
                self.pod_chains.insert(pod_chain_name(id, d), id.clone());
            }
        }
        self.pods.insert(id.clone(), (pod.clone(), local));
    }

    fn remove_pod(&mut self, id: &PodId) {
        let Some((pod, local)) = self.pods.remove(id) else {
            return;
        };
        for ip in pod.ips.iter() {
            // Another pod may have taken the address since.
            if self.by_ip.get(ip) == Some(id) {
                self.by_ip.remove(ip);
            }
        }
        if local {
            for d in DIRECTIONS {
                self.pod_chains.remove(&pod_chain_name(id, d));
            }
        }
    }

    fn add_policy(&mut self, key: &str, policy: &Arc<NetworkPolicy>) {
        for d in DIRECTIONS {
            self.policy_chains
                .insert(policy_chain_name(key, d), (key.to_string(), d));
        }
        self.by_namespace
            .entry(policy_namespace(policy).to_string())
            .or_default()
            .insert(key.to_string());
        self.policies.insert(key.to_string(), policy.clone());
    }

    fn remove_policy(&mut self, key: &str) {
        let Some(policy) = self.policies.remove(key) else {
            return;
        };
        for d in DIRECTIONS {
            self.policy_chains.remove(&policy_chain_name(key, d));
        }
        let ns = policy_namespace(&policy);
        if let Some(keys) = self.by_namespace.get_mut(ns) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_namespace.remove(ns);
            }
        }
    }

    /// The policies of `pod`'s namespace of `direction` that select it.
    fn isolating_pod(&self, pod: &PodInfo, direction: cni_policy::Direction) -> Vec<String> {
        let Some(labels) = &pod.labels else {
            return Vec::new();
        };
        let Some(keys) = self.by_namespace.get(&*pod.namespace) else {
            return Vec::new();
        };
        keys.iter()
            .filter(|key| {
                self.policies.get(*key).is_some_and(|p| {
                    let selector = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.pod_selector.clone())
                        .unwrap_or_default();
                    policy_types(p).contains(&direction)
                        && matches(&selector, labels).unwrap_or(false)
                })
            })
            .cloned()
            .collect()
    }
}

fn policy_direction(d: Direction) -> cni_policy::Direction {
    match d {
        Direction::Egress => cni_policy::Direction::Egress,
        Direction::Ingress => cni_policy::Direction::Ingress,
    }
}

fn pod_ref(pod: &PodInfo) -> PodRef {
    PodRef {
        namespace: pod.namespace.to_string(),
        name: pod.name.to_string(),
    }
}

/// The index shared by the policy worker (which writes it) and the flow log (which reads it).
#[derive(Debug, Clone, Default)]
pub struct SharedIndex(Arc<RwLock<ClusterIndex>>);

impl SharedIndex {
    /// Takes `change` (a panicked writer leaves a usable index).
    pub fn apply(&self, change: &Change) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(change);
    }

    fn read(&self) -> RwLockReadGuard<'_, ClusterIndex> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ClusterNames for SharedIndex {
    fn pod_at(&self, ip: IpAddr) -> Option<PodRef> {
        let i = self.read();
        let id = i.by_ip.get(&ip)?;
        i.pods.get(id).map(|(p, _)| pod_ref(p))
    }

    fn pod_of_chain(&self, chain: &str) -> Option<PodRef> {
        let i = self.read();
        let id = i.pod_chains.get(chain)?;
        i.pods.get(id).map(|(p, _)| pod_ref(p))
    }

    fn isolating(&self, pod: &PodRef, direction: Direction) -> Vec<String> {
        let i = self.read();
        // A local pod's id is its `namespace/name`.
        match i.pods.get(pod.key().as_str()) {
            Some((p, true)) => i.isolating_pod(p, policy_direction(direction)),
            _ => Vec::new(),
        }
    }

    fn policy_rule(&self, chain: &str, rule: usize) -> Option<(String, String)> {
        let i = self.read();
        let (key, direction) = i.policy_chains.get(chain)?;
        let policy = i.policies.get(key)?;
        let described = cni_policy::describe::rule(policy, *direction, rule)?;
        Some((key.clone(), described))
    }

    fn has_policy(&self, key: &str) -> bool {
        self.read().policies.contains_key(key)
    }

    fn local_pods(&self) -> Vec<LocalPod> {
        let i = self.read();
        let mut out: Vec<LocalPod> = i
            .pods
            .values()
            .filter(|(_, local)| *local)
            .map(|(p, _)| LocalPod {
                namespace: p.namespace.to_string(),
                name: p.name.to_string(),
                ips: p.ips.to_vec(),
                labels: p
                    .labels
                    .as_ref()
                    .map(|l| l.to_labels().into_iter().collect())
                    .unwrap_or_default(),
                ingress: i.isolating_pod(p, cni_policy::Direction::Ingress),
                egress: i.isolating_pod(p, cni_policy::Direction::Egress),
                held: p.labels.is_none(),
            })
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::compact::Interner;
    use cni_policy::Pod;

    fn pod_change(ns: &str, name: &str, ip: &str, app: Option<&str>, local: bool) -> Change {
        let pod = Pod {
            namespace: ns.into(),
            name: name.into(),
            labels: app
                .map(|a| [("app".to_string(), a.to_string())].into())
                .unwrap_or_default(),
            ips: vec![ip.parse().unwrap()],
            named_ports: Default::default(),
        };
        let mut info = PodInfo::of(&pod, &mut Interner::default());
        if app.is_none() {
            info.labels = None;
        }
        let id: PodId = match local {
            true => pod.key().into(),
            false => format!("/p/pods/n2/{ns}/{name}").into(),
        };
        Change::Pod {
            id,
            pod: Some(Arc::new(info)),
            local,
        }
    }

    fn policy_change(ns: &str, name: &str, yaml_spec: &str) -> Change {
        let yaml = format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{yaml_spec}"
        );
        let Ok(mut docs) = cni_policy::parse_documents(&yaml) else {
            panic!("{yaml}")
        };
        let cni_policy::Document::NetworkPolicy(p) = docs.remove(0) else {
            panic!("not a policy")
        };
        Change::Policy {
            key: format!("{ns}/{name}"),
            policy: Some(Arc::new(*p)),
        }
    }

    #[test]
    fn names_from_the_changes_the_enforcer_takes() {
        let index = SharedIndex::default();
        for c in [
            pod_change("shop", "db", "198.19.1.3", Some("db"), true),
            pod_change("shop", "web", "198.19.2.5", Some("web"), false),
            pod_change("shop", "new", "198.19.1.4", None, true),
            policy_change("shop", "deny-all", "  podSelector: {}\n"),
            policy_change(
                "shop",
                "db-from-web",
                "  podSelector: {matchLabels: {app: db}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {app: web}}}]\n    ports: [{port: 5432}]\n",
            ),
            policy_change("other", "x", "  podSelector: {}\n"),
        ] {
            index.apply(&c);
        }
        let db = PodRef {
            namespace: "shop".into(),
            name: "db".into(),
        };
        assert_eq!(
            index.pod_at("198.19.2.5".parse().unwrap()).unwrap().key(),
            "shop/web"
        );
        let chain = pod_chain_name("shop/db", cni_policy::Direction::Ingress);
        assert_eq!(index.pod_of_chain(&chain), Some(db.clone()));
        assert_eq!(
            index.isolating(&db, Direction::Ingress),
            ["shop/db-from-web", "shop/deny-all"]
        );
        assert!(index.isolating(&db, Direction::Egress).is_empty());
        let chain = policy_chain_name("shop/db-from-web", cni_policy::Direction::Ingress);
        let (policy, rule) = index.policy_rule(&chain, 0).unwrap();
        assert_eq!(policy, "shop/db-from-web");
        assert_eq!(
            rule,
            "ingress[0]: from pods: app=web in namespace shop; on TCP/5432"
        );
        let pods = index.local_pods();
        assert_eq!(pods.len(), 2);
        assert_eq!((pods[0].name.as_str(), pods[0].ingress.len()), ("db", 2));
        assert!(pods[1].held && pods[1].ingress.is_empty());
        // Gone: nothing of them is left.
        index.apply(&Change::Policy {
            key: "shop/db-from-web".into(),
            policy: None,
        });
        index.apply(&Change::Pod {
            id: "shop/db".into(),
            pod: None,
            local: true,
        });
        assert!(!index.has_policy("shop/db-from-web") && index.has_policy("shop/deny-all"));
        assert_eq!(index.policy_rule(&chain, 0), None);
        assert_eq!(index.pod_at("198.19.1.3".parse().unwrap()), None);
        let i = index.read();
        assert_eq!((i.pods.len(), i.by_ip.len(), i.pod_chains.len()), (2, 2, 2));
        assert_eq!(i.policy_chains.len(), 4);
    }
}
