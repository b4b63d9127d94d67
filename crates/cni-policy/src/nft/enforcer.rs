//! [`Enforcer`]: the program of a node kept up to date change by change. It takes what
//! changed ([`Change`]: a pod, a policy or a namespace, upserted or removed), updates only
//! what depends on it, and hands back a batch of only the kernel objects that changed.
//!
//! What depends on what, and what one change costs (none of it grows with the cluster):
//! - a policy selects pods of its own namespace only, and only the node's own pods need
//!   chains: a policy is evaluated against the local pods of its namespace; a local pod
//!   against the policies of its namespace;
//! - a peer (a distinct pod-selecting peer of a rule, by its description) has members only
//!   while a policy with chains on this node uses it ("wanted"): policies that select no
//!   local pod need no sets here. Each wanted peer knows which namespaces it covers (its
//!   own, or those its `namespaceSelector` selects); a pod change is checked against the
//!   wanted peers covering the pod's namespace only, and a new peer is computed over the
//!   pods of the namespaces it covers only;
//! - a namespace's labels change the coverage of the peers with a `namespaceSelector`;
//! - a policy's chain changes with the policy, when one of its peers gains its first or
//!   loses its last address of a family, when it starts or stops selecting a local pod, and
//!   (named ports only) when a pod with named ports changes.
//!
//! With a hold ([`Enforcer::with_hold`]), every local pod the enforcer knows gets a dispatch
//! element per address and direction: a jump to its chain where a policy isolates it,
//! `accept` where none does. A local pod whose labels are not known yet
//! ([`PodInfo::labels`] `None`) gets `accept` only in a direction no policy of its namespace
//! has; elsewhere it has no element, and the hold of the skeleton drops its packets (see
//! [`super`]). Without a hold an address without element passes: only isolated pods have
//! one (a jump).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use cni_nft::{Batch, SetType};
use ipnet::IpNet;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::objects::{Objects, Target};
use super::rules::{self, dispatch_map_name};
use super::{pod_chain_name, policy_chain_name, ProgramError, Summary};
use crate::cluster::NAMESPACE_NAME_LABEL;
use crate::compact::{Interner, PodInfo};
use crate::effective::Direction;
use crate::selector::Labels;

mod adapter;
mod decide;
mod peers;
mod policy;

use peers::PeerState;
use policy::PolicyState;

const DIRECTIONS: [Direction; 2] = [Direction::Egress, Direction::Ingress];

/// How the enforcer knows a pod: any unique text. A local pod's is its `namespace/name`
/// (its chains are named after it, as `rcni doctor` expects); the node agent gives a remote
/// pod its datastore key.
pub type PodId = Arc<str>;

/// One change of the cluster.
#[derive(Debug, Clone)]
pub enum Change {
    /// Pod `id` is now `pod` (`None`: gone), on this node (`local`) or another.
    Pod {
        id: PodId,
        pod: Option<Arc<PodInfo>>,
        local: bool,
    },
    /// Policy `namespace/name` is now `policy` (`None`: gone).
    Policy {
        key: String,
        policy: Option<Arc<NetworkPolicy>>,
    },
    /// Namespace `name`'s object now has `labels` (`None`: it has no object).
    Namespace {
        name: String,
        labels: Option<Labels>,
    },
}

/// A batch and what it means.
#[derive(Debug)]
pub struct Delta {
    pub batch: Batch,
    pub summary: Summary,
    /// Addresses of local pods whose policies may now deny a connection they allowed: their
    /// open connections are to be judged again ([`Enforcer::admits`]).
    pub narrowed: Vec<IpAddr>,
    /// Addresses that left the node's pods: every open connection of theirs is stale.
    pub released: Vec<IpAddr>,
}

