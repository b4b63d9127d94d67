//! One connection to an etcd cluster, as production runs it.
//!
//! The connection talks to one endpoint at a time (its client is connected to that member
//! only) and moves to the next one when a request fails for a reason of that member (down, no
//! leader, its TLS): store leases and keys live in the cluster, so work simply continues
//! through another member. Requests carry etcd's "require leader" flag, so a member that lost
//! quorum answers at once instead of letting the request time out. The TLS files are compared
//! with the loaded ones every [`RELOAD_CHECK`] (and after every failure) and a rotated set is
//! used from then on.

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KeyValue,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, TxnResponse, WatchOptions,
    WatchStream,
};

use crate::access::{Access, TlsMaterial};
use crate::cause::{Cause, Kind};

/// How long one request may take before the endpoint counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the TLS files are compared with the loaded ones.
pub const RELOAD_CHECK: Duration = Duration::from_secs(5);

/// The handle of a granted, time-limited store lease keys can be bound to.
pub type LeaseId = i64;

/// A request that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EtcdError {
    /// Every endpoint tried failed (the cause of the last one), or the server refused.
    #[error("etcd {what}: {cause}")]
    Failed { what: String, cause: Cause },
    /// A watch stream broke.
    #[error("etcd watch: {0}")]
    Watch(String),
    /// The server ended a watch stream.
    #[error("etcd watch ended")]
    WatchEnded,
    /// A read in pages met a revision compacted away after its first page.
    #[error("etcd list {prefix}: revision {revision} was compacted during the read")]
    Compacted { prefix: String, revision: i64 },
    /// One entry is larger than a reply may be.
    #[error("etcd {what}: one entry is larger than the {limit} bytes a reply may have")]
    TooLarge { what: String, limit: usize },
    /// The server canceled a watch (its start revision was compacted away, typically).
    #[error("etcd watch canceled (compacted at {compact_revision}): {reason}")]
    WatchCanceled {
        compact_revision: i64,
        reason: String,
    },
}

impl EtcdError {
    /// The endpoint's failure, for a failed request.
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            EtcdError::Failed { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// No endpoint could be used: why, per endpoint (one line).
#[derive(Debug, Clone)]
pub struct ConnectError(pub Vec<Cause>);

impl ConnectError {
    /// Whether a server refused this client (certificate, credentials, permissions): the
    /// configuration is wrong, no retry helps.
    pub fn refused(&self) -> bool {
        self.0.iter().any(Cause::refused)
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.0.iter().map(Cause::to_string).collect();
        f.write_str(&lines.join("; "))
    }
}

impl std::error::Error for ConnectError {}

/// What an endpoint must allow this client before it is used, checked without writing: a
/// read of `read`, and (with `write`) a write of that key in a transaction whose condition
/// is never true (etcd checks the permissions of every operation of a transaction, also of
/// the branch it does not take).
#[derive(Debug, Clone)]
pub struct Probe {
    pub read: String,
    pub write: Option<String>,
}

/// One stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key (keys that are not UTF-8 are shown with replacement characters).
    pub key: String,
    pub value: Vec<u8>,
    /// The revision of its creation and of its last write.
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The store lease it is bound to (0 for none).
    pub lease: LeaseId,
}

impl From<KeyValue> for Entry {
    fn from(kv: KeyValue) -> Entry {
        let (create_revision, mod_revision, lease) =
            (kv.create_revision(), kv.mod_revision(), kv.lease());
        let (key, value) = kv.into_key_value();
        Entry {
            key: String::from_utf8(key)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            value,
            create_revision,
            mod_revision,
            lease,
        }
    }
}

impl From<&KeyValue> for Entry {
    fn from(kv: &KeyValue) -> Entry {
        Entry {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        }
    }
}

/// The keys under a prefix and the store revision they were read at (a watch continues
/// from there).
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub entries: Vec<Entry>,
    pub revision: i64,
}

