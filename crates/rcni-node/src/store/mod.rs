//! The datastore of subnet leases behind a small trait, so the agent's logic does not depend on
//! etcd's API. [`etcd::EtcdStore`] is the implementation; flannel's key layout lives in
//! [`crate::lease`].

pub mod etcd;

use std::time::Duration;

use crate::lease::{Lease, Subnets};

/// A datastore failure (unreachable, timed out, refused).
#[derive(Debug, thiserror::Error)]
#[error("datastore: {0}")]
pub struct StoreError(pub String);

/// A lease as stored, with the revision it was last written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLease {
    /// The lease.
    pub lease: Lease,
    /// The store revision of its last write.
    pub mod_revision: i64,
    /// The store lease the key is bound to (0 for none).
    pub store_lease: LeaseId,
}

/// Every lease and the store revision they were read at (a watch continues from there).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The leases.
    pub leases: Vec<StoredLease>,
    /// The revision of the read.
    pub revision: i64,
}

/// How [`Store::acquire`] may write the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Only if no key exists for the subnet (two nodes never get the same subnet).
    IfAbsent,
    /// Only if the key is still at this revision (a node taking back its own lease).
    IfUnchangedSince(i64),
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A lease was written.
    Put(Lease),
    /// A lease was deleted or expired.
    Delete(Subnets),
}

/// The handle of a granted, time-limited store lease a key is bound to.
pub type LeaseId = i64;

/// What the agent needs from a datastore.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// A watch of the lease keys.
    type Watch: LeaseWatch;

    /// The network config JSON at `<prefix>/config`; `None` when there is none yet.
    async fn network_config(&mut self) -> Result<Option<Vec<u8>>, StoreError>;
    /// Every lease.
    async fn snapshot(&mut self) -> Result<Snapshot, StoreError>;
    /// Writes `lease` bound to a new store lease of `ttl`, if `claim` allows; returns the store
    /// lease, or `None` when the claim lost (someone else holds or changed the key).
    async fn acquire(
        &mut self,
        lease: &Lease,
        ttl: Duration,
        claim: Claim,
    ) -> Result<Option<LeaseId>, StoreError>;
    /// Writes `lease` again, bound to the store lease `id` it holds (what the node publishes
    /// changed, e.g. a rotated WireGuard key); `false` when the key is gone or bound to
    /// another store lease.
    async fn republish(&mut self, lease: &Lease, id: LeaseId) -> Result<bool, StoreError>;
    /// Renews a store lease; `false` when it has already expired.
    async fn renew(&mut self, id: LeaseId) -> Result<bool, StoreError>;
    /// Revokes a store lease, deleting the keys bound to it.
    async fn revoke(&mut self, id: LeaseId) -> Result<(), StoreError>;
    /// Watches the lease keys for changes after `revision`.
    async fn watch(&mut self, after_revision: i64) -> Result<Self::Watch, StoreError>;
}

/// A running watch.
#[allow(async_fn_in_trait)]
pub trait LeaseWatch {
    /// The next batch of changes. An error ends the watch (the agent re-reads and re-watches).
    async fn next(&mut self) -> Result<Vec<LeaseEvent>, StoreError>;
}
