//! Publishing the node's pods: each pod of the node's source is written as a
//! [`PodRecord`] at `<prefix>/pods/<node>/<namespace>/<name>`, bound to the store lease of
//! the node's subnet key (so the records of a node that dies vanish with its lease), records
//! of pods that are gone are deleted, and after the agent takes its lease back under a new
//! store lease every record is written again bound to it.

use std::collections::BTreeMap;

use cni_policy::stored::{Keys, PodRecord};
use cni_policy::Pod;

use cni_etcd::{Connection, Entry, EtcdError};

use crate::store::LeaseId;

/// What one round writes and deletes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Keys to write, with their values, bound to the node's lease.
    pub puts: Vec<(String, Vec<u8>)>,
    pub deletes: Vec<String>,
}

/// The records `node` should have for `pods`, by key.
pub fn records(keys: &Keys, node: &str, pods: &[Pod]) -> BTreeMap<String, Vec<u8>> {
    pods.iter()
        .map(|p| {
            let record = PodRecord::of(p, node);
            // A struct of strings, maps and addresses always serializes.
            let value = serde_json::to_vec(&record).unwrap_or_default();
            (keys.pod(node, &p.namespace, &p.name), value)
        })
        .collect()
}

/// From the node's records as stored to `wanted`, bound to `lease`: a record is written when
/// missing, different or bound to another lease, and deleted when its pod is gone.
pub fn plan(stored: &[Entry], wanted: &BTreeMap<String, Vec<u8>>, lease: LeaseId) -> Plan {
    let current: BTreeMap<&str, &Entry> = stored.iter().map(|e| (e.key.as_str(), e)).collect();
    let puts = wanted
        .iter()
        .filter(|(k, v)| {
            !current
                .get(k.as_str())
                .is_some_and(|e| &e.value == *v && e.lease == lease)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let deletes = stored
        .iter()
        .filter(|e| !wanted.contains_key(&e.key))
        .map(|e| e.key.clone())
        .collect();
    Plan { puts, deletes }
}

/// The node's identity in the datastore.
#[derive(Debug, Clone)]
pub struct Publisher {
    pub keys: Keys,
    pub node: String,
    /// The node's subnet key, whose store lease the records are bound to.
    pub subnet_key: String,
}

impl Publisher {
    /// Brings the node's records in line with `pods`; how many keys it wrote or deleted.
    /// Nothing is written while the node holds no lease (its key is missing: the agent is
    /// taking it back, and the next round publishes under the new one).
    pub async fn round(&self, conn: &mut Connection, pods: &[Pod]) -> Result<usize, EtcdError> {
        let bound = conn.get(&self.subnet_key).await?.map(|e| e.lease);
        let Some(lease) = bound.filter(|l| *l != 0) else {
            log::debug!("no lease on {} yet; pods not published", self.subnet_key);
            return Ok(0);
        };
        let stored = conn.get_prefix(&self.keys.pods(Some(&self.node))).await?;
        let plan = plan(
            &stored.entries,
            &records(&self.keys, &self.node, pods),
            lease,
        );
        for (key, value) in &plan.puts {
            conn.put(key, value, Some(lease)).await?;
        }
        for key in &plan.deletes {
            conn.delete(key).await?;
        }
        let done = plan.puts.len() + plan.deletes.len();
        if done > 0 {
            log::info!(
                "published {} pod(s) of node {}: {} written, {} deleted",
                pods.len(),
                self.node,
                plan.puts.len(),
                plan.deletes.len()
            );
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str) -> Pod {
        crate::policy::test_pod("x", name, ip)
    }

    #[test]
    fn only_what_differs_is_written_and_gone_pods_are_deleted() {
        let keys = Keys::new("/p");
        let before = records(
            &keys,
            "n1",
            &[pod("a", "198.18.1.2"), pod("b", "198.18.1.3")],
        );
        let stored: Vec<Entry> = before
            .iter()
            .map(|(k, v)| Entry {
                key: k.clone(),
                value: v.clone(),
                create_revision: 1,
                mod_revision: 1,
                lease: 7,
            })
            .collect();
        // Unchanged: nothing to do.
        assert_eq!(plan(&stored, &before, 7), Plan::default());
        // a relabelled, b gone, c new.
        let mut a = pod("a", "198.18.1.2");
        a.labels.insert("tier".into(), "web".into());
        let wanted = records(&keys, "n1", &[a, pod("c", "198.18.1.4")]);
        let p = plan(&stored, &wanted, 7);
        let put_keys: Vec<&str> = p.puts.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(put_keys, ["/p/pods/n1/x/a", "/p/pods/n1/x/c"]);
        assert_eq!(p.deletes, ["/p/pods/n1/x/b"]);
        // A new lease: everything is written again, bound to it.
        let p = plan(&stored, &before, 8);
        assert_eq!(p.puts.len(), 2);
        assert!(p.deletes.is_empty());
        let back: PodRecord = serde_json::from_slice(&p.puts[0].1).unwrap();
        assert_eq!(back.node, "n1");
        assert_eq!(back.pod(), pod("a", "198.18.1.2"));
    }
}
