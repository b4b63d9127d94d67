//! [`Enforcer::update`]: a whole [`Cluster`] turned into the changes since the enforcer's
//! state, for tests, [`super::super::program`] and callers that hold whole snapshots. The
//! node agent gives changes directly ([`Enforcer::apply`]).

use std::collections::HashSet;
use std::sync::Arc;

use cni_nft::Batch;

use super::super::{ProgramError, Summary};
use super::{Change, Enforcer, PodId};
use crate::cluster::{Cluster, Pod};
use crate::compact::PodInfo;
use crate::effective::policy_key;

impl Enforcer {
    /// The batch bringing the kernel from the last program to the one for `cluster` and the
    /// pods `is_local` picks (pods are told apart by `namespace/name`), and what the new
    /// program holds. On error the enforcer starts over: the next successful update
    /// replaces the whole table.
    pub fn update(
        &mut self,
        cluster: &Cluster,
        is_local: impl Fn(&Pod) -> bool,
    ) -> Result<(Batch, Summary), ProgramError> {
        let changes = self.changes_to(cluster, &is_local);
        let done = changes
            .into_iter()
            .try_for_each(|c| self.apply(c))
            .and_then(|()| self.batch());
        match done {
            Ok(delta) => Ok((delta.batch, delta.summary)),
            Err(e) => {
                *self = Enforcer::with_hold(std::mem::take(&mut self.hold));
                Err(e)
            }
        }
    }

    /// What differs between the enforcer's state and `cluster`.
    fn changes_to(&mut self, cluster: &Cluster, is_local: &dyn Fn(&Pod) -> bool) -> Vec<Change> {
        let mut changes = Vec::new();
        let objects: Vec<(&String, Option<&crate::selector::Labels>)> = self
            .namespaces
            .iter()
            .map(|(name, ns)| (name, ns.object.as_ref()))
            .collect();
        for (name, labels) in objects {
            if labels.is_some() && !cluster.namespaces.contains_key(name) {
                changes.push(Change::Namespace {
                    name: name.clone(),
                    labels: None,
                });
            }
        }
        for (name, labels) in &cluster.namespaces {
            let same = self
                .namespaces
                .get(name)
                .is_some_and(|ns| ns.object.as_ref() == Some(labels));
            if !same {
                changes.push(Change::Namespace {
                    name: name.clone(),
                    labels: Some(labels.clone()),
                });
            }
        }
        let mut seen: HashSet<PodId> = HashSet::with_capacity(cluster.pods.len());
        for pod in &cluster.pods {
            let id: PodId = pod.key().into();
            let info = PodInfo::of(pod, &mut self.interner);
            let local = is_local(pod);
            let same = self
                .pods
                .get(&id)
                .is_some_and(|s| s.local == local && *s.pod == info);
            if !same {
                changes.push(Change::Pod {
                    id: id.clone(),
                    pod: Some(Arc::new(info)),
                    local,
                });
            }
            seen.insert(id);
        }
        for id in self.pods.keys().filter(|id| !seen.contains(*id)) {
            changes.push(Change::Pod {
                id: id.clone(),
                pod: None,
                local: false,
            });
        }
        let mut keys = HashSet::with_capacity(cluster.policies.len());
        for policy in &cluster.policies {
            let key = policy_key(policy);
            if self.policies.get(&key).is_none_or(|s| s.policy != *policy) {
                changes.push(Change::Policy {
                    key: key.clone(),
                    policy: Some(Arc::new(policy.clone())),
                });
            }
            keys.insert(key);
        }
        for key in self.policies.keys().filter(|k| !keys.contains(*k)) {
            changes.push(Change::Policy {
                key: key.clone(),
                policy: None,
            });
        }
        changes
    }
}