/// A change seen by a [`Watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written.
    Put(Entry),
    /// A key was deleted or expired with its lease.
    Delete { key: String },
}

/// A client of `endpoint` alone (connected lazily; authenticated at once when a user is set).
/// HTTP/2 keep-alives notice a silent peer within 15 s (not more often: etcd answers pings
/// closer than its `--grpc-keepalive-min-time`, 5 s, with GOAWAY).
async fn open(
    access: &Access,
    material: &TlsMaterial,
    endpoint: &str,
) -> Result<Client, etcd_client::Error> {
    let options = access
        .connect_options(material)
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    Client::connect([endpoint], Some(options)).await
}

/// Checks `probe` on `client`, writing nothing.
async fn check(client: &mut Client, probe: &Probe) -> Result<(), etcd_client::Error> {
    client
        .get(
            probe.read.as_str(),
            Some(GetOptions::new().with_count_only()),
        )
        .await?;
    if let Some(key) = &probe.write {
        let never = Compare::create_revision(key.as_str(), CompareOp::Less, 0);
        let txn = Txn::new()
            .when([never])
            .and_then([TxnOp::put(key.as_str(), "", None)]);
        client.txn(txn).await?;
    }
    Ok(())
}

/// A client that presents no certificate cannot have it rejected: a server refusing such a
/// client (Go's TLS 1.3 server sends a `bad_certificate` alert for a missing certificate)
/// demands one.
fn sent_no_certificate(access: &Access, cause: Cause) -> Cause {
    if cause.kind == Kind::ClientCertificateRejected && access.tls_without_identity() {
        return Cause {
            kind: Kind::NoClientCertificate,
            ..cause
        };
    }
    cause
}

/// A server demanding a client certificate from a client with none closes the connection
/// right after the TLS handshake, often before the client has read its alert: on a first
/// contact over TLS without a certificate, a connection closed by the server means that.
fn first_contact(access: &Access, cause: Cause) -> Cause {
    let closed = cause.detail.contains("connection closed");
    if cause.kind == Kind::Unreachable && closed && access.tls_without_identity() {
        return Cause {
            kind: Kind::NoClientCertificate,
            ..cause
        };
    }
    sent_no_certificate(access, cause)
}

/// Whether another member may do better than the one that failed with `kind`.
fn member_specific(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Unreachable
            | Kind::ServerNotTrusted
            | Kind::NoClientCertificate
            | Kind::ClientCertificateRejected
            | Kind::NotTls
    )
}

fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(msg) => msg.contains("not found"),
        etcd_client::Error::GRpcStatus(status) => status.message().contains("lease not found"),
        _ => false,
    }
}

/// A connection to one member of an etcd cluster at a time.
pub struct Connection {
    access: Access,
    /// The endpoint in use (an index into `access.endpoints`) and its client.
    current: usize,
    client: Client,
    /// The TLS files the client was built from, and when they were last compared.
    material: TlsMaterial,
    checked: Option<Instant>,
    /// The keep-alive stream of one store lease (it belongs to the client it was opened on).
    keeper: Option<(LeaseId, LeaseKeeper, LeaseKeepAliveStream)>,
    /// The last refusal (certificate, credentials) since the last success.
    refusal: Option<Cause>,
}

