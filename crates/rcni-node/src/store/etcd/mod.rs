//! The etcd v3 implementation of [`Store`] (gRPC through `etcd-client`).
//!
//! Keys are flannel's; a lease key is written in a transaction whose condition is either "the
//! key does not exist" (`create_revision == 0`) or "the key is unchanged since I read it"
//! (`mod_revision == n`), and is bound to an etcd lease with the node's TTL.
//!
//! The store talks to one endpoint at a time (its client is connected to that member only)
//! and moves to the next one when a request fails for a reason of that member (down, no
//! leader, its TLS): the etcd lease lives in the cluster, so renewals simply continue through
//! another member. Requests carry etcd's "require leader" flag, so a member that lost quorum
//! answers at once instead of letting the request time out. [`access`] holds the TLS files
//! and credentials, [`cause`] tells why an endpoint failed; the TLS files are compared with
//! the loaded ones every [`RELOAD_CHECK`] (and after every failure) and a rotated set is
//! used from then on.

pub mod access;
pub mod cause;

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};

use access::TlsMaterial;
pub use access::{Access, AccessError, EtcdOptions};
pub use cause::{Cause, Kind};

use super::{Claim, LeaseEvent, LeaseId, LeaseWatch, Snapshot, Store, StoreError, StoredLease};
use crate::lease::{self, Lease};

/// How long one request may take before the store counts as unreachable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the TLS files are compared with the loaded ones.
pub const RELOAD_CHECK: Duration = Duration::from_secs(5);

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

/// Checks that `client` may read the network config and write lease keys, writing nothing:
/// etcd checks the permissions of every operation of a transaction, also of the branch its
/// condition (never true here) does not take.
async fn probe(client: &mut Client, prefix: &str) -> Result<(), etcd_client::Error> {
    let config = format!("{prefix}/config");
    client
        .get(config, Some(GetOptions::new().with_count_only()))
        .await?;
    let key = format!("{}rcni-permission-probe", lease::subnets_prefix(prefix));
    let never = Compare::create_revision(key.clone(), CompareOp::Less, 0);
    let txn = Txn::new()
        .when([never])
        .and_then([TxnOp::put(key, "", None)]);
    client.txn(txn).await?;
    Ok(())
}

/// A server demanding a client certificate from a client with none closes the connection
/// right after the TLS handshake, without an alert the client sees: on a first contact over
/// TLS without a certificate, a connection closed by the server means that.
fn first_contact(access: &Access, cause: Cause) -> Cause {
    let closed = cause.detail.contains("connection closed");
    if cause.kind == Kind::Unreachable && closed && access.tls_without_identity() {
        return Cause {
            kind: Kind::NoClientCertificate,
            ..cause
        };
    }
    cause
}

/// An etcd client bound to one key prefix.
pub struct EtcdStore {
    access: Access,
    prefix: String,
    /// The endpoint in use (an index into `access.endpoints`) and its client.
    current: usize,
    client: Client,
    /// The TLS files the client was built from, and when they were last compared.
    material: TlsMaterial,
    checked: Option<Instant>,
    keeper: Option<(LeaseId, LeaseKeeper, LeaseKeepAliveStream)>,
    /// The last refusal (certificate, credentials) since the last success.
    refusal: Option<Cause>,
}

impl EtcdStore {
    /// Connects to the first endpoint that accepts this client and lets it read and write
    /// under `prefix`, trying them in order; the reason of each one otherwise.
    pub async fn connect(access: &Access, prefix: &str) -> Result<Self, ConnectError> {
        let prefix = prefix.trim_end_matches('/').to_string();
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
                probe(&mut client, &prefix).await?;
                Ok::<_, etcd_client::Error>(client)
            };
            match opened.await {
                Ok(client) => {
                    for c in &causes {
                        log::warn!("{c}");
                    }
                    log::info!("etcd: using {endpoint}");
                    return Ok(EtcdStore {
                        access: access.clone(),
                        prefix,
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

    fn config_key(&self) -> String {
        format!("{}/config", self.prefix)
    }

    /// Records `cause` and tells it better: a server that refused this client's certificate
    /// closes the next connections right after the TLS handshake, and the client often sees
    /// only "connection closed" or "broken pipe" then; such a close after a refusal by the same endpoint is
    /// that refusal again.
    fn explain(&mut self, cause: Cause) -> Cause {
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

    /// Runs `op` on the current endpoint, moving on to the next after a failure of the
    /// member, each endpoint once at most.
    async fn call<T>(
        &mut self,
        what: &str,
        mut op: impl AsyncFnMut(&mut Client) -> Result<T, etcd_client::Error>,
    ) -> Result<T, StoreError> {
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
                return Err(err(what, cause));
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
            // An expired or revoked lease: the client reports it as an error, the agent as
            // "not alive" (it takes the subnet back).
            Ok(Err(e)) if lease_not_found(&e) => Ok(false),
            Ok(Err(e)) => Err(Cause::of(&endpoint, &e)),
            Ok(Ok(None)) => Err(unreachable("keep-alive stream closed")),
            Err(_) => Err(unreachable("keep-alive timed out")),
        }
    }
}

impl Store for EtcdStore {
    type Watch = EtcdWatch;

    async fn network_config(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        let key = self.config_key();
        let resp = self
            .call("get config", async |c| c.get(key.clone(), None).await)
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    async fn snapshot(&mut self) -> Result<Snapshot, StoreError> {
        let key = lease::subnets_prefix(&self.prefix);
        let resp = self
            .call("list leases", async |c| {
                c.get(key.clone(), Some(GetOptions::new().with_prefix()))
                    .await
            })
            .await?;
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
            .call("grant lease", async |c| c.lease_grant(ttl_secs, None).await)
            .await?
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
        let outcome = self
            .call("claim lease", async |c| c.txn(txn.clone()).await)
            .await;
        let won = matches!(&outcome, Ok(resp) if resp.succeeded());
        if !won {
            // The grant is useless now; let it go (it would expire by itself anyway).
            let _ = self
                .call("revoke lease", async |c| c.lease_revoke(granted).await)
                .await;
        }
        outcome?;
        Ok(won.then_some(granted))
    }

    async fn renew(&mut self, id: LeaseId) -> Result<bool, StoreError> {
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
                return Err(err("keep-alive", cause));
            }
            self.fail_over(&cause).await;
        }
    }

    async fn revoke(&mut self, id: LeaseId) -> Result<(), StoreError> {
        self.keeper = None;
        self.call("revoke lease", async |c| c.lease_revoke(id).await)
            .await
            .map(|_| ())
    }

    async fn watch(&mut self, after_revision: i64) -> Result<EtcdWatch, StoreError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after_revision + 1);
        let key = lease::subnets_prefix(&self.prefix);
        let stream = self
            .call("watch", async |c| {
                c.watch(key.clone(), Some(options.clone())).await
            })
            .await?;
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
