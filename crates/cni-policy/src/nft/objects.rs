//! The objects of a program by name, each kind with a journal of what changed since the last
//! batch, and the two batches made from them: the full one that replaces the table, and the
//! delta that touches only what changed. The members of the peer sets are not copied here:
//! the enforcer's peers hold them, and only the elements touched since the last batch are
//! journaled ([`Objects::element`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use cni_nft::{Batch, Chain, Rule, Set, SetElement, SetType, Verdict, VerdictMap};
use ipnet::IpNet;

use super::rules::{skeleton, MAPS};
use super::{ProgramError, F, TABLE};

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

/// What a dispatch (verdict-map) element does with a local pod's packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// No policy isolates the pod in this direction.
    Accept,
    /// Through the pod's chain.
    Jump(String),
}

impl Target {
    fn verdict(&self) -> Verdict {
        match self {
            Target::Accept => Verdict::Accept,
            Target::Jump(chain) => Verdict::Jump(chain.clone()),
        }
    }
}

/// What a delta batch changed, for deciding which open connections to look at.
#[derive(Debug, Default)]
pub(super) struct Touched {
    /// Chains created, rewritten or removed.
    pub chains: Vec<String>,
    /// Sets that lost members or went.
    pub shrunk_sets: Vec<String>,
    /// Addresses whose dispatch element changed or went.
    pub dispatch: Vec<IpAddr>,
}

/// Everything in the table besides its skeleton (base chains and verdict maps).
#[derive(Default)]
pub(super) struct Objects {
    /// Regular chains and their rules.
    pub chains: Journaled<String, Vec<Rule>>,
    /// The peer sets that exist, with their key types.
    pub sets: Journaled<String, SetType>,
    /// Verdict-map elements: (map, address) → what the element does.
    pub dispatch: Journaled<(&'static str, IpAddr), Target>,
    /// Set elements touched since the last batch: whether each was there before the first
    /// touch, and whether it is now.
    elements: HashMap<String, BTreeMap<IpAddr, (bool, bool)>>,
    /// What the kernel holds after the batches so far, as the unit tests follow it.
    #[cfg(test)]
    pub mirror: mirror::Mirror,
}

/// The verdict map `name` of [`MAPS`].
pub fn verdict_map(name: &str) -> VerdictMap {
    let key = MAPS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(SetType::Ipv4Addr, |(_, k)| *k);
    VerdictMap::new(F, TABLE, name, key)
}

fn elements<'a>(ips: impl Iterator<Item = &'a IpAddr>) -> Vec<SetElement> {
    ips.map(|ip| SetElement::addr(*ip)).collect()
}

/// Adds `ips` to `set`, if there are any.
fn add_members<'a>(
    b: &mut Batch,
    set: &Set,
    ips: impl Iterator<Item = &'a IpAddr>,
) -> Result<(), ProgramError> {
    let list = elements(ips);
    if !list.is_empty() {
        b.add_elements(set, &list)?;
    }
    Ok(())
}

impl Objects {
    /// Notes that `ip` joined (`present`) or left set `set`.
    pub(super) fn element(&mut self, set: &str, ip: IpAddr, present: bool) {
        let journal = match self.elements.get_mut(set) {
            Some(j) => j,
            None => self.elements.entry(set.to_string()).or_default(),
        };
        journal.entry(ip).or_insert((!present, present)).1 = present;
    }

    /// A batch that replaces whatever table is there with these objects: the skeleton
    /// holding `hold`, and each set with the members `members` gives for it.
    pub(super) fn full_batch(
        &mut self,
        hold: &[IpNet],
        members: &dyn Fn(&str) -> Vec<IpAddr>,
    ) -> Result<Batch, ProgramError> {
        self.chains.before.clear();
        self.sets.before.clear();
        self.dispatch.before.clear();
        self.elements.clear();
        let mut b = Batch::new();
        b.add_table(F, TABLE)?;
        b.destroy_table(F, TABLE)?;
        b.add_table(F, TABLE)?;
        skeleton(&mut b, hold)?;
        for (name, key) in self.sets.current() {
            let s = Set::new(F, TABLE, name, *key);
            b.add_set(&s)?;
            add_members(&mut b, &s, members(name).iter())?;
        }
        // Every chain exists before any rule jumps to it.
        for name in self.chains.current().keys() {
            b.add_chain(&Chain::regular(F, TABLE, name))?;
        }
        for rules in self.chains.current().values() {
            rules.iter().for_each(|r| b.add_rule(r));
        }
        let mut by_map: BTreeMap<&str, Vec<(IpAddr, Verdict)>> = BTreeMap::new();
        for ((map, ip), target) in self.dispatch.current() {
            by_map.entry(map).or_default().push((*ip, target.verdict()));
        }
        for (map, elements) in by_map {
            b.add_verdict_elements(&verdict_map(map), &elements)?;
        }
        #[cfg(test)]
        {
            self.mirror = mirror::Mirror::of(self, members);
        }
        Ok(b)
    }

