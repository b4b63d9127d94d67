//! Kubernetes NetworkPolicy enforcement on this node (`--network-policy`, on by default).
//!
//! Two tasks:
//!
//! - the scan ([`publish`]): every [`RESCAN`], and as soon as the source signals a change
//!   (the record directory does), the node's pods are listed from its [`PodSource`] (the
//!   `rcni pod` records, or the CRI runtime with `--cri-socket`), handed to the enforcement,
//!   and published in the datastore bound to the node's lease;
//! - the enforcement: one read of everything under the prefix, then a watch of it, keep a
//!   [`View`] of the stored policies, namespaces and other nodes' pods; on every change (bursts
//!   coalesced over [`COALESCE`]) the nf_tables program of [`cni_policy::nft`] is built for
//!   the node's pods and committed in one transaction on a blocking thread; then the
//!   conntrack entries of the node's pods' connections the new policies deny are deleted
//!   ([`conntrack`]), so that a connection opened while it was allowed stops with the change
//!   (its next packet is tracked as new and dropped), while allowed ones are left alone.
//!
//! The program outlives the agent's view of the datastore: while etcd is unreachable the
//! last program stays, the agent never deletes it on exit, and a restarted agent leaves the
//! previous run's program in place until it has read the datastore and its pods in full.
//! Same-node pod traffic is bridged: it reaches the `forward` hook only with
//! `br_netfilter`, whose switches [`enable_bridge_netfilter`] turns on in the agent's
//! namespace.

pub mod conntrack;
pub mod publish;
pub mod view;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_policy::nft::Enforcer;
use cni_policy::stored::Keys;
use cni_policy::Pod;
use tokio::sync::watch;

use crate::agent::stopped;
use crate::cri::CriClient;
use crate::health::{lock, unix_now, SharedHealth};
use crate::pods::cri::CriPods;
use crate::pods::records::RecordPods;
use crate::pods::PodSource;
use cni_etcd::{Access, ConnectError, Connection, EtcdError, Probe, Watch};
use publish::Publisher;
use view::View;

/// How often the node's pods are listed.
pub const RESCAN: Duration = Duration::from_secs(2);
/// How long the enforcement waits after a change in the datastore for more before it builds
/// a program (a change of the node's own pods is programmed at once).
pub const COALESCE: Duration = Duration::from_millis(50);
/// Pause before retrying a failed read or program.
const RETRY: Duration = Duration::from_secs(1);

/// The switches that send bridged IPv4 and IPv6 frames through the IP hooks.
const BRIDGE_SWITCHES: [&str; 2] = [
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
];

/// Policy enforcement could not start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "NetworkPolicy needs the br_netfilter module ({switch} is missing): load it with \
         `modprobe br_netfilter`, or start the agent with --network-policy=false"
    )]
    NoBrNetfilter { switch: &'static str },
    #[error("turn on {switch}: {source}")]
    Switch {
        switch: &'static str,
        #[source]
        source: cni_linux::sysctl::SysctlError,
    },
}

/// Turns on the `br_netfilter` switches in this namespace (blocking).
pub fn enable_bridge_netfilter() -> Result<(), PolicyError> {
    for switch in BRIDGE_SWITCHES {
        match cni_linux::sysctl::ensure(switch, "1") {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Err(PolicyError::NoBrNetfilter { switch }),
            Err(source) => return Err(PolicyError::Switch { switch, source }),
        }
    }
    Ok(())
}

/// What enforcement reports on `/metrics`.
#[derive(Debug, Default, Clone)]
pub struct PolicyHealth {
    /// Policies in the last program's input.
    pub policies: usize,
    /// Local pods isolated by at least one policy.
    pub selected_pods: usize,
    /// Addresses in the program's sets and maps.
    pub set_elements: usize,
    /// Unix time of the last program committed.
    pub last_sync_unix: Option<u64>,
    /// Programs that could not be built or committed, and failed reads of the datastore.
    pub sync_errors: u64,
}

impl PolicyHealth {
    /// The Prometheus text of these values.
    pub fn metrics(&self) -> String {
        format!(
            "# HELP rcni_node_policies NetworkPolicies in the node's program.\n\
             # TYPE rcni_node_policies gauge\nrcni_node_policies {}\n\
             # HELP rcni_node_policy_selected_pods Local pods isolated by a NetworkPolicy.\n\
             # TYPE rcni_node_policy_selected_pods gauge\nrcni_node_policy_selected_pods {}\n\
             # HELP rcni_node_policy_set_elements Addresses in the policy program's sets and maps.\n\
             # TYPE rcni_node_policy_set_elements gauge\nrcni_node_policy_set_elements {}\n\
             # HELP rcni_node_policy_last_sync_timestamp_seconds Unix time of the last policy program committed.\n\
             # TYPE rcni_node_policy_last_sync_timestamp_seconds gauge\nrcni_node_policy_last_sync_timestamp_seconds {}\n\
             # HELP rcni_node_policy_sync_errors_total Policy programs not built or committed, and failed reads.\n\
             # TYPE rcni_node_policy_sync_errors_total counter\nrcni_node_policy_sync_errors_total {}\n",
            self.policies,
            self.selected_pods,
            self.set_elements,
            self.last_sync_unix.unwrap_or(0),
            self.sync_errors,
        )
    }
}

