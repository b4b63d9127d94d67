//! A model of the kernel's table that follows each batch the way the kernel applies it,
//! refusing what the kernel would refuse (deleting what is not there, adding a verdict-map
//! element that is): the unit tests compare it with the objects.

use super::*;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Mirror {
    pub sets: BTreeMap<String, BTreeSet<IpAddr>>,
    pub chains: BTreeMap<String, Vec<Rule>>,
    pub dispatch: BTreeMap<(&'static str, IpAddr), Target>,
}

/// What one delta did.
pub struct Step<'a, 'b> {
    pub sets: &'a [Change<'b, String, SetType>],
    pub created: &'a BTreeSet<&'a String>,
    pub members: &'a dyn Fn(&str) -> Vec<IpAddr>,
    pub journal: &'a HashMap<String, BTreeMap<IpAddr, (bool, bool)>>,
    pub chains: &'a [Change<'b, String, Vec<Rule>>],
    pub dispatch: &'a [Change<'b, (&'static str, IpAddr), Target>],
}

impl Mirror {
    /// The table a full batch of `objects` makes.
    pub fn of(objects: &Objects, members: &dyn Fn(&str) -> Vec<IpAddr>) -> Mirror {
        Mirror {
            sets: objects
                .sets
                .current()
                .keys()
                .map(|n| (n.clone(), members(n).into_iter().collect()))
                .collect(),
            chains: objects.chains.current().clone(),
            dispatch: objects.dispatch.current().clone(),
        }
    }

    pub fn follow(&mut self, step: &Step<'_, '_>) {
        for name in step.created {
            let fresh = (step.members)(name).into_iter().collect();
            assert!(
                self.sets.insert((*name).clone(), fresh).is_none(),
                "set {name} exists"
            );
        }
        for (name, changes) in step.journal {
            if step.created.contains(name) {
                continue;
            }
            let Some(set) = self.sets.get_mut(name) else {
                continue;
            };
            for (ip, (was, is)) in changes {
                match (was, is) {
                    (true, false) => assert!(set.remove(ip), "{ip} is not in {name}"),
                    (false, true) => assert!(set.insert(*ip), "{ip} is already in {name}"),
                    _ => {}
                }
            }
        }
        for (name, _, new) in step.chains {
            match new {
                Some(rules) => self.chains.insert(name.clone(), (*rules).clone()),
                None => self.chains.remove(name),
            };
        }
        for (key, old, new) in step.dispatch {
            if old.is_some() {
                assert!(self.dispatch.remove(key).is_some(), "no element {key:?}");
            }
            if let Some(target) = new {
                let before = self.dispatch.insert(*key, (*target).clone());
                assert!(before.is_none(), "element {key:?} exists");
            }
        }
        for (name, _, new) in step.sets {
            if new.is_none() {
                assert!(self.sets.remove(name).is_some(), "no set {name}");
            }
        }
    }
}