/// The nf_tables program of a node, updated incrementally.
///
/// The node agent keeps one for its lifetime, gives it every change with
/// [`Enforcer::apply`] and commits each batch [`Enforcer::batch`] returns. The first batch
/// (and the first after [`Enforcer::reset`]) replaces the whole table atomically; later
/// batches touch only the set elements, verdict-map elements, chains and sets that changed,
/// and are empty when nothing did. When a commit fails, call [`Enforcer::reset`]: the
/// kernel's table is then unknown and the next batch replaces it.
pub struct Enforcer {
    /// The node's pod subnets: addresses in them without a dispatch element are dropped.
    hold: Vec<IpNet>,
    objects: Objects,
    /// The next batch replaces the whole table.
    full: bool,
    namespaces: HashMap<String, NsState>,
    pods: HashMap<PodId, PodState>,
    policies: BTreeMap<String, PolicyState>,
    /// The wanted peers, by description.
    peers: HashMap<String, PeerState>,
    /// Wanted peers by the namespaces they cover.
    peers_by_ns: HashMap<String, BTreeSet<String>>,
    /// The local pods' addresses.
    local_ips: HashMap<IpAddr, PodId>,
    /// Pods with named ports (any node).
    named_port_pods: BTreeSet<PodId>,
    /// The policies that select a local pod (and so have chains).
    with_chains: BTreeSet<String>,
    dirty: Dirty,
    /// For [`Enforcer::update`]'s conversions.
    interner: Interner,
}

/// A namespace: its labels and what is in it.
#[derive(Debug, Default)]
struct NsState {
    /// The labels of its Namespace object, when it has one.
    object: Option<Labels>,
    /// Its labels as selectors see them (the object's and the name label).
    labels: Labels,
    pods: HashSet<PodId>,
    local: BTreeSet<PodId>,
    policies: BTreeSet<String>,
}

impl NsState {
    fn new(name: &str) -> Self {
        NsState {
            labels: [(NAMESPACE_NAME_LABEL.to_string(), name.to_string())].into(),
            ..NsState::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.object.is_none() && self.pods.is_empty() && self.policies.is_empty()
    }
}

struct PodState {
    pod: Arc<PodInfo>,
    local: bool,
}

/// What changed since the last batch and still has to be written into the objects.
#[derive(Default)]
struct Dirty {
    /// Local pods whose chains and dispatch elements are to be written.
    pods: BTreeSet<PodId>,
    /// Policies whose chains are to be written (or removed).
    policies: BTreeSet<String>,
    /// Peers whose sets may have appeared or gone (an address family gained or lost).
    peers: BTreeSet<String>,
    /// A pod with named ports changed: the chains of policies with named ports are stale.
    named_ports: bool,
    /// Addresses of local pods that went.
    released: Vec<IpAddr>,
}

impl Default for Enforcer {
    fn default() -> Self {
        Self::new()
    }
}

impl Enforcer {
    /// An enforcer without a hold: an address the dispatch does not know passes.
    pub fn new() -> Self {
        Self::with_hold(Vec::new())
    }

    /// An enforcer whose program drops the addresses of `hold` (the node's pod subnets) that
    /// the dispatch does not know, both ways.
    pub fn with_hold(hold: Vec<IpNet>) -> Self {
        Enforcer {
            hold,
            objects: Objects::default(),
            full: true,
            namespaces: HashMap::new(),
            pods: HashMap::new(),
            policies: BTreeMap::new(),
            peers: HashMap::new(),
            peers_by_ns: HashMap::new(),
            local_ips: HashMap::new(),
            named_port_pods: BTreeSet::new(),
            with_chains: BTreeSet::new(),
            dirty: Dirty::default(),
            interner: Interner::default(),
        }
    }

    /// Makes the next batch replace the whole table (after a failed commit).
    pub fn reset(&mut self) {
        self.full = true;
    }

    /// Takes one change. A policy with a selector Kubernetes would refuse is an error and
    /// changes nothing (the policy's previous version, if any, stays).
    pub fn apply(&mut self, change: Change) -> Result<(), ProgramError> {
        match change {
            Change::Pod { id, pod, local } => self.pod_changed(id, pod, local),
            Change::Policy { key, policy } => self.policy_changed(key, policy)?,
            Change::Namespace { name, labels } => self.namespace_changed(&name, labels),
        }
        Ok(())
    }

