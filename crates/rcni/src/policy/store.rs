//! The datastore side of `rcni policy`: a [`cni_etcd::Connection`] driven from this
//! synchronous command line on a current-thread runtime, and the key layout.

use cni_etcd::etcd_client::{Compare, CompareOp, Txn, TxnOp};
use cni_etcd::{Access, Connection, Entry, Probe};
use std::collections::BTreeMap;

use cni_policy::cluster_policy;
use cni_policy::stored::{cluster_from, BadEntry, Key, Keys};
use cni_policy::Cluster;

use super::Problem;

/// An open connection to the policies of one network.
pub struct Datastore {
    runtime: tokio::runtime::Runtime,
    conn: Connection,
    pub keys: Keys,
    /// The prefix, without a trailing `/`.
    pub prefix: String,
}

impl Datastore {
    /// Connects to the first endpoint of `etcd` that lets this client read the policies.
    pub fn open(etcd: &cni_etcd::EtcdOptions, prefix: &str) -> Result<Datastore, Problem> {
        let access = Access::new(etcd).map_err(Problem::store)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Problem::store)?;
        let keys = Keys::new(prefix);
        let probe = Probe {
            read: keys.policies(None),
            write: None,
        };
        let conn = runtime
            .block_on(Connection::connect(&access, &probe))
            .map_err(Problem::store)?;
        Ok(Datastore {
            runtime,
            conn,
            keys,
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    /// Everything stored under the prefix: the cluster, its ClusterNetworkPolicies and nodes,
    /// the entries that do not decode, and the node publishing each pod.
    pub fn cluster(&mut self) -> Result<Stored, Problem> {
        let entries = self.list(&format!("{}/", self.prefix))?;
        let pairs = || entries.iter().map(|e| (e.key.as_str(), e.value.as_slice()));
        let (cluster, mut bad) = cluster_from(&self.keys, pairs());
        let mut tiers = cluster_policy::stored::read(&self.keys, pairs());
        bad.append(&mut tiers.bad);
        let nodes = entries
            .iter()
            .filter_map(|e| match self.keys.parse(&e.key) {
                Some(Key::Pod {
                    node,
                    namespace,
                    name,
                }) => Some((format!("{namespace}/{name}"), node)),
                _ => None,
            })
            .collect();
        Ok(Stored {
            cluster,
            tiers,
            bad,
            nodes,
        })
    }

    /// The ClusterNetworkPolicies and nodes alone (with the leases that name nodes).
    pub fn cluster_objects(&mut self) -> Result<cluster_policy::stored::Stored, Problem> {
        let mut entries = self.list(&self.keys.cluster_policies())?;
        entries.extend(self.list(&self.keys.nodes())?);
        entries.extend(self.list(&self.keys.leases())?);
        let pairs = entries.iter().map(|e| (e.key.as_str(), e.value.as_slice()));
        Ok(cluster_policy::stored::read(&self.keys, pairs))
    }

    pub fn get(&mut self, key: &str) -> Result<Option<Entry>, Problem> {
        self.runtime
            .block_on(self.conn.get(key))
            .map_err(Problem::store)
    }

    /// Every entry under `prefix`, in key order.
    pub fn list(&mut self, prefix: &str) -> Result<Vec<Entry>, Problem> {
        let listing = self.runtime.block_on(self.conn.get_prefix(prefix));
        Ok(listing.map_err(Problem::store)?.entries)
    }

    /// Deletes `key`; whether it existed.
    pub fn delete(&mut self, key: &str) -> Result<bool, Problem> {
        self.runtime
            .block_on(self.conn.delete(key))
            .map_err(Problem::store)
    }

    /// Writes `puts` in one transaction if every key of `seen` is still at the revision it
    /// was read at (0: absent); `false` (nothing written) when one changed meanwhile.
    pub fn put_if_unchanged(
        &mut self,
        seen: &[(String, i64)],
        puts: &[(String, Vec<u8>)],
    ) -> Result<bool, Problem> {
        let compares: Vec<Compare> = seen
            .iter()
            .map(|(key, rev)| Compare::mod_revision(key.as_str(), CompareOp::Equal, *rev))
            .collect();
        let ops: Vec<TxnOp> = puts
            .iter()
            .map(|(key, value)| TxnOp::put(key.as_str(), value.clone(), None))
            .collect();
        let txn = Txn::new().when(compares).and_then(ops);
        let resp = self
            .runtime
            .block_on(self.conn.txn("apply", &txn))
            .map_err(Problem::store)?;
        Ok(resp.succeeded())
    }
}

/// The cluster as the datastore has it.
pub struct Stored {
    pub cluster: Cluster,
    /// The ClusterNetworkPolicies and nodes (their bad entries are in `bad`).
    pub tiers: cluster_policy::stored::Stored,
    /// Entries that do not decode (the rest is still used).
    pub bad: Vec<BadEntry>,
    /// The node publishing each pod, by `namespace/name`.
    pub nodes: BTreeMap<String, String>,
}
