//! The daemon's state and operations: the leases it holds (in memory and in the [`Store`]),
//! acquiring and releasing them in the container netns, and the maintenance thread of each.
//! The socket server in `server.rs` turns requests into calls of [`Daemon::handle`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use cni_linux::rtnl::link_change::LinkChange;
use cni_types::CniError;

use super::client::{schedule, Client, ClientError, Identity};
use super::conf::{client_id, LeaseParams};
use super::lease::Lease;
use super::maintain::{next_step, now_unix, retry_after_failure, sleep_or_stop, Step};
use cni_attribution::AttachmentId;

use super::store::{LeaseRecord, Store};
use super::transport::{attachment_present, UdpTransport};
use super::wire::{LeaseRequest, Request, Response};
use crate::common::random;

/// Tunables of a daemon.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long one acquisition (DISCOVER to ACK) may take.
    pub acquire_budget: Duration,
    /// How long one renewal or rebinding exchange may take.
    pub renew_budget: Duration,
    /// How often a bound lease checks that its netns and interface still exist.
    pub check_every: Duration,
    /// The longest wait between two retransmissions (Go's `-resendmax`).
    pub resend_max: Duration,
    /// Ask for broadcast answers on renewals too (Go's `-broadcast`).
    pub broadcast: bool,
    /// Prepended to every netns path (Go's `-hostprefix`, for a daemon in a container).
    pub netns_prefix: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            acquire_budget: Duration::from_secs(30),
            renew_budget: Duration::from_secs(10),
            check_every: Duration::from_secs(60),
            resend_max: Duration::from_secs(16),
            broadcast: false,
            netns_prefix: String::new(),
        }
    }
}

impl Settings {
    /// Where this daemon sees the namespace at `netns`: the prefix glued in front (the path
    /// is absolute, so joining would drop the prefix), byte for byte.
    fn host_path(&self, netns: &Path) -> PathBuf {
        let mut path = OsString::from(&self.netns_prefix);
        path.push(netns);
        path.into()
    }
}

/// A held lease and its maintenance thread.
struct Entry {
    record: LeaseRecord,
    generation: u64,
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

/// The daemon.
pub struct Daemon {
    store: Store,
    settings: Settings,
    leases: Mutex<HashMap<AttachmentId, Entry>>,
    /// Serializes operations on one attachment (two ADDs of one container, ADD against DEL).
    key_locks: Mutex<HashMap<AttachmentId, Arc<Mutex<()>>>>,
    generations: AtomicU64,
}

fn internal(msg: impl Into<String>) -> CniError {
    CniError::new(cni_types::code::INTERNAL, msg)
}

impl Daemon {
    /// A daemon over `store`, resuming the maintenance of every stored lease that has not
    /// expired (expired ones are dropped from the store).
    pub fn start(store: Store, settings: Settings) -> std::io::Result<Arc<Daemon>> {
        let records = store.load_all()?;
        let daemon = Arc::new(Daemon {
            store,
            settings,
            leases: Mutex::new(HashMap::new()),
            key_locks: Mutex::new(HashMap::new()),
            generations: AtomicU64::new(0),
        });
        let now = now_unix();
        for record in records {
            if now >= record.lease.expires_at() {
                log::info!(
                    "dhcp: {}: stored lease expired; dropped",
                    describe(&record.key)
                );
                let _ = daemon.store.remove(&record.key);
                continue;
            }
            log::info!(
                "dhcp: {}: resuming lease of {} (expires in {}s)",
                describe(&record.key),
                record.lease.address,
                record.lease.expires_at() - now
            );
            daemon.hold(record);
        }
        Ok(daemon)
    }

    /// Answers one request.
    pub fn handle(self: &Arc<Self>, request: Request) -> Response {
        let result = match request {
            Request::Allocate(a) => self.allocate(a).map(Some),
            Request::Check(a) => self.check(&a).map(Some),
            Request::Release { key } => self.release(&key).map(|()| None),
            Request::Status => Ok(None),
            Request::Gc { network, valid } => self.gc(&network, &valid).map(|()| None),
        };
        match result {
            Ok(lease) => Response::Ok { lease },
            Err(e) => Response::Error(e),
        }
    }

    fn key_lock(&self, key: &AttachmentId) -> Arc<Mutex<()>> {
        let mut locks = self
            .key_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        locks.entry(key.clone()).or_default().clone()
    }

    fn held(&self, key: &AttachmentId) -> Option<LeaseRecord> {
        let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        leases.get(key).map(|e| e.record.clone())
    }