    /// The batch bringing the kernel from the last batch's program to the current one.
    pub fn batch(&mut self) -> Result<Delta, ProgramError> {
        self.write_dirty()?;
        let released = std::mem::take(&mut self.dirty.released);
        let peers = &self.peers;
        let members = |set: &str| peers::members_of(peers, set);
        if std::mem::take(&mut self.full) {
            let batch = self.objects.full_batch(&self.hold, &members)?;
            return Ok(Delta {
                batch,
                summary: self.summary(),
                narrowed: self.local_ips.keys().copied().collect(),
                released,
            });
        }
        let (batch, touched) = self.objects.delta_batch(&members)?;
        let narrowed = self.narrowed(&touched);
        Ok(Delta {
            batch,
            summary: self.summary(),
            narrowed,
            released,
        })
    }

    /// What the program holds.
    pub fn summary(&self) -> Summary {
        let chains = self.objects.chains.current();
        let isolated: BTreeSet<&str> = chains
            .keys()
            .filter_map(|n| n.strip_prefix("pod-"))
            .map(|n| n.get(2..).unwrap_or(n))
            .collect();
        let dispatch = self.objects.dispatch.current();
        let held = self
            .local_ips
            .keys()
            .filter(|_| !self.hold.is_empty())
            .filter(|ip| {
                DIRECTIONS
                    .iter()
                    .any(|d| !dispatch.contains_key(&(dispatch_map_name(*d, **ip), **ip)))
            })
            .count();
        let members: usize = self.peers.values().map(|p| p.ips.len()).sum();
        Summary {
            policies: self.policies.len(),
            isolated_pods: isolated.len(),
            policy_chains: chains.keys().filter(|n| n.starts_with("pol-")).count(),
            peer_sets: self.objects.sets.current().len(),
            elements: members + self.objects.dispatch.current().len(),
            held_addresses: held,
        }
    }

    fn ns_entry(&mut self, name: &str) -> &mut NsState {
        if !self.namespaces.contains_key(name) {
            self.namespaces.insert(name.to_string(), NsState::new(name));
            self.cover_namespace(name);
        }
        self.namespaces.get_mut(name).expect("inserted above")
    }

    fn drop_ns_if_empty(&mut self, name: &str) {
        if self.namespaces.get(name).is_some_and(NsState::is_empty) {
            self.namespaces.remove(name);
            if let Some(peers) = self.peers_by_ns.remove(name) {
                for what in peers {
                    if let Some(p) = self.peers.get_mut(&what) {
                        p.covered.remove(name);
                    }
                }
            }
        }
    }

    fn pod_changed(&mut self, id: PodId, pod: Option<Arc<PodInfo>>, local: bool) {
        let old = self.pods.remove(&id);
        if let (Some(o), Some(n)) = (&old, &pod) {
            if o.local == local && (Arc::ptr_eq(&o.pod, n) || o.pod == *n) {
                self.pods.insert(
                    id,
                    PodState {
                        pod: n.clone(),
                        local,
                    },
                );
                return;
            }
        }
        if let Some(old) = &old {
            self.unindex_pod(&id, old);
            // Addresses the pod keeps (a relabelled pod) keep their connections, to be
            // judged again; the others are released.
            if old.local {
                let kept = |ip: &IpAddr| local && pod.as_ref().is_some_and(|n| n.ips.contains(ip));
                let released = old.pod.ips.iter().filter(|ip| !kept(ip));
                self.dirty.released.extend(released);
            }
        }
        if let Some(pod) = pod {
            let state = PodState { pod, local };
            self.index_pod(&id, &state);
            self.pods.insert(id, state);
        }
    }

    /// Takes back everything `state` (pod `id`) had: peer memberships, dispatch and chains,
    /// the policies' selections.
    fn unindex_pod(&mut self, id: &PodId, state: &PodState) {
        let ns = &*state.pod.namespace;
        self.count_in_peers(&state.pod, false);
        if state.pod.named_ports.is_some() {
            self.named_port_pods.remove(id);
            self.dirty.named_ports = true;
        }
        let Some(entry) = self.namespaces.get_mut(ns) else {
            return;
        };
        entry.pods.remove(id);
        if state.local {
            entry.local.remove(id);
            let policies: Vec<String> = entry.policies.iter().cloned().collect();
            for key in policies {
                self.unselect(&key, id);
            }
            for ip in state.pod.ips.iter() {
                if self.local_ips.get(ip) == Some(id) {
                    self.local_ips.remove(ip);
                }
                for direction in DIRECTIONS {
                    self.objects
                        .dispatch
                        .set((dispatch_map_name(direction, *ip), *ip), None);
                }
            }
            for direction in DIRECTIONS {
                self.objects.chains.set(pod_chain_name(id, direction), None);
            }
            // Its namespace's other local pods are unaffected; the pod itself is gone.
            self.dirty.pods.remove(id);
        }
        self.drop_ns_if_empty(ns);
    }