impl Connection {
    /// Connects to the first endpoint that accepts this client and passes `probe`, trying
    /// them in order; the reason of each one otherwise.
    pub async fn connect(access: &Access, probe: &Probe) -> Result<Connection, ConnectError> {
        let material = access.tls_material().map_err(|e| {
            ConnectError(vec![Cause {
                endpoint: access.endpoints.join(","),
                kind: Kind::TlsMaterial,
                detail: e.to_string(),
            }])
        })?;
        let mut causes = Vec::new();
        for (i, endpoint) in access.endpoints.iter().enumerate() {
            let opened = async {
                let mut client = open(access, &material, endpoint).await?;
                check(&mut client, probe).await?;
                Ok::<_, etcd_client::Error>(client)
            };
            match opened.await {
                Ok(client) => {
                    for c in &causes {
                        log::warn!("{c}");
                    }
                    log::info!("etcd: using {endpoint}");
                    return Ok(Connection {
                        access: access.clone(),
                        current: i,
                        client,
                        material,
                        checked: Some(Instant::now()),
                        keeper: None,
                        refusal: None,
                    });
                }
                Err(e) => causes.push(first_contact(access, Cause::of(endpoint, &e))),
            }
        }
        Err(ConnectError(causes))
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &str {
        &self.access.endpoints[self.current]
    }

    /// Records `cause` and tells it better: a server that refused this client's certificate
    /// closes the next connections right after the TLS handshake, and the client often sees
    /// only "connection closed" or "broken pipe" then; such a close after a refusal by the
    /// same endpoint is that refusal again.
    fn explain(&mut self, cause: Cause) -> Cause {
        let cause = sent_no_certificate(&self.access, cause);
        let closed = cause.kind == Kind::Unreachable
            && (cause.detail.contains("connection closed") || cause.detail.contains("broken pipe"));
        match &self.refusal {
            Some(r) if closed && r.endpoint == cause.endpoint => Cause {
                kind: r.kind,
                ..cause
            },
            _ => {
                if cause.refused() {
                    self.refusal = Some(cause.clone());
                }
                cause
            }
        }
    }

    /// Moves to the next endpoint that opens after `cause` (the current one stays when no
    /// other opens). The keep-alive stream belonged to the old client.
    async fn fail_over(&mut self, cause: &Cause) {
        self.keeper = None;
        self.checked = None;
        let n = self.access.endpoints.len();
        for step in 1..n {
            let next = (self.current + step) % n;
            let endpoint = self.access.endpoints[next].clone();
            match open(&self.access, &self.material, &endpoint).await {
                Ok(client) => {
                    log::warn!("{cause}; switching to {endpoint}");
                    log::info!("etcd: using {endpoint}");
                    self.client = client;
                    self.current = next;
                    return;
                }
                Err(e) => log::warn!("{}", Cause::of(&endpoint, &e)),
            }
        }
    }

    /// Uses rotated TLS files: compares them with the loaded ones at most every
    /// [`RELOAD_CHECK`] (at once after a failure) and reconnects with them when they changed
    /// and are complete.
    async fn reload_if_rotated(&mut self) {
        if self.checked.is_some_and(|at| at.elapsed() < RELOAD_CHECK) {
            return;
        }
        self.checked = Some(Instant::now());
        let access = self.access.clone();
        let read = tokio::task::spawn_blocking(move || access.tls_material()).await;
        let material = match read {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                log::warn!("etcd TLS files: {e}; keeping the loaded ones");
                return;
            }
            Err(_) => return,
        };
        if material == self.material {
            return;
        }
        let endpoint = self.endpoint().to_string();
        match open(&self.access, &material, &endpoint).await {
            Ok(client) => {
                log::info!("etcd TLS files changed: reconnected to {endpoint} with them");
                self.client = client;
                self.material = material;
                self.keeper = None;
            }
            Err(e) => log::warn!(
                "etcd TLS files changed but {}; keeping the loaded ones",
                Cause::of(&endpoint, &e)
            ),
        }
    }

    /// Runs `op` (described as `what` in errors) on the current endpoint, moving on to the
    /// next after a failure of the member, each endpoint once at most.
    pub async fn call<T>(
        &mut self,
        what: &str,
        mut op: impl AsyncFnMut(&mut Client) -> Result<T, etcd_client::Error>,
    ) -> Result<T, EtcdError> {
        self.reload_if_rotated().await;
        let mut left = self.access.endpoints.len();
        loop {
            let e = match op(&mut self.client).await {
                Ok(v) => {
                    self.refusal = None;
                    return Ok(v);
                }
                Err(e) => e,
            };
            let cause = Cause::of(self.endpoint(), &e);
            let cause = self.explain(cause);
            self.checked = None;
            left -= 1;
            if left == 0 || !member_specific(cause.kind) {
                return Err(EtcdError::Failed {
                    what: what.to_string(),
                    cause,
                });
            }
            self.fail_over(&cause).await;
        }
    }

