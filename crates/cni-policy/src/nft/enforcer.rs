//! [`Enforcer`]: the program of a node kept up to date change by change. It remembers the
//! cluster it last saw and what it derived from it, finds what a new view changed (pods,
//! policies, namespace labels), recomputes only what depends on that, and hands back a batch
//! of only the objects that changed.
//!
//! What depends on what:
//! - a policy selects pods of its own namespace only, so a changed pod or policy makes its
//!   namespace's pod chains and policy selections recomputed, no other namespace's;
//! - a peer's members are kept per distinct peer (its description), updated pod by pod as
//!   pods change, and computed once over all pods when a policy brings a new peer;
//! - a policy's chain changes with the policy, when one of its peers gains or loses its
//!   last address of a family, when it starts or stops selecting a local pod, and (named
//!   ports only) when any pod changes;
//! - a change of namespace labels recomputes everything (peers select namespaces by label).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use cni_nft::{Batch, SetType};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::objects::{Objects, PeerSet};
use super::rules::{self, dispatch_map_name, PeerRef, PolicyContext, PolicyRule};
use super::{peer_set_name, pod_chain_name, policy_chain_name, ProgramError, Summary};
use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::{
    describe_peer, ip_block, peer_selects, policy_key, policy_namespace, policy_types, raw_rules,
    resolve_ports, Direction, Peer, PortSpec,
};
use crate::selector::{matches, Labels};

const DIRECTIONS: [Direction; 2] = [Direction::Egress, Direction::Ingress];

/// The nf_tables program of a node, updated incrementally.
///
/// The node agent keeps one for its lifetime and calls [`Enforcer::update`] with every new
/// view of the cluster, committing each batch it returns. The first batch (and the first
/// after [`Enforcer::reset`]) replaces the whole table atomically, as [`super::program`]'s
/// does, so a previous run's program is swapped with no open window; later batches touch
/// only the set elements, verdict-map elements, chains and sets that changed, and are empty
/// when nothing did. When a commit fails, call [`Enforcer::reset`]: the kernel's table is
/// then unknown and the next batch replaces it.
pub struct Enforcer {
    objects: Objects,
    /// The next batch replaces the whole table.
    full: bool,
    namespaces: BTreeMap<String, Labels>,
    /// By `namespace/name`.
    pods: BTreeMap<String, PodState>,
    /// By `namespace/name`.
    policies: BTreeMap<String, PolicyState>,
    /// Pod-selecting peers of the policies, by description.
    peers: HashMap<String, PeerState>,
    /// Peers whose address sets the program has (those of its policy chains).
    wanted_peers: BTreeSet<String>,
}

impl Default for Enforcer {
    fn default() -> Self {
        Self {
            objects: Objects::default(),
            full: true,
            namespaces: BTreeMap::new(),
            pods: BTreeMap::new(),
            policies: BTreeMap::new(),
            peers: HashMap::new(),
            wanted_peers: BTreeSet::new(),
        }
    }
}

struct PodState {
    pod: Pod,
    local: bool,
}

/// A policy as the program uses it.
struct PolicyState {
    policy: NetworkPolicy,
    namespace: String,
    pod_selector: LabelSelector,
    types: Vec<Direction>,
    ingress: Vec<PolicyRule>,
    egress: Vec<PolicyRule>,
    /// The pod-selecting peers of its rules, by description.
    peers: BTreeMap<String, NetworkPolicyPeer>,
    named_ports: bool,
    /// The pods (any node) it selects, by `namespace/name`.
    selected: BTreeSet<String>,
    /// The directions it has a chain in (it selects a local pod there).
    chains: BTreeSet<Direction>,
}

/// The addresses of the pods a peer selects, each counted once per pod having it.
struct PeerState {
    namespace: String,
    peer: NetworkPolicyPeer,
    ips: BTreeMap<IpAddr, usize>,
}