    /// Makes pod `id` (`state`) known: its namespace, peer memberships, and for a local
    /// pod the policies selecting it.
    fn index_pod(&mut self, id: &PodId, state: &PodState) {
        let ns = state.pod.namespace.clone();
        let entry = self.ns_entry(&ns);
        entry.pods.insert(id.clone());
        if state.local {
            entry.local.insert(id.clone());
            let policies: Vec<String> = entry.policies.iter().cloned().collect();
            for key in policies {
                let selects = self
                    .policies
                    .get(&key)
                    .is_some_and(|p| p.selects(&state.pod));
                if selects {
                    self.select(&key, id);
                }
            }
            for ip in state.pod.ips.iter() {
                self.local_ips.insert(*ip, id.clone());
            }
            self.dirty.pods.insert(id.clone());
        }
        if state.pod.named_ports.is_some() {
            self.named_port_pods.insert(id.clone());
            self.dirty.named_ports = true;
        }
        self.count_in_peers(&state.pod, true);
    }

    /// Adds (or removes) `pod`'s addresses to (from) every wanted peer selecting it.
    fn count_in_peers(&mut self, pod: &PodInfo, add: bool) {
        let Some(labels) = &pod.labels else { return };
        let Some(wanted) = self.peers_by_ns.get(&*pod.namespace) else {
            return;
        };
        for what in wanted {
            let Some(peer) = self.peers.get_mut(what) else {
                continue;
            };
            if !peer.selects_labels(labels) {
                continue;
            }
            if peer.count(&pod.ips, add, &mut self.objects) {
                self.dirty.peers.insert(what.clone());
            }
        }
    }

    /// Policy `key` now selects local pod `id`.
    fn select(&mut self, key: &str, id: &PodId) {
        let Some(p) = self.policies.get_mut(key) else {
            return;
        };
        let first = p.selected_local.is_empty();
        p.selected_local.insert(id.clone());
        self.dirty.policies.insert(key.to_string());
        if first {
            self.with_chains.insert(key.to_string());
            self.use_peers(key);
        }
    }

    /// Policy `key` no longer selects local pod `id`.
    fn unselect(&mut self, key: &str, id: &PodId) {
        let Some(p) = self.policies.get_mut(key) else {
            return;
        };
        if !p.selected_local.remove(id) {
            return;
        }
        self.dirty.policies.insert(key.to_string());
        if p.selected_local.is_empty() {
            let used = p.used_peers().map(|(w, _)| w.clone()).collect();
            self.with_chains.remove(key);
            self.unuse_peers(key, used);
        }
    }

    fn policy_changed(
        &mut self,
        key: String,
        policy: Option<Arc<NetworkPolicy>>,
    ) -> Result<(), ProgramError> {
        let new = policy
            .as_deref()
            .map(|p| PolicyState::new(&key, p))
            .transpose()?;
        if let (Some(old), Some(new)) = (self.policies.get(&key), &new) {
            if old.policy == new.policy {
                return Ok(());
            }
        }
        if let Some(old) = self.policies.remove(&key) {
            if !old.selected_local.is_empty() {
                self.with_chains.remove(&key);
                self.unuse_peers(&key, old.used_peers().map(|(w, _)| w.clone()).collect());
            }
            self.dirty_namespace_pods(&old.namespace);
            if let Some(entry) = self.namespaces.get_mut(&old.namespace) {
                entry.policies.remove(&key);
            }
            self.drop_ns_if_empty(&old.namespace);
        }
        self.dirty.policies.insert(key.clone());
        let Some(mut state) = new else {
            return Ok(());
        };
        let ns = state.namespace.clone();
        let entry = self.ns_entry(&ns);
        entry.policies.insert(key.clone());
        let local: Vec<PodId> = entry.local.iter().cloned().collect();
        for id in local {
            if self.pods.get(&id).is_some_and(|s| state.selects(&s.pod)) {
                state.selected_local.insert(id);
            }
        }
        let wanted = !state.selected_local.is_empty();
        self.policies.insert(key.clone(), state);
        if wanted {
            self.with_chains.insert(key.clone());
            self.use_peers(&key);
        }
        self.dirty_namespace_pods(&ns);
        Ok(())
    }