    /// The value of `key`, if it exists.
    pub async fn get(&mut self, key: &str) -> Result<Option<Entry>, EtcdError> {
        let resp = self
            .call(&format!("get {key}"), async |c| c.get(key, None).await)
            .await?;
        Ok(resp.kvs().first().map(Entry::from))
    }

    /// Writes `key`, bound to store lease `lease` when given (the key goes with the lease).
    pub async fn put(
        &mut self,
        key: &str,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<(), EtcdError> {
        let options = lease.map(|id| PutOptions::new().with_lease(id));
        self.call(&format!("put {key}"), async |c| {
            c.put(key, value, options.clone()).await
        })
        .await
        .map(|_| ())
    }

    /// Deletes `key`; whether it existed.
    pub async fn delete(&mut self, key: &str) -> Result<bool, EtcdError> {
        let resp = self
            .call(&format!("delete {key}"), async |c| {
                c.delete(key, None::<DeleteOptions>).await
            })
            .await?;
        Ok(resp.deleted() > 0)
    }

    /// Runs `txn` (described as `what` in errors).
    pub async fn txn(&mut self, what: &str, txn: &Txn) -> Result<TxnResponse, EtcdError> {
        self.call(what, async |c| c.txn(txn.clone()).await).await
    }

    /// Watches the keys under `prefix` for changes after `after_revision`.
    pub async fn watch_prefix(
        &mut self,
        prefix: &str,
        after_revision: i64,
    ) -> Result<Watch, EtcdError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after_revision + 1);
        let stream = self
            .call("watch", async |c| {
                c.watch(prefix, Some(options.clone())).await
            })
            .await?;
        Ok(Watch { stream })
    }

    /// Grants a store lease of `ttl` (at least a second).
    pub async fn grant_lease(&mut self, ttl: Duration) -> Result<LeaseId, EtcdError> {
        let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let resp = self
            .call("grant lease", async |c| c.lease_grant(secs, None).await)
            .await?;
        Ok(resp.id())
    }

    /// Revokes store lease `id`, deleting the keys bound to it.
    pub async fn revoke_lease(&mut self, id: LeaseId) -> Result<(), EtcdError> {
        if matches!(&self.keeper, Some((kept, _, _)) if *kept == id) {
            self.keeper = None;
        }
        self.call("revoke lease", async |c| c.lease_revoke(id).await)
            .await
            .map(|_| ())
    }

    /// Renews store lease `id`; `false` when it has already expired (or was revoked).
    pub async fn keep_alive(&mut self, id: LeaseId) -> Result<bool, EtcdError> {
        self.reload_if_rotated().await;
        let mut left = self.access.endpoints.len();
        loop {
            let cause = match self.keep_alive_once(id).await {
                Ok(alive) => {
                    self.refusal = None;
                    return Ok(alive);
                }
                Err(cause) => self.explain(cause),
            };
            self.checked = None;
            left -= 1;
            if left == 0 || !member_specific(cause.kind) {
                return Err(EtcdError::Failed {
                    what: "keep-alive".into(),
                    cause,
                });
            }
            self.fail_over(&cause).await;
        }
    }

    /// One keep-alive exchange of `id` on the current client: whether the lease is alive.
    async fn keep_alive_once(&mut self, id: LeaseId) -> Result<bool, Cause> {
        let endpoint = self.endpoint().to_string();
        let unreachable = |detail: &str| Cause {
            endpoint: endpoint.clone(),
            kind: Kind::Unreachable,
            detail: detail.to_string(),
        };
        if !matches!(&self.keeper, Some((kept, _, _)) if *kept == id) {
            let (keeper, stream) = match self.client.lease_keep_alive(id).await {
                Ok(pair) => pair,
                Err(e) if lease_not_found(&e) => return Ok(false),
                Err(e) => return Err(Cause::of(&endpoint, &e)),
            };
            self.keeper = Some((id, keeper, stream));
        }
        let (_, keeper, stream) = self.keeper.as_mut().expect("set above");
        let exchange = async {
            keeper.keep_alive().await?;
            stream.message().await
        };
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, exchange).await;
        if !matches!(outcome, Ok(Ok(Some(_)))) {
            self.keeper = None;
        }
        match outcome {
            Ok(Ok(Some(resp))) => Ok(resp.ttl() > 0),
            // An expired or revoked lease: the client reports it as an error, callers as
            // "not alive".
            Ok(Err(e)) if lease_not_found(&e) => Ok(false),
            Ok(Err(e)) => Err(Cause::of(&endpoint, &e)),
            Ok(Ok(None)) => Err(unreachable("keep-alive stream closed")),
            Err(_) => Err(unreachable("keep-alive timed out")),
        }
    }
}

