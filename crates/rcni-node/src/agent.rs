//! The reconcile loop: acquire (or take back) the node's subnet lease, program the backend for
//! every remote lease, follow the watch, renew the lease, resync the kernel periodically, keep
//! the health state current, and stop when the shutdown value turns true.
//!
//! Restarts never disturb live paths: the backend's start reuses what it finds, the kernel is
//! resynced (and stale objects removed) only after a complete list of leases has been loaded,
//! and a path is removed only for a lease that is gone. The kernel work is synchronous netlink:
//! it runs on blocking threads ([`Kernel`]), one call at a time, so the event loop (and the
//! status file's writer, [`crate::health::keep_status_file`]) is never stalled by it.
//!
//! State the agent owns: its lease (in the store, and its subnet in the subnet file), the
//! VXLAN or WireGuard devices (and the wireguard-go serving them), the routes tagged [`crate::backend::RTPROT_RCNI`], the nf_tables table
//! [`crate::masq::TABLE`], the conflist and the status file. A graceful stop keeps them all
//! (pods keep their traffic while the agent restarts); `--release-on-exit` revokes the lease,
//! so the other nodes remove their paths to this one.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::Backend;
use crate::health::{self, lock, SharedHealth};
use crate::lease::{Lease, LeaseAttrs, Subnets};
use crate::network::NetworkConfig;
use crate::store::{Claim, LeaseEvent, LeaseId, LeaseWatch, Snapshot, Store, StoreError};

/// How often the kernel is compared with the leases (flannel: 10 s).
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(10);
/// Pause between attempts while the store is unreachable.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How often the backend's upkeep runs ([`crate::backend::Backend::upkeep`]: a supervised
/// process found dead is started again within this).
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(1);

/// What the loop needs besides the store and the backend.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node's public (underlay) IPv4 address, on an IPv4 network.
    pub public_ip: Option<Ipv4Addr>,
    /// The node's public (underlay) IPv6 address, on an IPv6 network.
    pub public_ipv6: Option<Ipv6Addr>,
    /// TTL of the lease.
    pub lease_ttl: Duration,
    /// Revoke the lease on a graceful stop.
    pub release_on_exit: bool,
    /// How often the kernel is resynced.
    pub resync_interval: Duration,
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No free subnet is left in the network.
    #[error("no free subnet left in {0}")]
    NetworkFull(String),
    /// The backend cannot be set up.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

/// The held lease.
#[derive(Debug, Clone)]
pub struct Held {
    /// The node subnet.
    pub lease: Lease,
    /// The store lease it is bound to.
    pub id: LeaseId,
}

pub use crate::shutdown::stopped;