/// What a new view of the cluster changed.
#[derive(Default)]
struct Dirty {
    /// Recompute everything (namespace labels changed).
    all: bool,
    /// Some pod changed.
    pods: bool,
    namespaces: BTreeSet<String>,
    policies: BTreeSet<String>,
    /// Peers whose members changed, and those of them whose address families changed.
    peers: BTreeSet<String>,
    families: BTreeSet<String>,
}

impl Enforcer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next batch replace the whole table (after a failed commit).
    pub fn reset(&mut self) {
        self.full = true;
    }

    /// The batch bringing the kernel from the last program to the one for `cluster` and the
    /// pods `is_local` picks, and what the new program holds. On error the enforcer starts
    /// over: the next successful update replaces the whole table.
    pub fn update(
        &mut self,
        cluster: &Cluster,
        is_local: impl Fn(&Pod) -> bool,
    ) -> Result<(Batch, Summary), ProgramError> {
        let batch = self.apply(cluster, &is_local).and_then(|()| {
            if std::mem::take(&mut self.full) {
                self.objects.full_batch()
            } else {
                self.objects.delta_batch()
            }
        });
        match batch {
            Ok(batch) => Ok((batch, self.objects.summary())),
            Err(e) => {
                *self = Self::default();
                Err(e)
            }
        }
    }

    fn apply(
        &mut self,
        cluster: &Cluster,
        is_local: &dyn Fn(&Pod) -> bool,
    ) -> Result<(), ProgramError> {
        let mut dirty = Dirty::default();
        if cluster.namespaces != self.namespaces {
            self.namespaces = cluster.namespaces.clone();
            self.peers.clear();
            dirty.all = true;
        }
        self.sync_pods(cluster, is_local, &mut dirty)?;
        self.sync_policies(cluster, &mut dirty)?;
        let mut rebuild = dirty.policies.clone();
        for (key, state) in &self.policies {
            let peer_changed = state.peers.keys().any(|w| dirty.families.contains(w));
            if dirty.all || peer_changed || (dirty.pods && state.named_ports) {
                rebuild.insert(key.clone());
            }
        }
        if dirty.all {
            let pods = self.pods.values().map(|s| s.pod.namespace.clone());
            let policies = self.policies.values().map(|s| s.namespace.clone());
            dirty.namespaces.extend(pods.chain(policies));
        }
        for ns in &dirty.namespaces {
            self.rebuild_namespace(ns, &mut rebuild)?;
        }
        for key in &rebuild {
            self.write_policy(key)?;
        }
        self.write_sets(&dirty);
        Ok(())
    }

    fn sync_pods(
        &mut self,
        cluster: &Cluster,
        is_local: &dyn Fn(&Pod) -> bool,
        dirty: &mut Dirty,
    ) -> Result<(), ProgramError> {
        let mut seen = HashSet::with_capacity(cluster.pods.len());
        for pod in &cluster.pods {
            let key = pod.key();
            let local = is_local(pod);
            let same = self.pods.get(&key);
            if !same.is_some_and(|s| s.local == local && s.pod == *pod) {
                let new = PodState {
                    pod: pod.clone(),
                    local,
                };
                let old = self.pods.insert(key.clone(), new);
                self.pod_changed(cluster, old, Some(pod), dirty)?;
            }
            seen.insert(key);
        }
        let gone = unseen(&self.pods, &seen);
        for key in gone {
            let old = self.pods.remove(&key);
            self.pod_changed(cluster, old, None, dirty)?;
        }
        Ok(())
    }

    /// Takes back what `old` had in the program and moves the pod in every peer's members.
    fn pod_changed(
        &mut self,
        cluster: &Cluster,
        old: Option<PodState>,
        new: Option<&Pod>,
        dirty: &mut Dirty,
    ) -> Result<(), ProgramError> {
        dirty.pods = true;
        let Some(namespace) = new
            .map(|p| &p.namespace)
            .or(old.as_ref().map(|o| &o.pod.namespace))
        else {
            return Ok(());
        };
        dirty.namespaces.insert(namespace.clone());
        let labels = cluster.namespace_labels(namespace);
        if let Some(old) = old.as_ref().filter(|o| o.local) {
            for direction in DIRECTIONS {
                let chain = pod_chain_name(&old.pod.key(), direction);
                self.objects.chains.set(chain, None);
                for ip in &old.pod.ips {
                    self.objects
                        .dispatch
                        .set((dispatch_map_name(direction, *ip), *ip), None);
                }
            }
        }
        for (what, peer) in &mut self.peers {
            let families = peer.families();
            let mut changed = false;
            if let Some(old) = &old {
                if peer_selects(&peer.peer, &peer.namespace, &old.pod, &labels)? {
                    peer.count(&old.pod, false);
                    changed = true;
                }
            }
            if let Some(new) = new {
                if peer_selects(&peer.peer, &peer.namespace, new, &labels)? {
                    peer.count(new, true);
                    changed = true;
                }
            }
            if changed {
                dirty.peers.insert(what.clone());
                if peer.families() != families {
                    dirty.families.insert(what.clone());
                }
            }
        }
        Ok(())
    }

    fn sync_policies(&mut self, cluster: &Cluster, dirty: &mut Dirty) -> Result<(), ProgramError> {
        let mut seen = HashSet::with_capacity(cluster.policies.len());
        for policy in &cluster.policies {
            let key = policy_key(policy);
            let same = self.policies.get(&key).is_some_and(|s| s.policy == *policy);
            if dirty.all || !same {
                let state = PolicyState::new(policy);
                for (what, peer) in &state.peers {
                    if !self.peers.contains_key(what) {
                        let members = PeerState::new(&state.namespace, peer, cluster)?;
                        self.peers.insert(what.clone(), members);
                    }
                }
                dirty.namespaces.insert(state.namespace.clone());
                self.policies.insert(key.clone(), state);
                dirty.policies.insert(key.clone());
            }
            seen.insert(key);
        }
        let gone = unseen(&self.policies, &seen);
        for key in gone {
            if let Some(old) = self.policies.remove(&key) {
                dirty.namespaces.insert(old.namespace);
            }
            for direction in DIRECTIONS {
                self.objects
                    .chains
                    .set(policy_chain_name(&key, direction), None);
            }
            dirty.policies.insert(key);
        }
        if !dirty.policies.is_empty() {
            let used: HashSet<&String> = self
                .policies
                .values()
                .flat_map(|s| s.peers.keys())
                .collect();
            self.peers.retain(|what, _| used.contains(what));
        }
        Ok(())
    }

    /// Recomputes which pods of `namespace` its policies select, and the chains and
    /// dispatch of its local pods; policies whose selection changed go to `rebuild`.
    fn rebuild_namespace(
        &mut self,
        namespace: &str,
        rebuild: &mut BTreeSet<String>,
    ) -> Result<(), ProgramError> {
        let prefix = format!("{namespace}/");
        let pods: Vec<(&String, &PodState)> = in_namespace(&self.pods, &prefix).collect();
        let policy_keys: Vec<String> = in_namespace(&self.policies, &prefix)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &policy_keys {
            let Some(state) = self.policies.get_mut(key) else {
                continue;
            };
            let mut selected = BTreeSet::new();
            for (pod_key, pod) in &pods {
                if matches(&state.pod_selector, &pod.pod.labels)? {
                    selected.insert((*pod_key).clone());
                }
            }
            let has_local = pods.iter().any(|(k, p)| p.local && selected.contains(*k));
            let chains: BTreeSet<Direction> =
                state.types.iter().copied().filter(|_| has_local).collect();
            if selected != state.selected || chains != state.chains {
                state.selected = selected;
                rebuild.insert(key.clone());
            }
        }
        for (pod_key, pod) in pods.iter().filter(|(_, p)| p.local) {
            for direction in DIRECTIONS {
                let targets: Vec<String> = policy_keys
                    .iter()
                    .filter(|k| {
                        let s = &self.policies[*k];
                        s.types.contains(&direction) && s.selected.contains(*pod_key)
                    })
                    .map(|k| policy_chain_name(k, direction))
                    .collect();
                let chain = pod_chain_name(pod_key, direction);
                let rules = if targets.is_empty() {
                    None
                } else {
                    Some(rules::pod_chain(&chain, &targets)?)
                };
                for ip in &pod.pod.ips {
                    let jump = rules.is_some().then(|| chain.clone());
                    self.objects
                        .dispatch
                        .set((dispatch_map_name(direction, *ip), *ip), jump);
                }
                self.objects.chains.set(chain, rules);
            }
        }
        Ok(())
    }

    /// Writes the chains of policy `key` (or removes them where it selects no local pod).
    fn write_policy(&mut self, key: &str) -> Result<(), ProgramError> {
        let Some(state) = self.policies.get(key) else {
            return Ok(());
        };
        let has_local = state
            .selected
            .iter()
            .any(|p| self.pods.get(p).is_some_and(|s| s.local));
        let mut chains = BTreeSet::new();
        for direction in DIRECTIONS {
            let name = policy_chain_name(key, direction);
            if !(has_local && state.types.contains(&direction)) {
                self.objects.chains.set(name, None);
                continue;
            }
            let context = Context {
                peers: &self.peers,
                pods: &self.pods,
                selected: &state.selected,
                direction,
            };
            let rules = rules::policy_chain(&name, direction, state.rules(direction), &context)?;
            self.objects.chains.set(name, Some(rules));
            chains.insert(direction);
        }
        if let Some(state) = self.policies.get_mut(key) {
            state.chains = chains;
        }
        Ok(())
    }

    /// Writes the address sets of the peers the program's policy chains use, and removes the
    /// others.
    fn write_sets(&mut self, dirty: &Dirty) {
        let mut wanted = BTreeSet::new();
        for state in self.policies.values() {
            for direction in &state.chains {
                let peers = state
                    .rules(*direction)
                    .iter()
                    .flat_map(|r| r.peers.iter().flatten());
                for peer in peers {
                    if let PeerRef::Pods(what) = peer {
                        wanted.insert(what.clone());
                    }
                }
            }
        }
        for what in self.wanted_peers.difference(&wanted) {
            for v6 in [false, true] {
                self.objects.sets.set(peer_set_name(what, v6), None);
            }
        }
        for what in &wanted {
            let stale =
                dirty.all || dirty.peers.contains(what) || !self.wanted_peers.contains(what);
            let Some(peer) = self.peers.get(what).filter(|_| stale) else {
                continue;
            };
            for (v6, key) in [(false, SetType::Ipv4Addr), (true, SetType::Ipv6Addr)] {
                let members: BTreeSet<IpAddr> = peer
                    .ips
                    .keys()
                    .copied()
                    .filter(|ip| ip.is_ipv6() == v6)
                    .collect();
                let set = (!members.is_empty()).then_some(PeerSet { key, members });
                self.objects.sets.set(peer_set_name(what, v6), set);
            }
        }
        self.wanted_peers = wanted;
    }
}