    fn allocate(self: &Arc<Self>, a: LeaseRequest) -> Result<Lease, CniError> {
        let lock = self.key_lock(&a.key);
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(record) = self.held(&a.key) {
            if record.netns == a.netns {
                return Ok(record.lease);
            }
            // Same attachment in a new namespace: the old lease belongs to a dead sandbox.
            self.release_locked(&a.key);
        }
        let netns = self.settings.host_path(&a.netns);
        let (mut transport, mac) = UdpTransport::open(&netns, &a.key.ifname)
            .map_err(|e| internal(format!("dhcp: {e}")))?;
        let identity = self.identity(&a.key, mac, &a.params);
        let lease = self
            .run_client(
                &mut transport,
                &identity,
                self.settings.acquire_budget,
                |c| c.acquire(None),
            )
            .map_err(|e| {
                internal(format!(
                    "dhcp: no lease for {:?} in {}: {e}",
                    a.key.ifname,
                    a.netns.display()
                ))
            })?;
        log::info!(
            "dhcp: {}: acquired {}/{} from {} for {}s",
            describe(&a.key),
            lease.address,
            lease.prefix_len,
            lease.server,
            lease.lease_secs
        );
        let record = LeaseRecord {
            key: a.key,
            netns: a.netns,
            mac,
            params: a.params,
            lease: lease.clone(),
        };
        if let Err(e) = self.store.save(&record) {
            // Not persisted means not safe to hand out: give it back.
            let _ = self.run_client(&mut transport, &identity, Duration::ZERO, |c| {
                c.release(&lease)
            });
            return Err(CniError::io(format!(
                "dhcp: cannot persist the lease in {}: {e}",
                self.store.dir().display()
            )));
        }
        self.hold(record);
        Ok(lease)
    }

    fn check(&self, a: &LeaseRequest) -> Result<Lease, CniError> {
        match self.held(&a.key) {
            Some(r) if r.lease.expires_at() > now_unix() => Ok(r.lease),
            Some(r) => Err(internal(format!(
                "dhcp: the lease of {} for {} has expired",
                r.lease.address,
                describe(&a.key)
            ))),
            None => Err(internal(format!(
                "dhcp: the daemon holds no lease for {}",
                describe(&a.key)
            ))),
        }
    }

    fn release(&self, key: &AttachmentId) -> Result<(), CniError> {
        let lock = self.key_lock(key);
        let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.release_locked(key);
        let removed = self.store.remove(key).map_err(|e| {
            CniError::io(format!(
                "dhcp: cannot remove the lease record of {}: {e}",
                describe(key)
            ))
        });
        drop(guard);
        // Forget the attachment's lock unless another request holds it too.
        let mut locks = self
            .key_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if locks.get(key).is_some_and(|l| Arc::strong_count(l) == 2) {
            locks.remove(key);
        }
        removed
    }

    /// Stops maintenance and sends DHCPRELEASE (best effort: the interface may be gone).
    fn release_locked(&self, key: &AttachmentId) {
        let entry = {
            let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
            leases.remove(key)
        };
        let Some(entry) = entry else { return };
        drop(entry.stop);
        let _ = entry.thread.join();
        let record = entry.record;
        let netns = self.settings.host_path(&record.netns);
        let sent = UdpTransport::open(&netns, &key.ifname)
            .map_err(|e| e.to_string())
            .and_then(|(mut t, _)| {
                let id = self.identity(&record.key, record.mac, &record.params);
                self.run_client(&mut t, &id, Duration::ZERO, |c| c.release(&record.lease))
                    .map_err(|e| e.to_string())
            });
        match sent {
            Ok(()) => log::info!("dhcp: {}: released {}", describe(key), record.lease.address),
            Err(e) => log::warn!(
                "dhcp: {}: no DHCPRELEASE for {} ({e}); the server frees it at expiry",
                describe(key),
                record.lease.address
            ),
        }
        let _ = self.store.remove(key);
    }

    fn gc(&self, network: &str, valid: &[AttachmentId]) -> Result<(), CniError> {
        let stale: Vec<AttachmentId> = {
            let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
            leases
                .keys()
                .filter(|k| k.network == network)
                .filter(|k| !valid.contains(k))
                .cloned()
                .collect()
        };
        let mut errors = Vec::new();
        for key in stale {
            log::info!("dhcp: GC releases the lease of {}", describe(&key));
            errors.extend(self.release(&key).err());
        }
        crate::common::errors::combine(errors)
    }

    /// Records `record` as held and starts its maintenance thread.
    fn hold(self: &Arc<Self>, record: LeaseRecord) {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let (stop_tx, stop_rx) = mpsc::channel();
        let daemon = Arc::clone(self);
        let key = record.key.clone();
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let thread = std::thread::spawn(move || daemon.maintain(&key, generation, &stop_rx));
        leases.insert(
            record.key.clone(),
            Entry {
                record,
                generation,
                stop: stop_tx,
                thread,
            },
        );
    }

