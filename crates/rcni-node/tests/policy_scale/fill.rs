//! Writing the simulated cluster into etcd as the programs would: leases as `rcni-node`
//! writes them (`rcni_node::lease`), pod records as each node publishes its pods
//! (`cni_policy::stored`), namespaces and policies as `rcni policy apply` stores them. Bulk
//! writes go in transactions of etcd's largest size (128 operations); the client runs on the
//! calling thread, which must be in the namespace etcd listens in.

use std::time::{Duration, Instant};

use cni_etcd::etcd_client::{Txn, TxnOp};
use cni_etcd::{Access, Connection, EtcdOptions, Probe};
use cni_policy::stored::{Keys, PodRecord};
use rcni_node::lease::{subnet_key, LeaseAttrs, Subnets};
use serde_json::Value;

use super::workload::{self, Change, Size};

/// etcd's default `--max-txn-ops`.
const TXN_OPS: usize = 128;

/// A client of the simulation's etcd.
pub struct Store {
    rt: tokio::runtime::Runtime,
    conn: Connection,
    keys: Keys,
    prefix: String,
    /// Bytes written under the prefix by the fill.
    pub bytes: usize,
}

impl Store {
    pub fn connect(url: &str, prefix: &str) -> Store {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let access = Access::new(&EtcdOptions {
            endpoints: vec![url.to_string()],
            ..EtcdOptions::default()
        })
        .unwrap();
        let probe = Probe {
            read: prefix.to_string(),
            write: None,
        };
        let conn = rt.block_on(Connection::connect(&access, &probe)).unwrap();
        Store {
            rt,
            conn,
            keys: Keys::new(prefix),
            prefix: prefix.to_string(),
            bytes: 0,
        }
    }

    /// Writes `(key, value)` pairs in transactions of [`TXN_OPS`].
    pub fn put_all(&mut self, pairs: impl IntoIterator<Item = (String, Vec<u8>)>) {
        let mut ops = Vec::with_capacity(TXN_OPS);
        for (key, value) in pairs {
            self.bytes += key.len() + value.len();
            ops.push(TxnOp::put(key, value, None));
            if ops.len() == TXN_OPS {
                self.commit(std::mem::take(&mut ops));
            }
        }
        if !ops.is_empty() {
            self.commit(ops);
        }
    }

    fn commit(&mut self, ops: Vec<TxnOp>) {
        let txn = Txn::new().and_then(ops);
        self.rt.block_on(self.conn.txn("fill", &txn)).unwrap();
    }

    /// The whole simulation: leases of the remote nodes, namespaces, policies (and the probe
    /// policy), remote pods (and the first probe pod, so the probe's peer set exists).
    pub fn fill(&mut self, size: &Size) -> Duration {
        let started = Instant::now();
        let prefix = self.prefix.clone();
        self.put_all((1..=size.nodes).map(|k| lease(&prefix, k)));
        let namespaces = workload::namespaces(size);
        let docs = namespaces.iter().map(|(name, labels)| {
            (
                self.keys.namespace(name),
                workload::namespace_doc(name, labels),
            )
        });
        let docs: Vec<_> = docs.collect();
        self.put_all(
            docs.into_iter()
                .map(|(k, v)| (k, v.to_string().into_bytes())),
        );
        let mut policies: Vec<(String, String, Value)> = (0..size.policies)
            .map(|p| workload::policy(size, p))
            .collect();
        policies.push(workload::probe_policy(size));
        let keys = self.keys.clone();
        self.put_all(
            policies
                .into_iter()
                .map(|(ns, name, doc)| (keys.policy(&ns, &name), doc.to_string().into_bytes())),
        );
        let pods = workload::remote_pods(size).chain([workload::probe_pod(0)]);
        self.put_all(pods.map(|p| (keys.pod(&p.node, &p.namespace, &p.name), record(&p))));
        started.elapsed()
    }

    pub fn put_pod(&mut self, pod: &PodRecord) {
        let key = self.keys.pod(&pod.node, &pod.namespace, &pod.name);
        self.rt
            .block_on(self.conn.put(&key, &record(pod), None))
            .unwrap();
    }

    pub fn delete_pod(&mut self, node: &str, namespace: &str, name: &str) {
        let key = self.keys.pod(node, namespace, name);
        self.rt.block_on(self.conn.delete(&key)).unwrap();
    }

    pub fn put_policy(&mut self, namespace: &str, name: &str, doc: &Value) {
        let key = self.keys.policy(namespace, name);
        let value = doc.to_string().into_bytes();
        self.rt.block_on(self.conn.put(&key, &value, None)).unwrap();
    }

    pub fn delete_policy(&mut self, namespace: &str, name: &str) {
        let key = self.keys.policy(namespace, name);
        self.rt.block_on(self.conn.delete(&key)).unwrap();
    }

    /// Applies one change of the stream.
    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::PutPod(pod) => self.put_pod(pod),
            Change::DeletePod {
                node,
                namespace,
                name,
            } => self.delete_pod(node, namespace, name),
            Change::PutPolicy {
                namespace,
                name,
                doc,
            } => self.put_policy(namespace, name, doc),
            Change::DeletePolicy { namespace, name } => self.delete_policy(namespace, name),
        }
    }
}

/// Remote node `k`'s lease, as its agent would write it (host-gw, IPv6-only).
fn lease(prefix: &str, k: u32) -> (String, Vec<u8>) {
    let subnet = Subnets {
        v4: None,
        v6: Some(ipnet::Ipv6Net::new(workload::node_subnet(k), 64).unwrap()),
    };
    let attrs = LeaseAttrs {
        public_ip: std::net::Ipv4Addr::UNSPECIFIED,
        public_ipv6: Some(workload::node_underlay(k)),
        backend_type: "host-gw".into(),
        backend_data: None,
        backend_v6_data: None,
        node_name: Some(workload::node_name(k)),
    };
    (
        subnet_key(prefix, subnet),
        serde_json::to_vec(&attrs).unwrap(),
    )
}

fn record(pod: &PodRecord) -> Vec<u8> {
    serde_json::to_vec(pod).unwrap()
}