    /// Every local pod of `ns` gets its chains and dispatch written again (a policy of the
    /// namespace came or went: selections, and whether a pod of unknown labels is held).
    fn dirty_namespace_pods(&mut self, ns: &str) {
        if let Some(entry) = self.namespaces.get(ns) {
            self.dirty.pods.extend(entry.local.iter().cloned());
        }
    }

    fn namespace_changed(&mut self, name: &str, labels: Option<Labels>) {
        let entry = self.ns_entry(name);
        if entry.object == labels {
            self.drop_ns_if_empty(name);
            return;
        }
        let mut selector_labels = labels.clone().unwrap_or_default();
        selector_labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
        entry.object = labels;
        entry.labels = selector_labels;
        self.cover_namespace(name);
        self.drop_ns_if_empty(name);
    }

    /// Brings every wanted peer with a namespace selector in line with `name`'s labels.
    fn cover_namespace(&mut self, name: &str) {
        let Some(entry) = self.namespaces.get(name) else {
            return;
        };
        let mut flips = Vec::new();
        for (what, peer) in &self.peers {
            if let Some(covers) = peer.covers_labels(&entry.labels) {
                if covers != peer.covered.contains(name) {
                    flips.push((what.clone(), covers));
                }
            }
        }
        for (what, covers) in flips {
            self.set_coverage(&what, name, covers);
        }
    }

    /// Peer `what` now covers namespace `ns` (or no longer): its pods join or leave.
    fn set_coverage(&mut self, what: &str, ns: &str, covers: bool) {
        let Some(peer) = self.peers.get_mut(what) else {
            return;
        };
        if covers {
            peer.covered.insert(ns.to_string());
            let by_ns = self.peers_by_ns.entry(ns.to_string()).or_default();
            by_ns.insert(what.to_string());
        } else {
            peer.covered.remove(ns);
            if let Some(by_ns) = self.peers_by_ns.get_mut(ns) {
                by_ns.remove(what);
                if by_ns.is_empty() {
                    self.peers_by_ns.remove(ns);
                }
            }
        }
        let Some(entry) = self.namespaces.get(ns) else {
            return;
        };
        let mut families_changed = false;
        for id in &entry.pods {
            let Some(state) = self.pods.get(id) else {
                continue;
            };
            let Some(labels) = &state.pod.labels else {
                continue;
            };
            if peer.selects_labels(labels) {
                families_changed |= peer.count(&state.pod.ips, covers, &mut self.objects);
            }
        }
        if families_changed {
            self.dirty.peers.insert(what.to_string());
        }
    }

    /// Policy `key` has chains now: each peer it uses is wanted (computed if new).
    fn use_peers(&mut self, key: &str) {
        let Some(p) = self.policies.get(key) else {
            return;
        };
        let used: Vec<(String, k8s_openapi::api::networking::v1::NetworkPolicyPeer)> = p
            .used_peers()
            .map(|(w, peer)| (w.clone(), peer.clone()))
            .collect();
        let namespace = p.namespace.clone();
        for (what, peer) in used {
            if let Some(existing) = self.peers.get_mut(&what) {
                existing.users.insert(key.to_string());
                continue;
            }
            let mut state = PeerState::new(&what, peer);
            state.users.insert(key.to_string());
            let covered = state.coverage(&namespace, &self.namespaces);
            self.peers.insert(what.clone(), state);
            for ns in covered {
                self.set_coverage(&what, &ns, true);
            }
            self.dirty.peers.insert(what);
        }
    }

    /// Policy `key`, which uses the peers `used`, has no chains any more. A peer nobody
    /// uses any more is dropped when the batch is made, so that a policy replaced by a new
    /// version keeps its peers' members instead of computing them again.
    fn unuse_peers(&mut self, key: &str, used: Vec<String>) {
        for what in used {
            if let Some(peer) = self.peers.get_mut(&what) {
                peer.users.remove(key);
                self.dirty.peers.insert(what);
            }
        }
    }

