//! The etcd v3 implementation of [`Store`], on a [`cni_etcd::Connection`] (endpoints with
//! failover, TLS files reloaded on rotation, one-line causes of failures).
//!
//! Keys are flannel's; a lease key is written in a transaction whose condition is either "the
//! key does not exist" (`create_revision == 0`) or "the key is unchanged since I read it"
//! (`mod_revision == n`), and is bound to an etcd lease with the node's TTL.

use std::time::Duration;

use cni_etcd::etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use cni_etcd::{ConnectError, Connection, EtcdError, Probe, WatchEvent};
// The checked etcd options the agent starts with (they live in `cni_etcd`, shared with `rcni`).
pub use cni_etcd::Access;

use super::{Claim, LeaseEvent, LeaseId, LeaseWatch, Snapshot, Store, StoreError, StoredLease};
use crate::lease::{self, Lease};

impl From<EtcdError> for StoreError {
    fn from(e: EtcdError) -> StoreError {
        StoreError(e.to_string())
    }
}

/// An etcd client bound to one key prefix.
pub struct EtcdStore {
    conn: Connection,
    prefix: String,
}

impl EtcdStore {
    /// Connects to the first endpoint that accepts this client and lets it read the network
    /// config and write lease keys under `prefix`, trying them in order; the reason of each
    /// one otherwise.
    pub async fn connect(access: &Access, prefix: &str) -> Result<Self, ConnectError> {
        let prefix = prefix.trim_end_matches('/').to_string();
        let probe = Probe {
            read: format!("{prefix}/config"),
            write: Some(format!(
                "{}rcni-permission-probe",
                lease::subnets_prefix(&prefix)
            )),
        };
        let conn = Connection::connect(access, &probe).await?;
        Ok(EtcdStore { conn, prefix })
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &str {
        self.conn.endpoint()
    }
}

impl Store for EtcdStore {
    type Watch = EtcdWatch;

    async fn network_config(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        let key = format!("{}/config", self.prefix);
        Ok(self.conn.get(&key).await?.map(|e| e.value))
    }

    async fn snapshot(&mut self) -> Result<Snapshot, StoreError> {
        let listing = self
            .conn
            .get_prefix(&lease::subnets_prefix(&self.prefix))
            .await?;
        let leases = listing
            .entries
            .iter()
            .filter_map(|e| {
                let lease = lease::decode(&self.prefix, &e.key, &e.value)?;
                Some(StoredLease {
                    lease,
                    mod_revision: e.mod_revision,
                    store_lease: e.lease,
                })
            })
            .collect();
        Ok(Snapshot {
            leases,
            revision: listing.revision,
        })
    }

    async fn acquire(
        &mut self,
        lease: &Lease,
        ttl: Duration,
        claim: Claim,
    ) -> Result<Option<LeaseId>, StoreError> {
        let key = lease::subnet_key(&self.prefix, lease.subnet);
        let value = serde_json::to_vec(&lease.attrs)
            .map_err(|e| StoreError(format!("etcd encode lease: {e}")))?;
        let granted = self.conn.grant_lease(ttl).await?;
        let condition = match claim {
            Claim::IfAbsent => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Claim::IfUnchangedSince(rev) => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, rev)
            }
        };
        let txn = Txn::new().when([condition]).and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(granted)),
        )]);
        let outcome = self.conn.txn("claim lease", &txn).await;
        let won = matches!(&outcome, Ok(resp) if resp.succeeded());
        if !won {
            // The grant is useless now; let it go (it would expire by itself anyway).
            let _ = self.conn.revoke_lease(granted).await;
        }
        outcome?;
        Ok(won.then_some(granted))
    }

    async fn republish(&mut self, lease: &Lease, id: LeaseId) -> Result<bool, StoreError> {
        let key = lease::subnet_key(&self.prefix, lease.subnet);
        let value = serde_json::to_vec(&lease.attrs)
            .map_err(|e| StoreError(format!("etcd encode lease: {e}")))?;
        let txn = Txn::new()
            .when([Compare::lease(key.clone(), CompareOp::Equal, id)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(id)),
            )]);
        Ok(self.conn.txn("republish lease", &txn).await?.succeeded())
    }

    async fn renew(&mut self, id: LeaseId) -> Result<bool, StoreError> {
        Ok(self.conn.keep_alive(id).await?)
    }

    async fn revoke(&mut self, id: LeaseId) -> Result<(), StoreError> {
        Ok(self.conn.revoke_lease(id).await?)
    }

    async fn watch(&mut self, after_revision: i64) -> Result<EtcdWatch, StoreError> {
        let key = lease::subnets_prefix(&self.prefix);
        let watch = self.conn.watch_prefix(&key, after_revision).await?;
        Ok(EtcdWatch {
            watch,
            prefix: self.prefix.clone(),
        })
    }
}

/// A watch of the lease keys.
pub struct EtcdWatch {
    watch: cni_etcd::Watch,
    prefix: String,
}

impl LeaseWatch for EtcdWatch {
    async fn next(&mut self) -> Result<Vec<LeaseEvent>, StoreError> {
        loop {
            let events: Vec<LeaseEvent> = self
                .watch
                .next()
                .await?
                .into_iter()
                .filter_map(|event| match event {
                    WatchEvent::Put(e) => {
                        lease::decode(&self.prefix, &e.key, &e.value).map(LeaseEvent::Put)
                    }
                    WatchEvent::Delete { key } => {
                        lease::parse_subnet_key(&self.prefix, &key).map(LeaseEvent::Delete)
                    }
                })
                .collect();
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }
}
