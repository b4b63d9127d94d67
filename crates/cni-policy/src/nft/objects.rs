//! The objects of a program by name, each kind with a journal of what changed since the last
//! batch, and the two batches made from them: the full one that replaces the table, and the
//! delta that touches only what changed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cni_nft::{Batch, Chain, Rule, Set, SetElement, SetType, Verdict, VerdictMap};

use super::rules::{skeleton, MAPS};
use super::{ProgramError, Summary, F, TABLE};

/// A map of objects that remembers, per key, the value it had before the first change since
/// the last [`Journaled::take_changes`].
pub(super) struct Journaled<K: Ord + Clone, V: PartialEq> {
    current: BTreeMap<K, V>,
    before: BTreeMap<K, Option<V>>,
}

impl<K: Ord + Clone, V: PartialEq> Default for Journaled<K, V> {
    fn default() -> Self {
        Self {
            current: BTreeMap::new(),
            before: BTreeMap::new(),
        }
    }
}

/// One object that changed: its name, the value it had and the one it has (never equal).
type Change<'a, K, V> = (K, Option<V>, Option<&'a V>);

impl<K: Ord + Clone, V: PartialEq> Journaled<K, V> {
    /// Sets (`Some`) or removes (`None`) the object `key`.
    pub(super) fn set(&mut self, key: K, value: Option<V>) {
        let old = match value {
            Some(v) => self.current.insert(key.clone(), v),
            None => self.current.remove(&key),
        };
        self.before.entry(key).or_insert(old);
    }

    pub(super) fn current(&self) -> &BTreeMap<K, V> {
        &self.current
    }

    /// The objects whose value differs from the last time changes were taken.
    fn take_changes(&mut self) -> Vec<Change<'_, K, V>> {
        let before = std::mem::take(&mut self.before);
        before
            .into_iter()
            .filter_map(|(k, old)| {
                let new = self.current.get(&k);
                (old.as_ref() != new).then_some((k, old, new))
            })
            .collect()
    }
}

/// A peer address set: its key type and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PeerSet {
    pub key: SetType,
    pub members: BTreeSet<IpAddr>,
}

impl PeerSet {
    fn elements<'a>(ips: impl Iterator<Item = &'a IpAddr>) -> Vec<SetElement> {
        ips.map(|ip| SetElement::addr(*ip)).collect()
    }
}

/// Everything in the table besides its skeleton (base chains and verdict maps).
#[derive(Default)]
pub(super) struct Objects {
    /// Regular chains and their rules.
    pub chains: Journaled<String, Vec<Rule>>,
    pub sets: Journaled<String, PeerSet>,
    /// Verdict-map elements: (map, address) → the chain jumped to.
    pub dispatch: Journaled<(&'static str, IpAddr), String>,
}

/// The verdict map `name` of [`MAPS`].
pub fn verdict_map(name: &str) -> VerdictMap {
    let key = MAPS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(SetType::Ipv4Addr, |(_, k)| *k);
    VerdictMap::new(F, TABLE, name, key)
}

impl Objects {
    /// A batch that replaces whatever table is there with these objects.
    pub(super) fn full_batch(&mut self) -> Result<Batch, ProgramError> {
        self.chains.before.clear();
        self.sets.before.clear();
        self.dispatch.before.clear();
        let mut b = Batch::new();
        b.add_table(F, TABLE)?;
        b.destroy_table(F, TABLE)?;
        b.add_table(F, TABLE)?;
        skeleton(&mut b)?;
        for (name, set) in self.sets.current() {
            let s = Set::new(F, TABLE, name, set.key);
            b.add_set(&s)?;
            b.add_elements(&s, &PeerSet::elements(set.members.iter()))?;
        }
        // Every chain exists before any rule jumps to it.
        for name in self.chains.current().keys() {
            b.add_chain(&Chain::regular(F, TABLE, name))?;
        }
        for rules in self.chains.current().values() {
            rules.iter().for_each(|r| b.add_rule(r));
        }
        let mut by_map: BTreeMap<&str, Vec<(IpAddr, Verdict)>> = BTreeMap::new();
        for ((map, ip), chain) in self.dispatch.current() {
            let verdict = Verdict::Jump(chain.clone());
            by_map.entry(map).or_default().push((*ip, verdict));
        }
        for (map, elements) in by_map {
            b.add_verdict_elements(&verdict_map(map), &elements)?;
        }
        Ok(b)
    }