/// The keys of `map` not in `seen` (objects gone from the cluster).
fn unseen<V>(map: &BTreeMap<String, V>, seen: &HashSet<String>) -> Vec<String> {
    map.keys().filter(|k| !seen.contains(*k)).cloned().collect()
}

/// The entries of `map` (keyed `namespace/name`) whose key starts with `prefix`.
fn in_namespace<'a, V>(
    map: &'a BTreeMap<String, V>,
    prefix: &'a str,
) -> impl Iterator<Item = (&'a String, &'a V)> {
    map.range(prefix.to_string()..)
        .take_while(move |(k, _)| k.starts_with(prefix))
}

impl PolicyState {
    fn new(policy: &NetworkPolicy) -> Self {
        let namespace = policy_namespace(policy).to_string();
        let mut peers = BTreeMap::new();
        let mut named_ports = false;
        let mut rules = |direction| -> Vec<PolicyRule> {
            raw_rules(policy, direction)
                .into_iter()
                .map(|(raw_peers, raw_ports)| {
                    let ports = resolve_ports(raw_ports);
                    named_ports |= ports
                        .iter()
                        .flatten()
                        .any(|p| matches!(p, PortSpec::Named { .. }));
                    let peers = raw_peers.filter(|p| !p.is_empty()).map(|list| {
                        list.iter()
                            .filter_map(|p| peer_ref(p, &namespace, &mut peers))
                            .collect()
                    });
                    PolicyRule { peers, ports }
                })
                .collect()
        };
        let ingress = rules(Direction::Ingress);
        let egress = rules(Direction::Egress);
        Self {
            policy: policy.clone(),
            pod_selector: policy
                .spec
                .as_ref()
                .and_then(|s| s.pod_selector.clone())
                .unwrap_or_default(),
            types: policy_types(policy),
            ingress,
            egress,
            peers,
            named_ports,
            selected: BTreeSet::new(),
            chains: BTreeSet::new(),
            namespace,
        }
    }

