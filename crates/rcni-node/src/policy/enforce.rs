//! The enforcement loop: one task that keeps the node's pods ([`LocalPods`]) and follows
//! the datastore, handing every change to the [`Worker`]:
//!
//! - the datastore: one full read of the prefix, then its watch (a broken watch is read
//!   again in full); each event goes to the worker as it comes;
//! - the pod socket ([`super::socket`]): an ADD is recorded (on disk too, [`Attached`]),
//!   its pod given to the enforcer (held), and answered once the worker has committed (the
//!   addresses are no other pod's in the kernel); with a source that knows the sandbox
//!   during its ADD (`rcni pod` records) the labels are read first, so the pod's policies
//!   are in force when the ADD returns. A DEL is answered once the pod's objects are gone;
//! - the labels of pods still held: asked of the source every [`FAST_POLL`] while any is
//!   waiting (containerd lists a sandbox only once RunPodSandbox is done, and has no event
//!   stream), every [`SLOW_POLL`] once one has waited [`PATIENCE`];
//! - the scan of the source every [`RESCAN`] (and on its change signal): the safety net,
//!   and the only way pods the agent was not told about (a previous run's) are learned.
//!
//! Every change of the node's pods also goes to the publisher ([`super::publish`]).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_etcd::{Connection, Watch};
use cni_policy::Pod;
use cni_types::code;
use cni_types::node_agent::{PodAdded, PodAnswer, PodMessage};
use tokio::sync::{mpsc, watch};

use super::socket::Request;
use super::worker::{Job, Worker};
use super::{connected, InputError, PolicyConfig};
use crate::health::{lock, SharedHealth};
use crate::pods::attached::Attached;
use crate::pods::local::{now_nanos, Announced, LocalPods};
use crate::pods::{PodSource, PodSourceError, SourcePod};
use crate::policy_health::failing;
use crate::shutdown::stopped;

/// How often the node's pods are listed.
pub const RESCAN: Duration = Duration::from_secs(2);
/// How often the source is asked for the labels of held pods.
pub const FAST_POLL: Duration = Duration::from_millis(25);
/// ... once one has waited [`PATIENCE`].
pub const SLOW_POLL: Duration = Duration::from_millis(500);
pub const PATIENCE: Duration = Duration::from_secs(10);
/// Pause before reading the datastore again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// One listing of the node's pods, and when it started.
pub struct Scan {
    started: Instant,
    pods: Result<Vec<SourcePod>, PodSourceError>,
}