    /// A batch that changes only the objects that changed since the last batch, in an order
    /// the kernel accepts: what is referenced is created before and deleted after its users.
    pub(super) fn delta_batch(&mut self) -> Result<Batch, ProgramError> {
        let mut b = Batch::new();
        let sets = self.sets.take_changes();
        let chains = self.chains.take_changes();
        let dispatch = self.dispatch.take_changes();
        for (name, old, new) in &sets {
            let Some(new) = new else { continue };
            let s = Set::new(F, TABLE, name, new.key);
            let Some(old) = old else {
                b.add_set(&s)?;
                b.add_elements(&s, &PeerSet::elements(new.members.iter()))?;
                continue;
            };
            let gone = PeerSet::elements(old.members.difference(&new.members));
            let added = PeerSet::elements(new.members.difference(&old.members));
            if !gone.is_empty() {
                b.delete_elements(&s, &gone)?;
            }
            if !added.is_empty() {
                b.add_elements(&s, &added)?;
            }
        }
        for (name, old, new) in &chains {
            if old.is_none() && new.is_some() {
                b.add_chain(&Chain::regular(F, TABLE, name))?;
            }
        }
        for (name, old, new) in &chains {
            let Some(new) = new else { continue };
            if old.is_some() {
                b.flush_chain(F, TABLE, name)?;
            }
            new.iter().for_each(|r| b.add_rule(r));
        }
        dispatch_delta(&mut b, &dispatch)?;
        let removed: Vec<&String> = chains
            .iter()
            .filter(|(_, _, new)| new.is_none())
            .map(|(name, _, _)| name)
            .collect();
        // Flushed first: a removed pod chain may still jump to a removed policy chain.
        for name in &removed {
            b.flush_chain(F, TABLE, name)?;
        }
        for name in &removed {
            b.delete_chain(F, TABLE, name)?;
        }
        for (name, _, new) in &sets {
            if new.is_none() {
                b.delete_set(F, TABLE, name)?;
            }
        }
        Ok(b)
    }

    /// What the objects hold.
    pub(super) fn summary(&self) -> Summary {
        let chains = self.chains.current();
        let pods: BTreeSet<&str> = chains
            .keys()
            .filter_map(|n| n.strip_prefix("pod-"))
            .map(|n| n.get(2..).unwrap_or(n))
            .collect();
        let set_elements: usize = self.sets.current().values().map(|s| s.members.len()).sum();
        Summary {
            isolated_pods: pods.len(),
            policy_chains: chains.keys().filter(|n| n.starts_with("pol-")).count(),
            peer_sets: self.sets.current().len(),
            elements: set_elements + self.dispatch.current().len(),
        }
    }
}

/// Verdict-map elements that went or changed are deleted, then the new ones added (the kernel
/// refuses to overwrite an element's verdict).
fn dispatch_delta(
    b: &mut Batch,
    changes: &[Change<'_, (&'static str, IpAddr), String>],
) -> Result<(), ProgramError> {
    let mut gone: BTreeMap<&str, Vec<IpAddr>> = BTreeMap::new();
    let mut added: BTreeMap<&str, Vec<(IpAddr, Verdict)>> = BTreeMap::new();
    for ((map, ip), old, new) in changes {
        if old.is_some() {
            gone.entry(map).or_default().push(*ip);
        }
        if let Some(chain) = new {
            let verdict = Verdict::Jump(chain.to_string());
            added.entry(map).or_default().push((*ip, verdict));
        }
    }
    for (map, ips) in gone {
        b.delete_verdict_elements(&verdict_map(map), &ips)?;
    }
    for (map, elements) in added {
        b.add_verdict_elements(&verdict_map(map), &elements)?;
    }
    Ok(())
}