    /// Drops peer `what` and its sets.
    fn drop_peer(&mut self, what: &str) {
        let Some(peer) = self.peers.remove(what) else {
            return;
        };
        for ns in &peer.covered {
            if let Some(by_ns) = self.peers_by_ns.get_mut(ns) {
                by_ns.remove(what);
                if by_ns.is_empty() {
                    self.peers_by_ns.remove(ns);
                }
            }
        }
        for name in &peer.names {
            self.objects.sets.set(name.clone(), None);
        }
    }

    /// Writes what changed into the objects: peer sets that appear or go, policy chains,
    /// then the local pods' chains and dispatch elements.
    fn write_dirty(&mut self) -> Result<(), ProgramError> {
        let mut dirty = std::mem::take(&mut self.dirty);
        self.dirty.released = std::mem::take(&mut dirty.released);
        if dirty.named_ports {
            let named = self.policies.iter().filter(|(_, p)| p.named_ports);
            dirty.policies.extend(named.map(|(k, _)| k.clone()));
        }
        for what in &dirty.peers {
            if self.peers.get(what).is_some_and(|p| p.users.is_empty()) {
                self.drop_peer(what);
            }
            let Some(peer) = self.peers.get(what) else {
                continue;
            };
            for (i, key) in [SetType::Ipv4Addr, SetType::Ipv6Addr]
                .into_iter()
                .enumerate()
            {
                let exists = peer.families[i] > 0;
                self.objects
                    .sets
                    .set(peer.names[i].clone(), exists.then_some(key));
            }
            dirty.policies.extend(peer.users.iter().cloned());
        }
        for key in &dirty.policies {
            self.write_policy(key)?;
        }
        for id in &dirty.pods {
            self.write_pod(id)?;
        }
        Ok(())
    }

    /// Writes the chains of policy `key` (or removes them where it selects no local pod).
    fn write_policy(&mut self, key: &str) -> Result<(), ProgramError> {
        for direction in DIRECTIONS {
            let name = policy_chain_name(key, direction);
            let rules = match self.policies.get(key) {
                Some(p) if !p.selected_local.is_empty() && p.types.contains(&direction) => {
                    let context = decide::Context {
                        enforcer: self,
                        policy: p,
                        direction,
                    };
                    Some(rules::policy_chain(
                        &name,
                        direction,
                        p.rules(direction),
                        &context,
                    )?)
                }
                _ => None,
            };
            self.objects.chains.set(name, rules);
        }
        Ok(())
    }

    /// Writes the chains and dispatch elements of local pod `id`.
    fn write_pod(&mut self, id: &PodId) -> Result<(), ProgramError> {
        let Some(state) = self.pods.get(id).filter(|s| s.local) else {
            return Ok(());
        };
        let pod = state.pod.clone();
        let Some(entry) = self.namespaces.get(&*pod.namespace) else {
            return Ok(());
        };
        for direction in DIRECTIONS {
            let mut targets = Vec::new();
            let mut namespace_isolates = false;
            for key in &entry.policies {
                let Some(p) = self.policies.get(key) else {
                    continue;
                };
                if !p.types.contains(&direction) {
                    continue;
                }
                namespace_isolates = true;
                if p.selected_local.contains(id) {
                    targets.push(policy_chain_name(key, direction));
                }
            }
            let chain = pod_chain_name(id, direction);
            let (rules, target) = if !targets.is_empty() {
                let rules = rules::pod_chain(&chain, &targets)?;
                (Some(rules), Some(Target::Jump(chain.clone())))
            } else if self.hold.is_empty() {
                // Without a hold, an address the dispatch does not know passes.
                (None, None)
            } else if pod.labels.is_some() || !namespace_isolates {
                (None, Some(Target::Accept))
            } else {
                // Labels unknown where a policy might select it: held.
                (None, None)
            };
            for ip in pod.ips.iter() {
                let element = (dispatch_map_name(direction, *ip), *ip);
                self.objects.dispatch.set(element, target.clone());
            }
            self.objects.chains.set(chain, rules);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