/// Lists the node's pods every [`RESCAN`] (and when the source signals a change) into
/// `scans`, until `shutdown`.
pub async fn scan<S: PodSource>(
    mut source: S,
    scans: mpsc::Sender<Scan>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let started = Instant::now();
        let pods = source.pods().await;
        if scans.send(Scan { started, pods }).await.is_err() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(RESCAN) => {}
            _ = source.changed() => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// The state of the loop.
pub struct Enforcement<S> {
    pub cfg: PolicyConfig,
    pub source: S,
    pub worker: Worker,
    pub local: LocalPods,
    pub attached: Attached,
    pub health: SharedHealth,
    pub publish: watch::Sender<Option<Vec<Pod>>>,
    /// The first complete list of the node's pods has been taken.
    pub listed: bool,
    /// ... and the worker knows it.
    pub listed_told: bool,
}

impl<S: PodSource + 'static> Enforcement<S> {
    /// Runs the loop until `shutdown`.
    pub async fn run(
        mut self,
        mut scans: mpsc::Receiver<Scan>,
        mut requests: mpsc::Receiver<Request>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        for a in self.attached.load() {
            self.local.announce(&a);
        }
        let prefix = format!("{}/", self.cfg.prefix.trim_end_matches('/'));
        let mut conn = None;
        let mut watch: Option<Watch> = None;
        let mut relist_at = tokio::time::Instant::now();
        loop {
            if watch.is_none() && tokio::time::Instant::now() >= relist_at {
                match self.relist(&mut conn, &prefix).await {
                    Ok(w) => watch = Some(w),
                    Err(e) => {
                        self.read_failed(&e);
                        relist_at = tokio::time::Instant::now() + RETRY;
                    }
                }
            }
            let watching = watch.is_some();
            let next = async {
                match watch.as_mut() {
                    Some(w) => w.next().await,
                    None => std::future::pending().await,
                }
            };
            let poll = self.poll_due();
            tokio::select! {
                _ = stopped(&mut shutdown) => return,
                events = next => match events {
                    Ok(events) => self.worker.send(Job::Watch(events)),
                    Err(e) => {
                        self.read_failed(&e.into());
                        watch = None;
                        relist_at = tokio::time::Instant::now() + RETRY;
                    }
                },
                Some(scan) = scans.recv() => self.scanned(scan),
                Some(request) = requests.recv() => self.request(request).await,
                _ = tokio::time::sleep(poll.unwrap_or_default()), if poll.is_some() => self.poll().await,
                _ = tokio::time::sleep_until(relist_at), if !watching => {}
            }
        }
    }

    /// Reads everything under the prefix and watches it from there.
    async fn relist(
        &mut self,
        conn: &mut Option<Connection>,
        prefix: &str,
    ) -> Result<Watch, InputError> {
        let conn = connected(conn, &self.cfg.access, prefix, None).await?;
        let listing = conn.get_prefix(prefix).await?;
        self.worker.send(Job::Listing(listing.entries));
        let watch = conn.watch_prefix(prefix, listing.revision).await?;
        if let Some(p) = lock(&self.health).policy.as_mut() {
            p.read = None;
        }
        Ok(watch)
    }

    fn read_failed(&self, e: &InputError) {
        log::warn!("policy inputs: {e}; the program in force stays, re-reading");
        if let Some(p) = lock(&self.health).policy.as_mut() {
            p.sync_errors += 1;
            failing(&mut p.read, e);
        }
    }

    /// Hands what changed among the node's pods to the worker and the publisher.
    fn local_changed(&mut self) {
        let changes = self.local.changes();
        let first_complete = self.listed && !self.listed_told;
        if !changes.is_empty() || first_complete {
            self.worker.send(Job::Local {
                changes,
                complete: self.listed,
            });
            self.listed_told = self.listed;
        }
        let pods = self.local.published();
        self.publish.send_if_modified(|last| {
            let changed = last.as_ref() != Some(&pods);
            *last = Some(pods.clone());
            changed
        });
    }

    fn scanned(&mut self, scan: Scan) {
        let pods = match scan.pods {
            Ok(pods) => pods,
            Err(e) => {
                log::warn!("list this node's pods: {e}; keeping the last list");
                if let Some(p) = lock(&self.health).policy.as_mut() {
                    failing(&mut p.scan, e);
                }
                return;
            }
        };
        if let Some(p) = lock(&self.health).policy.as_mut() {
            p.scan = None;
        }
        self.local.scanned(scan.started, &pods);
        let ipam = self.cfg.ipam_dir.clone();
        for gone in self.local.prune(|id, ip| leased(&ipam, id, ip)) {
            log::info!("sandbox {gone}: its address lease is gone; forgotten");
            self.forget_record(&gone);
        }
        self.listed = true;
        self.local_changed();
    }

    async fn request(&mut self, request: Request) {
        let Request { message, reply } = request;
        let waiting = match message {
            PodMessage::Add(added) => match self.added(added).await {
                Ok(()) => self.worker.commit(),
                Err(refusal) => {
                    let _ = reply.send(refusal);
                    return;
                }
            },
            PodMessage::Del { container_id, .. } => {
                if self.local.forget(&container_id) {
                    log::info!("sandbox {container_id}: DEL; its pod is forgotten");
                }
                self.forget_record(&container_id);
                self.local_changed();
                self.worker.commit()
            }
        };
        tokio::task::spawn_local(async move {
            let answer = match waiting.await {
                Ok(Ok(())) => PodAnswer::ok(),
                Ok(Err(why)) => PodAnswer::refused(code::TRY_AGAIN_LATER, why),
                Err(_) => PodAnswer::refused(code::TRY_AGAIN_LATER, "rcni-node is stopping"),
            };
            let _ = reply.send(answer);
        });
    }

    /// Takes an ADD's pod; the refusal to answer with, if any.
    async fn added(&mut self, added: PodAdded) -> Result<(), PodAnswer> {
        if let Err(e) = cni_types::validate_container_id(&added.container_id) {
            return Err(PodAnswer::refused(e.code, e.msg));
        }
        let not_ready = lock(&self.health)
            .policy
            .as_ref()
            .filter(|p| !p.ready)
            .map(|p| p.verdict(Duration::ZERO).err().unwrap_or_default());
        if let Some(why) = not_ready {
            return Err(PodAnswer::refused(
                code::TRY_AGAIN_LATER,
                format!("{why}: try again later"),
            ));
        }
        let mut a = Announced {
            container_id: added.container_id,
            ifname: added.ifname,
            netns: added.netns,
            namespace: added.namespace.unwrap_or_default(),
            name: added.name.unwrap_or_default(),
            ips: added.ips,
            labels: None,
            at: now_nanos(),
        };
        if S::KNOWS_DURING_ADD && a.is_named() {
            match self
                .source
                .labels(std::slice::from_ref(&a.container_id))
                .await
            {
                Ok(found) => {
                    let own = found.into_iter().find(|l| {
                        (l.namespace.as_str(), l.name.as_str()) == (&a.namespace, &a.name)
                    });
                    a.labels = own.map(|l| l.labels);
                }
                Err(e) => log::warn!(
                    "labels of sandbox {}: {e}; held until a scan finds them",
                    a.container_id
                ),
            }
        }
        if let Err(e) = self.attached.save(&a) {
            log::warn!(
                "record sandbox {}: {e}; a restarted agent will not know it before a scan lists it",
                a.container_id
            );
        }
        log::info!(
            "sandbox {}: ADD of {} ({}) at {:?}{}",
            a.container_id,
            if a.is_named() {
                format!("{}/{}", a.namespace, a.name)
            } else {
                "no pod".into()
            },
            a.ifname,
            a.ips,
            if a.labels.is_some() {
                ""
            } else {
                "; labels pending"
            },
        );
        self.local.announce(&a);
        self.local_changed();
        Ok(())
    }

    fn forget_record(&self, sandbox: &str) {
        if cni_types::validate_container_id(sandbox).is_err() {
            return;
        }
        if let Err(e) = self.attached.remove(sandbox) {
            log::warn!("remove the record of sandbox {sandbox}: {e}");
        }
    }

    /// How long until the labels of held pods are asked for; `None` while none waits.
    fn poll_due(&self) -> Option<Duration> {
        let (ids, oldest) = self.local.pending();
        if ids.is_empty() {
            return None;
        }
        Some(match oldest {
            Some(waited) if waited > PATIENCE => SLOW_POLL,
            _ => FAST_POLL,
        })
    }

    /// Asks the source for the labels of the held pods.
    async fn poll(&mut self) {
        let (ids, _) = self.local.pending();
        match self.source.labels(&ids).await {
            Ok(found) => {
                if self.local.learned(&found) {
                    for l in &found {
                        log::info!("sandbox {}: labels known; programming its policies", l.id);
                        if let Err(e) = self.attached.set_labels(&l.id, &l.labels) {
                            log::warn!("record the labels of sandbox {}: {e}", l.id);
                        }
                    }
                    self.local_changed();
                    // Committed at once, not with the next change.
                    drop(self.worker.commit());
                }
            }
            Err(e) => log::debug!("labels of held pods: {e}"),
        }
    }
}

/// Whether host-local's lease of `ip` under `ipam_dir` (the agent's network, `rcni`) names
/// sandbox `id` (its content is `<container ID>\r\n<ifname>`). A lease that cannot be read
/// counts as held by `id`: only a lease that names another, or none, lets the pod go.
fn leased(ipam_dir: &std::path::Path, id: &str, ip: &IpAddr) -> bool {
    let path: PathBuf = ipam_dir
        .join(crate::cni_conf::NETWORK_NAME)
        .join(ip.to_string());
    match std::fs::read_to_string(&path) {
        Ok(text) => text.lines().next().is_some_and(|owner| owner.trim() == id),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}
