//! The etcd v3 implementation of [`Store`] (gRPC through `etcd-client`).
//!
//! Keys are flannel's; a lease key is written in a transaction whose condition is either "the
//! key does not exist" (`create_revision == 0`) or "the key is unchanged since I read it"
//! (`mod_revision == n`), and is bound to an etcd lease with the node's TTL.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};

use super::{Claim, LeaseEvent, LeaseId, LeaseWatch, Snapshot, Store, StoreError, StoredLease};
use crate::lease::{self, Lease};

/// How long one request may take before the store counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

fn err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("etcd {what}: {e}"))
}

fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(msg) => msg.contains("not found"),
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        _ => false,
    }
}

/// An etcd client bound to one key prefix.
pub struct EtcdStore {
    client: Client,
    prefix: String,
    keeper: Option<(LeaseId, LeaseKeeper, LeaseKeepAliveStream)>,
}

impl EtcdStore {
    /// Connects to `endpoints` (`http://host:port`, ...). The channel reconnects by itself
    /// after an outage; HTTP/2 keep-alives notice a silent peer within 15 s (not more often:
    /// etcd answers pings closer than its `--grpc-keepalive-min-time`, 5 s, with GOAWAY).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, StoreError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|e| err("connect", e))?;
        Ok(EtcdStore {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
            keeper: None,
        })
    }

    fn config_key(&self) -> String {
        format!("{}/config", self.prefix)
    }
}

impl Store for EtcdStore {
    type Watch = EtcdWatch;

    async fn network_config(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        let resp = self
            .client
            .get(self.config_key(), None)
            .await
            .map_err(|e| err("get config", e))?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    async fn snapshot(&mut self) -> Result<Snapshot, StoreError> {
        let resp = self
            .client
            .get(
                lease::subnets_prefix(&self.prefix),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| err("list leases", e))?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        let leases = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = kv.key_str().ok()?;
                let lease = lease::decode(&self.prefix, key, kv.value())?;
                Some(StoredLease {
                    lease,
                    mod_revision: kv.mod_revision(),
                    store_lease: kv.lease(),
                })
            })
            .collect();
        Ok(Snapshot { leases, revision })
    }

    async fn acquire(
        &mut self,
        lease: &Lease,
        ttl: Duration,
        claim: Claim,
    ) -> Result<Option<LeaseId>, StoreError> {
        let key = lease::subnet_key(&self.prefix, lease.subnet);
        let value = serde_json::to_vec(&lease.attrs).map_err(|e| err("encode lease", e))?;
        let ttl_secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let granted = self
            .client
            .lease_grant(ttl_secs, None)
            .await
            .map_err(|e| err("grant lease", e))?
            .id();
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
        let outcome = self.client.txn(txn).await;
        let won = matches!(&outcome, Ok(resp) if resp.succeeded());
        if !won {
            // The grant is useless now; let it go (it would expire by itself anyway).
            let _ = self.client.lease_revoke(granted).await;
        }
        outcome.map_err(|e| err("claim lease", e))?;
        Ok(won.then_some(granted))
    }

    async fn renew(&mut self, id: LeaseId) -> Result<bool, StoreError> {
        if !matches!(&self.keeper, Some((kept, _, _)) if *kept == id) {
            let (keeper, stream) = match self.client.lease_keep_alive(id).await {
                Ok(pair) => pair,
                Err(e) if lease_not_found(&e) => return Ok(false),
                Err(e) => return Err(err("keep-alive", e)),
            };
            self.keeper = Some((id, keeper, stream));
        }
        let (_, keeper, stream) = self.keeper.as_mut().expect("set above");
        let exchange = async {
            keeper.keep_alive().await?;
            stream.message().await
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(Ok(Some(resp))) => Ok(resp.ttl() > 0),
            // An expired or revoked lease: the client reports it as an error, the agent as
            // "not alive" (it takes the subnet back).
            Ok(Err(e)) if lease_not_found(&e) => {
                self.keeper = None;
                Ok(false)
            }
            Ok(Ok(None)) => {
                self.keeper = None;
                Err(StoreError("etcd keep-alive stream closed".into()))
            }
            Ok(Err(e)) => {
                self.keeper = None;
                Err(err("keep-alive", e))
            }
            Err(_) => {
                self.keeper = None;
                Err(StoreError("etcd keep-alive timed out".into()))
            }
        }
    }

    async fn revoke(&mut self, id: LeaseId) -> Result<(), StoreError> {
        self.keeper = None;
        self.client
            .lease_revoke(id)
            .await
            .map(|_| ())
            .map_err(|e| err("revoke lease", e))
    }

    async fn watch(&mut self, after_revision: i64) -> Result<EtcdWatch, StoreError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after_revision + 1);
        let stream = self
            .client
            .watch(lease::subnets_prefix(&self.prefix), Some(options))
            .await
            .map_err(|e| err("watch", e))?;
        Ok(EtcdWatch {
            stream,
            prefix: self.prefix.clone(),
        })
    }
}

/// A watch of the lease keys.
pub struct EtcdWatch {
    stream: WatchStream,
    prefix: String,
}

impl LeaseWatch for EtcdWatch {
    async fn next(&mut self) -> Result<Vec<LeaseEvent>, StoreError> {
        loop {
            let resp = self
                .stream
                .message()
                .await
                .map_err(|e| err("watch", e))?
                .ok_or_else(|| StoreError("etcd watch ended".into()))?;
            if resp.canceled() {
                return Err(StoreError(format!(
                    "etcd watch canceled (compacted at {}): {}",
                    resp.compact_revision(),
                    resp.cancel_reason()
                )));
            }
            let mut events = Vec::new();
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                let Ok(key) = kv.key_str() else { continue };
                match event.event_type() {
                    EventType::Put => {
                        if let Some(l) = lease::decode(&self.prefix, key, kv.value()) {
                            events.push(LeaseEvent::Put(l));
                        }
                    }
                    EventType::Delete => {
                        if let Some(subnet) = lease::parse_subnet_key(&self.prefix, key) {
                            events.push(LeaseEvent::Delete(subnet));
                        }
                    }
                }
            }
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }
}