    fn rules(&self, direction: Direction) -> &[PolicyRule] {
        match direction {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }
}

/// The rule peer for `peer`; pod-selecting peers are also recorded in `peers`.
fn peer_ref(
    peer: &NetworkPolicyPeer,
    namespace: &str,
    peers: &mut BTreeMap<String, NetworkPolicyPeer>,
) -> Option<PeerRef> {
    if let Some(block) = &peer.ip_block {
        let Some(Peer::Block { cidr, except }) = ip_block(block) else {
            return None;
        };
        return Some(PeerRef::Block { cidr, except });
    }
    let what = describe_peer(peer, namespace);
    peers.insert(what.clone(), peer.clone());
    Some(PeerRef::Pods(what))
}

impl PeerState {
    /// The members of `peer` of a policy in `namespace`, over every pod of `cluster`.
    fn new(
        namespace: &str,
        peer: &NetworkPolicyPeer,
        cluster: &Cluster,
    ) -> Result<Self, ProgramError> {
        let mut out = Self {
            namespace: namespace.to_string(),
            peer: peer.clone(),
            ips: BTreeMap::new(),
        };
        let mut labels: HashMap<&str, Labels> = HashMap::new();
        for pod in &cluster.pods {
            let ns_labels = labels
                .entry(&pod.namespace)
                .or_insert_with(|| cluster.namespace_labels(&pod.namespace));
            if peer_selects(peer, namespace, pod, ns_labels)? {
                out.count(pod, true);
            }
        }
        Ok(out)
    }