/// Where enforcement reads and writes, and who this node is.
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    pub access: Access,
    /// The network's key prefix.
    pub prefix: String,
    pub node: String,
    /// The node's subnet key (its store lease binds the published pods).
    pub subnet_key: String,
    /// The CRI runtime to list pods from; the `rcni pod` records otherwise.
    pub cri_socket: Option<PathBuf>,
    /// The `rcni pod` record directory.
    pub pod_state_dir: PathBuf,
}

/// Starts enforcement for the node on the current thread's local task set (see
/// [`tokio::task::spawn_local`]); runs until `shutdown`.
pub fn spawn(
    cfg: PolicyConfig,
    health: SharedHealth,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    lock(&health).policy = Some(PolicyHealth::default());
    match cfg.cri_socket.clone() {
        Some(socket) => {
            log::info!(
                "NetworkPolicy: pods from the CRI runtime at {}",
                socket.display()
            );
            let source = CriPods::new(CriClient::new(&socket));
            tokio::task::spawn_local(run(cfg, source, health, shutdown))
        }
        None => {
            log::info!(
                "NetworkPolicy: pods from the records in {}",
                cfg.pod_state_dir.display()
            );
            let source = RecordPods::new(&cfg.pod_state_dir);
            tokio::task::spawn_local(run(cfg, source, health, shutdown))
        }
    }
}

async fn run<S: PodSource + 'static>(
    cfg: PolicyConfig,
    source: S,
    health: SharedHealth,
    shutdown: watch::Receiver<bool>,
) {
    let (local_tx, local_rx) = watch::channel(None);
    let scan = tokio::task::spawn_local(scan(cfg.clone(), source, local_tx, shutdown.clone()));
    enforce(&cfg, local_rx, &health, shutdown).await;
    let _ = scan.await;
}

/// The datastore could not be reached, read or written.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("etcd: {0}")]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
}

/// Connects `conn` if it is not yet, to the first endpoint that lets this client read
/// `read` (and write `write`, when given).
async fn connected<'a>(
    conn: &'a mut Option<Connection>,
    access: &Access,
    read: &str,
    write: Option<&str>,
) -> Result<&'a mut Connection, ConnectError> {
    if conn.is_none() {
        let probe = Probe {
            read: read.to_string(),
            write: write.map(str::to_string),
        };
        *conn = Some(Connection::connect(access, &probe).await?);
    }
    Ok(conn.as_mut().expect("set above"))
}

