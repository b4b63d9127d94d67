//! The plain key-value operations policy enforcement and pod publication need from etcd:
//! read a prefix, watch it, put a key bound to a store lease, delete, and read which store
//! lease a key is bound to. A client of every endpoint (etcd-client balances over them),
//! with the agent's TLS files and credentials.

use std::time::Duration;

use cni_etcd::etcd_client::{Client, EventType, GetOptions, PutOptions, WatchOptions, WatchStream};

use crate::store::etcd::Access;
use crate::store::{LeaseId, StoreError};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

fn err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("etcd {what}: {e}"))
}

/// One key as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Vec<u8>,
    /// The store lease it is bound to (0 for none).
    pub lease: LeaseId,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

/// A key-value client.
#[derive(Clone)]
pub struct Kv {
    client: Client,
}

impl Kv {
    /// Connects to the endpoints of `access`.
    pub async fn connect(access: &Access) -> Result<Kv, StoreError> {
        let material = access.tls_material().map_err(|e| err("TLS files", e))?;
        let options = access
            .connect_options(&material)
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        let client = Client::connect(&access.endpoints, Some(options))
            .await
            .map_err(|e| err("connect", e))?;
        Ok(Kv { client })
    }

    /// Every key under `prefix`, and the revision of the read.
    pub async fn list(&mut self, prefix: &str) -> Result<(Vec<Entry>, i64), StoreError> {
        let resp = self
            .client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| err("list", e))?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        let entries = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                Some(Entry {
                    key: kv.key_str().ok()?.to_string(),
                    value: kv.value().to_vec(),
                    lease: kv.lease(),
                })
            })
            .collect();
        Ok((entries, revision))
    }

    /// The store lease `key` is bound to; `None` when the key does not exist.
    pub async fn lease_of(&mut self, key: &str) -> Result<Option<LeaseId>, StoreError> {
        let resp = self
            .client
            .get(key, None)
            .await
            .map_err(|e| err("get", e))?;
        Ok(resp.kvs().first().map(|kv| kv.lease()))
    }

    /// Writes `key`, bound to `lease`.
    pub async fn put(&mut self, key: &str, value: &[u8], lease: LeaseId) -> Result<(), StoreError> {
        self.client
            .put(key, value, Some(PutOptions::new().with_lease(lease)))
            .await
            .map_err(|e| err("put", e))?;
        Ok(())
    }

    /// Deletes `key` (a missing one is fine).
    pub async fn delete(&mut self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete(key, None)
            .await
            .map_err(|e| err("delete", e))?;
        Ok(())
    }

    /// Watches `prefix` for changes after `revision`.
    pub async fn watch(&mut self, prefix: &str, revision: i64) -> Result<KvWatch, StoreError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let stream = self
            .client
            .watch(prefix, Some(options))
            .await
            .map_err(|e| err("watch", e))?;
        Ok(KvWatch { stream })
    }
}

/// A running watch.
pub struct KvWatch {
    stream: WatchStream,
}

impl KvWatch {
    /// The next batch of changes. An error ends the watch (read the prefix again).
    pub async fn next(&mut self) -> Result<Vec<Change>, StoreError> {
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
            let changes: Vec<Change> = resp
                .events()
                .iter()
                .filter_map(|event| {
                    let kv = event.kv()?;
                    let key = kv.key_str().ok()?.to_string();
                    Some(match event.event_type() {
                        EventType::Put => Change::Put {
                            key,
                            value: kv.value().to_vec(),
                        },
                        EventType::Delete => Change::Delete { key },
                    })
                })
                .collect();
            if !changes.is_empty() {
                return Ok(changes);
            }
        }
    }
}