    fn count(&mut self, pod: &Pod, add: bool) {
        for ip in &pod.ips {
            let n = self.ips.entry(*ip).or_default();
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.ips.remove(ip);
                }
            }
        }
    }

    /// Whether it has IPv4 and IPv6 members (IPv4 addresses sort before IPv6 ones).
    fn families(&self) -> [bool; 2] {
        let first = self.ips.keys().next();
        let last = self.ips.keys().next_back();
        [
            first.is_some_and(|ip| ip.is_ipv4()),
            last.is_some_and(|ip| ip.is_ipv6()),
        ]
    }
}

/// What a policy chain's rules depend on, from the enforcer's state.
struct Context<'a> {
    peers: &'a HashMap<String, PeerState>,
    pods: &'a BTreeMap<String, PodState>,
    selected: &'a BTreeSet<String>,
    direction: Direction,
}

impl PolicyContext for Context<'_> {
    fn families(&self, what: &str) -> [bool; 2] {
        self.peers
            .get(what)
            .map_or([false, false], PeerState::families)
    }

    /// For ingress the pods the policy selects; for egress every pod (the peer match narrows
    /// it to the allowed destinations).
    fn named_port(&self, protocol: Protocol, name: &str) -> Vec<(IpAddr, u16)> {
        let pods: Vec<&PodState> = match self.direction {
            Direction::Ingress => self
                .selected
                .iter()
                .filter_map(|k| self.pods.get(k))
                .collect(),
            Direction::Egress => self.pods.values().collect(),
        };
        pods.into_iter()
            .filter_map(|s| {
                let &(p, number) = s.pod.named_ports.get(name)?;
                (p == protocol).then_some((&s.pod.ips, number))
            })
            .flat_map(|(ips, number)| ips.iter().map(move |ip| (*ip, number)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