    /// The maintenance loop of one lease (see `maintain.rs`).
    fn maintain(&self, key: &AttachmentId, generation: u64, stop: &mpsc::Receiver<()>) {
        let mut retry_at = None;
        loop {
            let Some(record) = self.held(key) else { return };
            let netns = self.settings.host_path(&record.netns);
            let now = now_unix();
            let step = next_step(&record.lease, now, retry_at, self.settings.check_every);
            let rebinding = match step {
                Step::Sleep(d) => {
                    if sleep_or_stop(stop, d) {
                        return;
                    }
                    if let Err(e) = attachment_present(&netns, &key.ifname) {
                        if e.attachment_gone() {
                            return self.forget(key, generation, &format!("{e}"));
                        }
                    }
                    continue;
                }
                Step::Expire => {
                    set_link_down(&netns, &key.ifname);
                    return self.forget(key, generation, "lease expired; interface set down");
                }
                Step::Renew => false,
                Step::Rebind => true,
            };
            let outcome = UdpTransport::open(&netns, &key.ifname).map(|(mut t, _)| {
                self.run_client(
                    &mut t,
                    &self.identity(&record.key, record.mac, &record.params),
                    self.settings.renew_budget,
                    |c| c.renew(&record.lease, rebinding),
                )
            });
            match outcome {
                Err(e) if e.attachment_gone() => {
                    return self.forget(key, generation, &format!("{e}"));
                }
                Ok(Err(ClientError::Nak { server })) => {
                    set_link_down(&netns, &key.ifname);
                    return self.forget(
                        key,
                        generation,
                        &format!("server {server} refused the renewal; interface set down"),
                    );
                }
                Ok(Ok(lease)) => {
                    log::info!(
                        "dhcp: {}: {} {} for {}s",
                        describe(key),
                        if rebinding { "rebound" } else { "renewed" },
                        lease.address,
                        lease.lease_secs
                    );
                    retry_at = None;
                    self.update(key, generation, lease);
                }
                Ok(Err(e)) => {
                    log::warn!("dhcp: {}: {e}", describe(key));
                    retry_at = Some(retry_after_failure(&record.lease, now_unix()));
                }
                Err(e) => {
                    log::warn!("dhcp: {}: {e}", describe(key));
                    retry_at = Some(retry_after_failure(&record.lease, now_unix()));
                }
            }
            if sleep_or_stop(stop, Duration::ZERO) {
                return;
            }
        }
    }

    /// Who the client is for an attachment.
    fn identity(&self, key: &AttachmentId, mac: [u8; 6], params: &LeaseParams) -> Identity {
        Identity {
            mac,
            client_id: client_id(&key.container_id, &key.network, &key.ifname),
            params: params.clone(),
            always_broadcast: self.settings.broadcast,
        }
    }

    /// Runs `f` with a client on `transport`, retransmitting within `budget`.
    fn run_client<R>(
        &self,
        transport: &mut UdpTransport,
        id: &Identity,
        budget: Duration,
        f: impl FnOnce(&mut Client<'_, UdpTransport>) -> R,
    ) -> R {
        let now = now_unix;
        let mut xid = || random::bytes::<4>().map_or(0x5243_4e49, u32::from_be_bytes);
        let mut client = Client {
            transport,
            id,
            schedule: schedule(budget, self.settings.resend_max),
            now: &now,
            xid: &mut xid,
        };
        f(&mut client)
    }

    /// Stores a renewed lease, if the entry is still this thread's.
    fn update(&self, key: &AttachmentId, generation: u64, lease: Lease) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = leases.get_mut(key).filter(|e| e.generation == generation) {
            entry.record.lease = lease;
            if let Err(e) = self.store.save(&entry.record) {
                log::error!("dhcp: {}: cannot persist the renewal: {e}", describe(key));
            }
        }
    }