    /// A batch that changes only the objects that changed since the last batch, in an order
    /// the kernel accepts: what is referenced is created before and deleted after its users.
    /// A set created by it gets the members `members` gives.
    pub(super) fn delta_batch(
        &mut self,
        members: &dyn Fn(&str) -> Vec<IpAddr>,
    ) -> Result<(Batch, Touched), ProgramError> {
        let mut b = Batch::new();
        let mut touched = Touched::default();
        let journal = std::mem::take(&mut self.elements);
        let current_sets = self.sets.current().clone();
        let sets = self.sets.take_changes();
        let chains = self.chains.take_changes();
        let dispatch = self.dispatch.take_changes();
        let created: BTreeSet<&String> = sets
            .iter()
            .filter(|(_, old, _)| old.is_none())
            .map(|(n, _, _)| n)
            .collect();
        for (name, _, new) in &sets {
            if let (true, Some(key)) = (created.contains(name), new) {
                let s = Set::new(F, TABLE, name, **key);
                b.add_set(&s)?;
                add_members(&mut b, &s, members(name).iter())?;
            }
        }
        for (name, changes) in &journal {
            let Some(key) = current_sets.get(name) else {
                continue;
            };
            if created.contains(name) {
                continue;
            }
            let s = Set::new(F, TABLE, name, *key);
            let gone: Vec<&IpAddr> = changes
                .iter()
                .filter(|(_, (was, is))| *was && !*is)
                .map(|(ip, _)| ip)
                .collect();
            let added = changes.iter().filter(|(_, (was, is))| !*was && *is);
            if !gone.is_empty() {
                b.delete_elements(&s, &elements(gone.into_iter()))?;
                touched.shrunk_sets.push(name.clone());
            }
            add_members(&mut b, &s, added.map(|(ip, _)| ip))?;
        }
        for (name, old, new) in &chains {
            if old.is_none() && new.is_some() {
                b.add_chain(&Chain::regular(F, TABLE, name))?;
            }
        }
        for (name, old, new) in &chains {
            touched.chains.push(name.clone());
            let Some(new) = new else { continue };
            if old.is_some() {
                b.flush_chain(F, TABLE, name)?;
            }
            new.iter().for_each(|r| b.add_rule(r));
        }
        touched.dispatch = dispatch_delta(&mut b, &dispatch)?;
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
                touched.shrunk_sets.push(name.clone());
            }
        }
        #[cfg(test)]
        self.mirror.follow(&mirror::Step {
            sets: &sets,
            created: &created,
            members,
            journal: &journal,
            chains: &chains,
            dispatch: &dispatch,
        });
        Ok((b, touched))
    }
}

/// Verdict-map elements that went or changed are deleted, then the new ones added (the kernel
/// refuses to overwrite an element's verdict); the addresses whose element changed or went.
fn dispatch_delta(
    b: &mut Batch,
    changes: &[Change<'_, (&'static str, IpAddr), Target>],
) -> Result<Vec<IpAddr>, ProgramError> {
    let mut gone: BTreeMap<&str, Vec<IpAddr>> = BTreeMap::new();
    let mut added: BTreeMap<&str, Vec<(IpAddr, Verdict)>> = BTreeMap::new();
    let mut narrowed = Vec::new();
    for ((map, ip), old, new) in changes {
        if old.is_some() {
            gone.entry(map).or_default().push(*ip);
            narrowed.push(*ip);
        }
        if let Some(target) = new {
            added.entry(map).or_default().push((*ip, target.verdict()));
        }
    }
    for (map, ips) in gone {
        b.delete_verdict_elements(&verdict_map(map), &ips)?;
    }
    for (map, elements) in added {
        b.add_verdict_elements(&verdict_map(map), &elements)?;
    }
    Ok(narrowed)
}

#[cfg(test)]
pub(super) mod mirror;