/// Lists the node's pods every [`RESCAN`], hands them to the enforcement and publishes them.
async fn scan<S: PodSource>(
    cfg: PolicyConfig,
    mut source: S,
    local: watch::Sender<Option<Vec<Pod>>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let publisher = Publisher {
        keys: Keys::new(&cfg.prefix),
        node: cfg.node.clone(),
        subnet_key: cfg.subnet_key.clone(),
    };
    let own = publisher.keys.pods(Some(&cfg.node));
    let probe_key = format!("{own}rcni-permission-probe");
    let mut conn = None;
    loop {
        match source.pods().await {
            Ok(pods) => {
                local.send_if_modified(|last| {
                    let changed = last.as_ref() != Some(&pods);
                    *last = Some(pods.clone());
                    changed
                });
                let published =
                    match connected(&mut conn, &cfg.access, &own, Some(&probe_key)).await {
                        Ok(conn) => publisher.round(conn, &pods).await.map_err(InputError::from),
                        Err(e) => Err(InputError::from(e)),
                    };
                if let Err(e) = published {
                    log::warn!("publish this node's pods: {e}; retrying");
                }
            }
            Err(e) => log::warn!("list this node's pods: {e}; keeping the last list"),
        }
        tokio::select! {
            _ = tokio::time::sleep(RESCAN) => {}
            _ = source.changed() => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Reads everything under the prefix into `view` and watches it from there.
async fn relist(
    conn: &mut Option<Connection>,
    cfg: &PolicyConfig,
    view: &mut View,
) -> Result<(Watch, bool), InputError> {
    let prefix = format!("{}/", cfg.prefix.trim_end_matches('/'));
    let conn = connected(conn, &cfg.access, &prefix, None).await?;
    let listing = conn.get_prefix(&prefix).await?;
    let changed = view.load(listing.entries);
    Ok((conn.watch_prefix(&prefix, listing.revision).await?, changed))
}

/// Builds the program of `view` and commits it (on a blocking thread); records the outcome.
/// `enforcer` holds the program in force: after the first (full) program, each batch carries
/// only what changed.
async fn sync(view: &View, enforcer: &mut Option<Enforcer>, health: &SharedHealth) -> bool {
    let view = view.clone();
    let started = Instant::now();
    let mut taken = enforcer.take().unwrap_or_default();
    let done = tokio::task::spawn_blocking(move || {
        let outcome = commit_program(&view, &mut taken);
        (taken, outcome)
    })
    .await;
    let outcome = match done {
        Ok((kept, outcome)) => {
            *enforcer = Some(kept);
            outcome
        }
        // A panicked build loses the enforcer: the next program is a full one.
        Err(e) => Err(e.into()),
    };
    let mut h = lock(health);
    let Some(p) = h.policy.as_mut() else {
        return true;
    };
    match outcome {
        Ok((built, flushed)) => {
            log::info!(
                "policy program: {} policies, {} local pod(s) isolated, {} addresses, committed in {} ms; {flushed} denied connection(s) stopped",
                built.policies,
                built.summary.isolated_pods,
                built.summary.elements,
                started.elapsed().as_millis()
            );
            p.policies = built.policies;
            p.selected_pods = built.summary.isolated_pods;
            p.set_elements = built.summary.elements;
            p.last_sync_unix = Some(unix_now());
            true
        }
        Err(e) => {
            log::warn!("policy program not applied: {e:#}; the previous one stays");
            p.sync_errors += 1;
            false
        }
    }
}

/// The blocking part of [`sync`]: the batch of what changed, committed, then the conntrack
/// entries of connections it denies deleted.
fn commit_program(view: &View, enforcer: &mut Enforcer) -> anyhow::Result<(view::Built, usize)> {
    let built = view.build(enforcer)?;
    if built.batch.is_empty() {
        return Ok((built, 0));
    }
    let mut nft = cni_nft::Nft::new()?;
    if let Err(e) = nft.commit(&built.batch) {
        // What is in the kernel is no longer known: the next program replaces it whole.
        enforcer.reset();
        return Err(e.into());
    }
    // The program is in force whatever happens to the flush; a failed one is retried with
    // the next program.
    let flushed =
        conntrack::flush_denied(&mut nft, &built.cluster, &built.local).unwrap_or_else(|e| {
            log::warn!("conntrack entries of newly denied connections not deleted: {e}");
            0
        });
    Ok((built, flushed))
}

fn read_failed(health: &SharedHealth, e: &InputError) {
    log::warn!("policy inputs: {e}; the program in force stays, re-reading");
    if let Some(p) = lock(health).policy.as_mut() {
        p.sync_errors += 1;
    }
}

/// The enforcement loop: keeps `view` current and commits a program after every change.
async fn enforce(
    cfg: &PolicyConfig,
    mut local: watch::Receiver<Option<Vec<Pod>>>,
    health: &SharedHealth,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut view = View::new(Keys::new(&cfg.prefix), &cfg.node);
    let mut enforcer = None;
    let mut conn = None;
    let mut watch: Option<Watch> = None;
    let mut relist_at = tokio::time::Instant::now();
    let mut dirty = false;
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        if watch.is_none() && tokio::time::Instant::now() >= relist_at {
            match relist(&mut conn, cfg, &mut view).await {
                Ok((w, changed)) => {
                    watch = Some(w);
                    dirty |= changed;
                }
                Err(e) => {
                    read_failed(health, &e);
                    relist_at = tokio::time::Instant::now() + RETRY;
                }
            }
        }
        if dirty && view.ready() && due.is_none() {
            due = Some(tokio::time::Instant::now() + COALESCE);
        }
        let watching = watch.is_some();
        let next = async {
            match watch.as_mut() {
                Some(w) => w.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stopped(&mut shutdown) => return,
            changes = next => match changes {
                Ok(changes) => dirty |= view.apply(changes),
                Err(e) => {
                    read_failed(health, &e.into());
                    watch = None;
                    relist_at = tokio::time::Instant::now() + RETRY;
                }
            },
            scanned = local.changed() => {
                if scanned.is_err() {
                    return;
                }
                let pods = local.borrow_and_update().clone();
                if pods.is_some_and(|pods| view.set_local(pods)) {
                    dirty = true;
                    // A new pod is isolated without waiting: the scans coalesce by
                    // themselves (the channel keeps only the latest list).
                    if view.ready() {
                        due = Some(tokio::time::Instant::now());
                    }
                }
            }
            _ = tokio::time::sleep_until(relist_at), if !watching => {}
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                due = None;
                if sync(&view, &mut enforcer, health).await {
                    dirty = false;
                } else {
                    due = Some(tokio::time::Instant::now() + RETRY);
                }
            }
        }
    }
}

/// Removes the program, if any (blocking): with enforcement turned off, no earlier run's
/// program may keep filtering.
pub fn remove_program() -> Result<(), cni_nft::Error> {
    let mut batch = cni_nft::Batch::new();
    batch.destroy_table(cni_nft::Family::Inet, cni_policy::nft::TABLE)?;
    cni_nft::Nft::new()?.commit(&batch)
}

/// A pod `ns/name` labelled `pod=<name>` with address `ip`, for the unit tests.
#[cfg(test)]
pub(crate) fn test_pod(ns: &str, name: &str, ip: &str) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: [("pod".to_string(), name.to_string())].into(),
        ips: vec![ip.parse().expect("an address")],
        named_ports: Default::default(),
    }
}