/// A running watch of a prefix.
pub struct Watch {
    stream: WatchStream,
}

impl Watch {
    /// The next non-empty batch of changes. An error ends the watch (read again and watch
    /// from the new revision).
    pub async fn next(&mut self) -> Result<Vec<WatchEvent>, EtcdError> {
        loop {
            let resp = self
                .stream
                .message()
                .await
                .map_err(|e| EtcdError::Watch(e.to_string()))?
                .ok_or(EtcdError::WatchEnded)?;
            if resp.canceled() {
                return Err(EtcdError::WatchCanceled {
                    compact_revision: resp.compact_revision(),
                    reason: resp.cancel_reason().to_string(),
                });
            }
            let events: Vec<WatchEvent> = resp
                .events()
                .iter()
                .filter_map(|event| {
                    let kv = event.kv()?;
                    Some(match event.event_type() {
                        EventType::Put => WatchEvent::Put(Entry::from(kv)),
                        EventType::Delete => WatchEvent::Delete {
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                        },
                    })
                })
                .collect();
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EtcdOptions;

    fn access(with_identity: bool) -> (tempfile::TempDir, Access) {
        let dir = tempfile::tempdir().unwrap();
        let pem = |name: &str, kind: &str| {
            let path = dir.path().join(name);
            let text = format!("-----BEGIN {kind}-----\nAA==\n-----END {kind}-----\n");
            std::fs::write(&path, text).unwrap();
            path
        };
        let mut o = EtcdOptions {
            endpoints: vec!["https://198.18.0.2:2379".into()],
            cafile: Some(pem("ca.pem", "CERTIFICATE")),
            ..EtcdOptions::default()
        };
        if with_identity {
            o.certfile = Some(pem("c.pem", "CERTIFICATE"));
            o.keyfile = Some(pem("k.pem", "PRIVATE KEY"));
        }
        let access = Access::new(&o).unwrap();
        (dir, access)
    }

    fn cause(kind: Kind, detail: &str) -> Cause {
        Cause {
            endpoint: "https://198.18.0.2:2379".into(),
            kind,
            detail: detail.into(),
        }
    }

    #[test]
    fn a_refusal_of_a_client_without_a_certificate_asks_for_one() {
        let (_dir, none) = access(false);
        let alert = cause(
            Kind::ClientCertificateRejected,
            "fatal alert: BadCertificate",
        );
        let closed = cause(Kind::Unreachable, "connection closed");
        assert_eq!(
            first_contact(&none, alert.clone()).kind,
            Kind::NoClientCertificate
        );
        assert_eq!(
            first_contact(&none, closed.clone()).kind,
            Kind::NoClientCertificate
        );
        let (_dir, with) = access(true);
        assert_eq!(
            first_contact(&with, alert).kind,
            Kind::ClientCertificateRejected
        );
        assert_eq!(first_contact(&with, closed).kind, Kind::Unreachable);
    }
}