    /// Drops a lease whose maintenance ended on its own, if the entry is still this thread's.
    fn forget(&self, key: &AttachmentId, generation: u64, why: &str) {
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if leases.get(key).is_some_and(|e| e.generation == generation) {
            log::info!("dhcp: {}: maintenance stops: {why}", describe(key));
            leases.remove(key);
            let _ = self.store.remove(key);
        }
    }
}

fn set_link_down(netns: &Path, ifname: &str) {
    let Ok(ns) = cni_linux::NetNs::open(netns) else {
        return;
    };
    let _ = ns.run(|| {
        let mut h = cni_linux::Handle::new().ok()?;
        let link = h.link_by_name(ifname).ok()?;
        h.change_link(&LinkChange::of(link.index).down()).ok()
    });
}

fn describe(key: &AttachmentId) -> String {
    format!("{}/{}/{}", key.container_id, key.network, key.ifname)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn record(cid: &str, bound_at: u64) -> LeaseRecord {
        LeaseRecord {
            key: AttachmentId::new("n", cid, "eth0"),
            netns: "/nonexistent/rcni-test-netns".into(),
            mac: [2, 0, 0, 0, 0, 1],
            params: LeaseParams::default(),
            lease: Lease {
                address: Ipv4Addr::new(198, 18, 0, 9),
                prefix_len: 24,
                server: Ipv4Addr::new(198, 18, 0, 1),
                routers: vec![],
                static_routes: vec![],
                classless_routes: vec![],
                bound_at,
                lease_secs: 120,
                t1_secs: 60,
                t2_secs: 105,
            },
        }
    }

    fn key(cid: &str) -> AttachmentId {
        record(cid, 0).key
    }

    fn settings() -> Settings {
        Settings {
            check_every: Duration::from_millis(20),
            ..Settings::default()
        }
    }

    #[test]
    fn start_drops_expired_leases_and_resumes_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.save(&record("old", 1000)).unwrap();
        store.save(&record("live", now_unix())).unwrap();
        let daemon = Daemon::start(store.clone(), Settings::default()).unwrap();
        assert!(daemon.held(&key("old")).is_none());
        assert!(daemon.held(&key("live")).unwrap().lease.bound_at > 1000);
        let stored: Vec<String> = store
            .load_all()
            .unwrap()
            .into_iter()
            .map(|r| r.key.container_id)
            .collect();
        assert_eq!(stored, ["live"]);
        // CHECK answers the resumed lease; release forgets it.
        let a = LeaseRequest {
            key: key("live"),
            netns: "/nonexistent/rcni-test-netns".into(),
            params: LeaseParams::default(),
        };
        assert!(matches!(
            daemon.handle(Request::Check(a)),
            Response::Ok { lease: Some(_) }
        ));
        assert!(matches!(
            daemon.handle(Request::Release { key: key("live") }),
            Response::Ok { lease: None }
        ));
        assert!(daemon.held(&key("live")).is_none());
        assert!(store.load_all().unwrap().is_empty());
    }

    #[test]
    fn a_resumed_lease_whose_netns_is_gone_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.save(&record("gone", now_unix())).unwrap();
        let daemon = Daemon::start(store.clone(), settings()).unwrap();
        let start = std::time::Instant::now();
        while daemon.held(&key("gone")).is_some() {
            assert!(start.elapsed() < Duration::from_secs(5), "not forgotten");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(store.load_all().unwrap().is_empty());
    }

    #[test]
    fn unknown_attachments_check_fails_release_and_gc_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let daemon = Daemon::start(Store::open(dir.path()).unwrap(), settings()).unwrap();
        let a = LeaseRequest {
            key: key("none"),
            netns: "/x".into(),
            params: LeaseParams::default(),
        };
        match daemon.handle(Request::Check(a)) {
            Response::Error(e) => assert!(e.msg.contains("holds no lease"), "{e:?}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            daemon.handle(Request::Release { key: key("none") }),
            Response::Ok { lease: None }
        ));
        assert!(matches!(
            daemon.handle(Request::Gc {
                network: "n".into(),
                valid: vec![]
            }),
            Response::Ok { lease: None }
        ));
        assert!(matches!(
            daemon.handle(Request::Status),
            Response::Ok { lease: None }
        ));
    }

    #[test]
    fn gc_releases_only_this_networks_leases_outside_the_valid_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now = now_unix();
        let mut other_net = record("x", now);
        other_net.key.network = "other".into();
        for r in [record("keep", now), record("drop", now), other_net.clone()] {
            store.save(&r).unwrap();
        }
        // Liveness checks off for the test's duration: the netns paths do not exist.
        let daemon = Daemon::start(store.clone(), Settings::default()).unwrap();
        let r = daemon.handle(Request::Gc {
            network: "n".into(),
            valid: vec![AttachmentId::new("n", "keep", "eth0")],
        });
        assert!(matches!(r, Response::Ok { .. }), "{r:?}");
        assert!(daemon.held(&key("keep")).is_some());
        assert!(daemon.held(&key("drop")).is_none());
        assert!(daemon.held(&other_net.key).is_some());
        assert_eq!(store.load_all().unwrap().len(), 2);
    }
}