/// Retries `op` every [`RETRY_INTERVAL`] until it succeeds; `None` if shut down first.
async fn retry<S: Store, T>(
    store: &mut S,
    health: &SharedHealth,
    shutdown: &mut watch::Receiver<bool>,
    what: &str,
    mut op: impl AsyncFnMut(&mut S) -> Result<T, StoreError>,
) -> Option<T> {
    loop {
        match op(store).await {
            Ok(v) => {
                lock(health).store_ok();
                return Some(v);
            }
            Err(e) => {
                lock(health).store_failed(&e);
                log::warn!("{what}: {e}; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_INTERVAL) => {}
            _ = stopped(shutdown) => return None,
        }
    }
}

/// Reads the network config, waiting for it to appear.
pub async fn wait_for_config<S: Store>(
    store: &mut S,
    health: &SharedHealth,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Result<NetworkConfig, crate::network::ConfigError>> {
    loop {
        let raw = retry(store, health, shutdown, "read network config", async |s| {
            s.network_config().await
        })
        .await?;
        match raw {
            Some(json) => return Some(NetworkConfig::parse(&json)),
            None => log::warn!("no network config in the store yet; waiting"),
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_INTERVAL) => {}
            _ = stopped(shutdown) => return None,
        }
    }
}

/// Which subnets to try first: this node's own lease (same PublicIP or PublicIPv6), else the
/// ones in the subnet file if they are still free, else random free ones. The first case also
/// returns the revision the key must still be at.
pub fn choose_subnet(
    network: &NetworkConfig,
    snapshot: &Snapshot,
    public_ip: Option<Ipv4Addr>,
    public_ipv6: Option<Ipv6Addr>,
    remembered: Option<Subnets>,
    random: u64,
) -> Option<(Subnets, Claim)> {
    let mine = |a: &LeaseAttrs| {
        (public_ip.is_some() && a.public_ipv4() == public_ip)
            || (public_ipv6.is_some() && a.public_ipv6 == public_ipv6)
    };
    if let Some(own) = snapshot
        .leases
        .iter()
        .find(|s| mine(&s.lease.attrs) && network.is_valid(s.lease.subnet))
    {
        return Some((own.lease.subnet, Claim::IfUnchangedSince(own.mod_revision)));
    }
    let taken: Vec<Subnets> = snapshot.leases.iter().map(|s| s.lease.subnet).collect();
    let free = |s: &Subnets| {
        taken
            .iter()
            .all(|t| (s.v4.is_none() || t.v4 != s.v4) && (s.v6.is_none() || t.v6 != s.v6))
    };
    if let Some(sub) = remembered.filter(|s| network.is_valid(*s) && free(s)) {
        return Some((sub, Claim::IfAbsent));
    }
    network
        .pick_free(&taken, random)
        .map(|s| (s, Claim::IfAbsent))
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Acquires the node's lease, retrying through store outages and lost races.
pub async fn acquire<S: Store>(
    store: &mut S,
    network: &NetworkConfig,
    attrs: &LeaseAttrs,
    remembered: Option<Subnets>,
    cfg: &AgentConfig,
    health: &SharedHealth,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Result<Held, AgentError>> {
    loop {
        let snapshot = retry(store, health, shutdown, "list leases", async |s| {
            s.snapshot().await
        })
        .await?;
        let Some((subnet, claim)) = choose_subnet(
            network,
            &snapshot,
            cfg.public_ip,
            cfg.public_ipv6,
            remembered,
            random_u64(),
        ) else {
            let networks: Vec<String> = network.networks().iter().map(|n| n.to_string()).collect();
            return Some(Err(AgentError::NetworkFull(networks.join(", "))));
        };
        let lease = Lease {
            subnet,
            attrs: attrs.clone(),
        };
        match store.acquire(&lease, cfg.lease_ttl, claim).await {
            Ok(Some(id)) => {
                lock(health).store_ok();
                log::info!("acquired subnet {subnet} ({claim:?})");
                // A taken-back lease leaves the previous run's store lease without keys:
                // revoke it rather than let it live out its TTL.
                let previous = snapshot
                    .leases
                    .iter()
                    .find(|s| s.lease.subnet == subnet)
                    .map(|s| s.store_lease)
                    .filter(|old| *old != 0 && *old != id);
                if let Some(old) = previous {
                    if let Err(e) = store.revoke(old).await {
                        log::debug!("revoke the previous store lease {old}: {e}");
                    }
                }
                return Some(Ok(Held { lease, id }));
            }
            Ok(None) => log::info!("subnet {subnet} was taken meanwhile; choosing again"),
            Err(e) => {
                lock(health).store_failed(&e);
                log::warn!("claim {subnet}: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_INTERVAL) => {}
                    _ = stopped(shutdown) => return None,
                }
            }
        }
    }
}

/// The remote leases and what the backend did with them.
pub struct Reconciler {
    backend: Box<dyn Backend>,
    own: Subnets,
    remotes: BTreeMap<Subnets, Lease>,
    health: SharedHealth,
    /// A complete list has been loaded: before that, `remotes` is not the cluster, and a
    /// resync would remove the paths of live nodes.
    loaded: bool,
}

impl Reconciler {
    /// A reconciler for the node owning `own`.
    pub fn new(backend: Box<dyn Backend>, own: Subnets, health: SharedHealth) -> Self {
        Reconciler {
            backend,
            own,
            remotes: BTreeMap::new(),
            health,
            loaded: false,
        }
    }

    /// Programs the node's own subnet where the backend needs it.
    pub fn configure_local(&mut self) -> Result<(), crate::backend::BackendError> {
        self.backend.configure_local(self.own)
    }

    /// Takes a full list: removes paths of leases gone, adds new or changed ones, then resyncs.
    pub fn load(&mut self, snapshot: &Snapshot) {
        let fresh: BTreeMap<Subnets, Lease> = snapshot
            .leases
            .iter()
            .filter(|s| s.lease.subnet != self.own)
            .map(|s| (s.lease.subnet, s.lease.clone()))
            .collect();
        let gone: Vec<Subnets> = self
            .remotes
            .keys()
            .filter(|k| !fresh.contains_key(k))
            .copied()
            .collect();
        for subnet in gone {
            self.apply(LeaseEvent::Delete(subnet));
        }
        // New nodes in one call (a backend may program them together), changed ones in place.
        let (new, known): (Vec<Lease>, Vec<Lease>) = fresh
            .into_values()
            .partition(|l| !self.remotes.contains_key(&l.subnet));
        if !new.is_empty() {
            log::info!("{} remote nodes: adding", new.len());
            if let Err(e) = self.backend.add_remotes(&new) {
                log::warn!("paths to new nodes: {e} (the resync retries)");
            }
            self.remotes.extend(new.into_iter().map(|l| (l.subnet, l)));
        }
        for lease in known {
            self.apply(LeaseEvent::Put(lease));
        }
        self.loaded = true;
        lock(&self.health).leases_loaded = true;
        self.resync();
    }

    /// Applies one watch event; only what differs changes.
    pub fn apply(&mut self, event: LeaseEvent) {
        match event {
            LeaseEvent::Put(lease) if lease.subnet == self.own => {}
            LeaseEvent::Put(lease) => {
                if self.remotes.get(&lease.subnet) == Some(&lease) {
                    return;
                }
                let done = match self.remotes.get(&lease.subnet) {
                    Some(old) => {
                        log::info!(
                            "remote node {} now at {}: updating",
                            lease.subnet,
                            lease.attrs.public_ip
                        );
                        self.backend.update_remote(old, &lease)
                    }
                    None => {
                        log::info!(
                            "remote node {} at {}: adding",
                            lease.subnet,
                            lease.attrs.public_ip
                        );
                        self.backend.add_remote(&lease)
                    }
                };
                if let Err(e) = done {
                    log::warn!("path to {}: {e} (the resync retries)", lease.subnet);
                }
                self.remotes.insert(lease.subnet, lease);
            }
            LeaseEvent::Delete(subnet) => {
                if let Some(old) = self.remotes.remove(&subnet) {
                    log::info!("remote node {subnet} gone: removing");
                    if let Err(e) = self.backend.remove_remote(&old) {
                        log::warn!("remove path to {subnet}: {e}");
                    }
                }
            }
        }
        lock(&self.health).leases_known = self.remotes.len();
    }

    /// Compares the kernel with the known leases and repairs it; nothing before the first
    /// complete list.
    pub fn resync(&mut self) {
        if !self.loaded {
            log::debug!("resync skipped: no complete list of leases yet");
            return;
        }
        let remotes: Vec<Lease> = self.remotes.values().cloned().collect();
        let result = self.backend.resync(&remotes);
        let tunnels = self.backend.tunnel_status();
        lock(&self.health).tunnels = tunnels;
        match result {
            Ok(r) => {
                if r.restored + r.removed > 0 {
                    log::info!(
                        "resync: {} restored, {} stale removed",
                        r.restored,
                        r.removed
                    );
                }
                let mut h = lock(&self.health);
                h.repairs += r.restored as u64;
                h.remotes_programmed = r.programmed;
                h.leases_known = self.remotes.len();
                h.last_sync_unix = Some(health::unix_now());
            }
            Err(e) => log::warn!("resync: {e}"),
        }
    }
}

/// What the node publishes in its lease's `BackendData` and `BackendV6Data`.
pub type Published = (
    Option<crate::lease::BackendData>,
    Option<crate::lease::BackendData>,
);

impl Reconciler {
    /// The backend's upkeep ([`UPKEEP_INTERVAL`]): what it put back is followed by a resync;
    /// returns what the node publishes when that changed.
    pub fn upkeep(&mut self) -> Option<Published> {
        match self.backend.upkeep() {
            Err(e) => {
                log::warn!("backend upkeep: {e}");
                None
            }
            Ok(u) => {
                if u.resync {
                    self.resync();
                }
                u.republish
                    .then(|| (self.backend.backend_data(), self.backend.backend_v6_data()))
            }
        }
    }
}

/// The backend's upkeep round, and the lease written again with what the node publishes when
/// that changed (`unpublished` keeps a write that failed for the next round).
async fn upkeep_round<S: Store>(
    store: &mut S,
    held: &mut Held,
    kernel: &Kernel,
    health: &SharedHealth,
    unpublished: &mut bool,
) {
    if let Some((data, v6)) = kernel.run(Reconciler::upkeep).await {
        held.lease.attrs.backend_data = data;
        held.lease.attrs.backend_v6_data = v6;
        *unpublished = true;
    }
    if !*unpublished {
        return;
    }
    match store.republish(&held.lease, held.id).await {
        Ok(written) => {
            lock(health).store_ok();
            *unpublished = false;
            if written {
                log::info!("published the new backend data of {}", held.lease.subnet);
            }
            // Otherwise the key is gone: it is written again, with this data, when the
            // watch reports the deletion.
        }
        Err(e) => {
            log::warn!("publish the new backend data: {e}; retrying");
            lock(health).store_failed(&e);
        }
    }
}

/// The reconciler behind a lock, its calls run on blocking threads.
#[derive(Clone)]
pub struct Kernel(Arc<Mutex<Reconciler>>);

impl Kernel {
    /// Wraps `reconciler`.
    pub fn new(reconciler: Reconciler) -> Self {
        Kernel(Arc::new(Mutex::new(reconciler)))
    }

    /// Runs `work` on a blocking thread and waits for it; calls run one at a time, in order.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Reconciler) -> T + Send + 'static,
    ) -> T {
        let reconciler = self.0.clone();
        let done = tokio::task::spawn_blocking(move || {
            work(&mut reconciler.lock().unwrap_or_else(PoisonError::into_inner))
        })
        .await;
        done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

/// Runs the loop after the lease is held, until shutdown. Returns the held lease (which may
/// have been re-acquired meanwhile).
pub async fn run<S: Store>(
    store: &mut S,
    mut held: Held,
    kernel: &Kernel,
    cfg: &AgentConfig,
    health: &SharedHealth,
    shutdown: &mut watch::Receiver<bool>,
) -> Held {
    let mut watch: Option<S::Watch> = None;
    // The first resync is one period away (the first list resyncs on its own), and never
    // runs before that list is loaded (`Reconciler::resync`).
    let mut resync = tokio::time::interval_at(
        tokio::time::Instant::now() + cfg.resync_interval,
        cfg.resync_interval,
    );
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Renew well before expiry: a third of the TTL, at most every 10 minutes, at least every second.
    let renew_every = (cfg.lease_ttl / 3).clamp(Duration::from_secs(1), Duration::from_secs(600));
    let mut next_renew = tokio::time::Instant::now();
    let mut relist_after = tokio::time::Instant::now();
    let mut upkeep = tokio::time::interval(UPKEEP_INTERVAL);
    upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut unpublished = false;
    loop {
        let watching = watch.is_some();
        let next_event = async {
            match watch.as_mut() {
                Some(w) => w.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stopped(shutdown) => return held,
            events = next_event => match events {
                Ok(events) => {
                    lock(health).store_ok();
                    let own_deleted = events.contains(&LeaseEvent::Delete(held.lease.subnet));
                    kernel
                        .run(move |r| events.into_iter().for_each(|e| r.apply(e)))
                        .await;
                    if own_deleted {
                        // Someone deleted this node's key (or its lease expired): write it
                        // again, bound to a new store lease.
                        log::warn!("the lease of {} was deleted; taking it back", held.lease.subnet);
                        held = reacquire(store, &held, cfg, health).await.unwrap_or(held);
                    }
                }
                Err(e) => {
                    log::warn!("{e}; re-listing");
                    lock(health).store_failed(&e);
                    watch = None;
                }
            },
            _ = tokio::time::sleep_until(next_renew) => {
                // After a failure the next renewal is a retry, not a period away: the lease
                // must be renewed within its TTL, through whichever member answers.
                next_renew = tokio::time::Instant::now() + renew_every;
                match store.renew(held.id).await {
                    Ok(true) => { lock(health).store_ok(); }
                    Ok(false) => {
                        log::warn!("lease of {} expired; taking it back", held.lease.subnet);
                        held = reacquire(store, &held, cfg, health).await.unwrap_or(held);
                    }
                    Err(e) => {
                        log::warn!("renew: {e}");
                        lock(health).store_failed(&e);
                        next_renew = tokio::time::Instant::now() + RETRY_INTERVAL;
                    }
                }
            }
            _ = resync.tick() => kernel.run(Reconciler::resync).await,
            _ = upkeep.tick() => {
                upkeep_round(store, &mut held, kernel, health, &mut unpublished).await;
            }
            // Without a watch, the re-list below is due.
            _ = tokio::time::sleep_until(relist_after), if !watching => {}
        }
        // No watch (first pass, or it broke): re-list, reconcile, watch again.
        if watch.is_none() && tokio::time::Instant::now() >= relist_after {
            match relist(store, kernel).await {
                Ok(w) => {
                    lock(health).store_ok();
                    watch = Some(w);
                }
                Err(e) => {
                    log::warn!("re-list: {e}");
                    lock(health).store_failed(&e);
                    relist_after = tokio::time::Instant::now() + RETRY_INTERVAL;
                }
            }
        }
    }
}

async fn relist<S: Store>(store: &mut S, kernel: &Kernel) -> Result<S::Watch, StoreError> {
    let snapshot = store.snapshot().await?;
    let revision = snapshot.revision;
    kernel.run(move |r| r.load(&snapshot)).await;
    store.watch(revision).await
}

/// Writes the same lease again after its store lease expired (the key is gone, so only if
/// absent: if another node took the subnet meanwhile, this node keeps running on its old
/// subnet and reports it).
async fn reacquire<S: Store>(
    store: &mut S,
    held: &Held,
    cfg: &AgentConfig,
    health: &SharedHealth,
) -> Option<Held> {
    match store
        .acquire(&held.lease, cfg.lease_ttl, Claim::IfAbsent)
        .await
    {
        Ok(Some(id)) => Some(Held {
            lease: held.lease.clone(),
            id,
        }),
        Ok(None) => {
            log::error!(
                "subnet {} was taken by another node after this node's lease expired",
                held.lease.subnet
            );
            lock(health).subnet = None;
            None
        }
        Err(e) => {
            log::warn!("re-acquire: {e}");
            lock(health).store_failed(&e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use ipnet::Ipv4Net;

    use super::*;
    use crate::store::StoredLease;

    fn v4(s: &str) -> Subnets {
        s.parse::<Ipv4Net>().unwrap().into()
    }

    fn network() -> NetworkConfig {
        NetworkConfig::parse(br#"{"Network":"198.19.0.0/22","Backend":{"Type":"host-gw"}}"#)
            .unwrap()
    }

    fn stored(subnet: &str, ip: [u8; 4], rev: i64) -> StoredLease {
        StoredLease {
            lease: Lease {
                subnet: subnet.parse::<Ipv4Net>().unwrap().into(),
                attrs: LeaseAttrs {
                    public_ip: ip.into(),
                    public_ipv6: None,
                    backend_type: "host-gw".into(),
                    backend_data: None,
                    backend_v6_data: None,
                    node_name: None,
                },
            },
            mod_revision: rev,
            store_lease: 0,
        }
    }

    /// Records what the reconciler asks of the backend.
    #[derive(Default)]
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Backend for Recorder {
        fn backend_data(&self) -> Option<crate::lease::BackendData> {
            None
        }
        fn configure_local(&mut self, _: Subnets) -> Result<(), crate::backend::BackendError> {
            Ok(())
        }
        fn add_remote(&mut self, l: &Lease) -> Result<(), crate::backend::BackendError> {
            self.0
                .lock()
                .unwrap()
                .push(format!("add {} {}", l.subnet, l.attrs.public_ip));
            Ok(())
        }
        fn update_remote(
            &mut self,
            _: &Lease,
            l: &Lease,
        ) -> Result<(), crate::backend::BackendError> {
            self.0
                .lock()
                .unwrap()
                .push(format!("update {} {}", l.subnet, l.attrs.public_ip));
            Ok(())
        }
        fn remove_remote(&mut self, l: &Lease) -> Result<(), crate::backend::BackendError> {
            self.0.lock().unwrap().push(format!("remove {}", l.subnet));
            Ok(())
        }
        fn resync(
            &mut self,
            remotes: &[Lease],
        ) -> Result<crate::backend::Repairs, crate::backend::BackendError> {
            self.0
                .lock()
                .unwrap()
                .push(format!("resync {}", remotes.len()));
            Ok(crate::backend::Repairs::default())
        }
    }

    /// A reconciler of the node owning 198.19.1.0/24 over a [`Recorder`], its calls and health.
    fn recorded() -> (
        Reconciler,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        SharedHealth,
    ) {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let health = SharedHealth::default();
        let r = Reconciler::new(
            Box::new(Recorder(calls.clone())),
            v4("198.19.1.0/24"),
            health.clone(),
        );
        (r, calls, health)
    }

    #[test]
    fn the_reconciler_changes_only_what_differs_and_skips_its_own_subnet() {
        let (mut r, calls, health) = recorded();
        let a = stored("198.19.2.0/24", [198, 18, 0, 3], 1).lease;
        let own = stored("198.19.1.0/24", [198, 18, 0, 2], 1).lease;
        r.apply(LeaseEvent::Put(own));
        r.apply(LeaseEvent::Put(a.clone()));
        r.apply(LeaseEvent::Put(a.clone())); // unchanged: nothing
        let mut moved = a.clone();
        moved.attrs.public_ip = [198, 18, 0, 9].into();
        r.apply(LeaseEvent::Put(moved)); // changed: updated in place
        r.apply(LeaseEvent::Delete(v4("198.19.7.0/24"))); // unknown: nothing
        assert_eq!(lock(&health).leases_known, 1);
        r.apply(LeaseEvent::Delete(a.subnet));
        assert_eq!(lock(&health).leases_known, 0);
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "add 198.19.2.0/24 198.18.0.3",
                "update 198.19.2.0/24 198.18.0.9",
                "remove 198.19.2.0/24",
            ]
        );
        // A full list drops what is gone and resyncs once.
        calls.lock().unwrap().clear();
        r.apply(LeaseEvent::Put(a.clone()));
        r.load(&Snapshot {
            leases: vec![stored("198.19.3.0/24", [198, 18, 0, 4], 2)],
            revision: 3,
        });
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "add 198.19.2.0/24 198.18.0.3",
                "remove 198.19.2.0/24",
                "add 198.19.3.0/24 198.18.0.4",
                "resync 1",
            ]
        );
    }

    #[test]
    fn no_resync_runs_before_the_first_complete_list() {
        let (mut r, calls, health) = recorded();
        // A restarted agent knows no remote yet: a resync now would remove every live path.
        r.resync();
        assert!(calls.lock().unwrap().is_empty());
        assert!(!lock(&health).leases_loaded);
        r.load(&Snapshot {
            leases: vec![stored("198.19.2.0/24", [198, 18, 0, 3], 1)],
            revision: 1,
        });
        assert!(lock(&health).leases_loaded);
        r.resync();
        assert_eq!(
            *calls.lock().unwrap(),
            ["add 198.19.2.0/24 198.18.0.3", "resync 1", "resync 1"]
        );
    }

    #[test]
    fn a_node_takes_back_its_own_lease_first() {
        let snap = Snapshot {
            leases: vec![
                stored("198.19.1.0/24", [198, 18, 0, 2], 5),
                stored("198.19.2.0/24", [198, 18, 0, 3], 7),
            ],
            revision: 9,
        };
        let got = choose_subnet(
            &network(),
            &snap,
            Some([198, 18, 0, 3].into()),
            None,
            None,
            0,
        );
        assert_eq!(got, Some((v4("198.19.2.0/24"), Claim::IfUnchangedSince(7))));
    }

    #[test]
    fn else_the_subnet_file_if_free_else_a_free_one() {
        let snap = Snapshot {
            leases: vec![stored("198.19.1.0/24", [198, 18, 0, 2], 5)],
            revision: 9,
        };
        let me = Some(Ipv4Addr::new(198, 18, 0, 9));
        let remembered = Some(v4("198.19.3.0/24"));
        assert_eq!(
            choose_subnet(&network(), &snap, me, None, remembered, 0),
            Some((v4("198.19.3.0/24"), Claim::IfAbsent))
        );
        // remembered but taken: a free one instead
        let taken = Some(v4("198.19.1.0/24"));
        let (sub, claim) = choose_subnet(&network(), &snap, me, None, taken, 0).unwrap();
        assert_ne!(sub, v4("198.19.1.0/24"));
        assert_eq!(claim, Claim::IfAbsent);
        // full network
        let full = Snapshot {
            leases: vec![
                stored("198.19.1.0/24", [198, 18, 0, 2], 5),
                stored("198.19.2.0/24", [198, 18, 0, 3], 5),
                stored("198.19.3.0/24", [198, 18, 0, 4], 5),
            ],
            revision: 9,
        };
        assert_eq!(choose_subnet(&network(), &full, me, None, None, 0), None);
    }
}

#[cfg(test)]
mod dual_stack_tests {
    use super::*;
    use crate::store::StoredLease;

    #[test]
    fn a_dual_stack_node_gets_a_free_subnet_of_each_family_and_finds_its_own_by_ipv6() {
        let network = NetworkConfig::parse(br#"{"Network":"198.19.0.0/22","EnableIPv6":true,"IPv6Network":"2001:2::/62","Backend":{"Type":"host-gw"}}"#).unwrap();
        let other = Subnets {
            v4: Some("198.19.1.0/24".parse().unwrap()),
            v6: Some("2001:2:0:1::/64".parse().unwrap()),
        };
        let attrs = LeaseAttrs {
            public_ip: Ipv4Addr::UNSPECIFIED,
            public_ipv6: Some("2001:2::a".parse().unwrap()),
            backend_type: "host-gw".into(),
            backend_data: None,
            backend_v6_data: None,
            node_name: Some("a".into()),
        };
        let snap = Snapshot {
            leases: vec![StoredLease {
                lease: Lease {
                    subnet: other,
                    attrs,
                },
                mod_revision: 4,
                store_lease: 0,
            }],
            revision: 5,
        };
        for random in 0..8 {
            let (got, claim) = choose_subnet(
                &network,
                &snap,
                None,
                Some("2001:2::b".parse().unwrap()),
                None,
                random,
            )
            .unwrap();
            assert_eq!(claim, Claim::IfAbsent);
            assert!(network.is_valid(got));
            assert_ne!(got.v4, other.v4);
            assert_ne!(got.v6, other.v6);
        }
        let own = choose_subnet(
            &network,
            &snap,
            None,
            Some("2001:2::a".parse().unwrap()),
            None,
            0,
        );
        assert_eq!(own, Some((other, Claim::IfUnchangedSince(4))));
    }
}
