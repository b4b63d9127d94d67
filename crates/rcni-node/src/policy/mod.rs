//! Kubernetes NetworkPolicy enforcement on this node (`--network-policy`, on by default).
//!
//! The pipeline, incremental from end to end: the datastore's watch events and the node's
//! pod changes are decoded once, by key ([`view`]), into changes of pods, policies and
//! namespaces; the enforcer of [`cni_policy::nft`] takes them and makes a batch of only the
//! kernel objects that changed; the [`worker`] thread commits it and deletes the conntrack
//! entries it makes stale ([`conntrack`]). Nothing per change grows with the cluster.
//!
//! A pod is held from its first packet: the program drops every address of the node's pod
//! subnets that it has not programmed, both ways, and the bridge plugin tells the agent about
//! each pod at ADD, before its interface has its addresses ([`socket`]). The agent takes the
//! addresses away from any pod that had them, then programs the pod as soon as its labels
//! are known: at once where its namespace has no policy, from the `rcni pod` record before
//! the ADD returns, or from the CRI runtime as soon as it lists the sandbox ([`enforce`]).
//! Meanwhile the pod is Running with its address, the node reaches it (kubelet probes take
//! the `output` hook), and everything else to or from it is dropped.
//!
//! The node's pods are also published in the datastore, bound to the node's lease
//! ([`publish`]), so every node knows every pod.
//!
//! The program outlives the agent's view of the datastore: while etcd is unreachable the
//! last program stays, the agent never deletes it on exit, and a restarted agent leaves the
//! previous run's program in place until it has read the datastore and its pods in full
//! (ADDs are refused with code 11 meanwhile). Same-node pod traffic is bridged: it reaches
//! the `forward` hook only with `br_netfilter`, whose switches [`enable_bridge_netfilter`]
//! turns on in the agent's namespace.

pub mod conntrack;
pub mod enforce;
pub mod publish;
pub mod socket;
pub mod view;
pub mod worker;

use std::path::PathBuf;

use cni_policy::stored::Keys;
use cni_policy::Pod;
use ipnet::IpNet;
use tokio::sync::{mpsc, watch};

use crate::cri::CriClient;
use crate::health::{lock, SharedHealth};
use crate::pods::attached::Attached;
use crate::pods::cri::CriPods;
use crate::pods::local::LocalPods;
use crate::pods::records::RecordPods;
use crate::pods::PodSource;
use crate::policy_health::{failing, PolicyHealth};
use cni_etcd::{Access, ConnectError, Connection, EtcdError, Probe};
use enforce::Enforcement;
use worker::Worker;

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
    /// The node's pod subnets, held where not programmed (none when the bridge plugin cannot
    /// tell the agent about new pods: `crate::bridge_kind`).
    pub hold: Vec<IpNet>,
    /// The pod socket the bridge plugin tells the agent about pods on.
    pub socket: PathBuf,
    /// Where the pods told at ADD are kept.
    pub attached_dir: PathBuf,
    /// host-local's data directory of the agent's network (its leases).
    pub ipam_dir: PathBuf,
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
    let listener = match socket::bind(&cfg.socket) {
        Ok(l) => l,
        Err(e) => {
            let why = format!(
                "cannot listen on the pod socket {}: {e}",
                cfg.socket.display()
            );
            log::error!("NetworkPolicy: {why}; no pod can be added");
            if let Some(p) = lock(&health).policy.as_mut() {
                failing(&mut p.program, why);
            }
            return;
        }
    };
    let (requests_tx, requests) = mpsc::channel(64);
    tokio::task::spawn_local(socket::serve(listener, requests_tx, shutdown.clone()));
    let (scans_tx, scans) = mpsc::channel(4);
    tokio::task::spawn_local(enforce::scan(source.clone(), scans_tx, shutdown.clone()));
    let (publish, published) = watch::channel(None);
    tokio::task::spawn_local(publish_loop(cfg.clone(), published, shutdown.clone()));
    let worker = Worker::start(
        Keys::new(&cfg.prefix),
        &cfg.node,
        cfg.hold.clone(),
        health.clone(),
    );
    let enforcement = Enforcement {
        attached: Attached::new(&cfg.attached_dir),
        cfg,
        source,
        worker,
        local: LocalPods::new(),
        health,
        publish,
        listed: false,
        listed_told: false,
    };
    enforcement.run(scans, requests, shutdown).await;
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

/// Publishes the node's pods (`published`, once the first list is in) whenever they change,
/// and every [`enforce::RESCAN`] (a missing record is written back), until `shutdown`.
async fn publish_loop(
    cfg: PolicyConfig,
    mut published: watch::Receiver<Option<Vec<Pod>>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let publisher = publish::Publisher {
        keys: Keys::new(&cfg.prefix),
        node: cfg.node.clone(),
        subnet_key: cfg.subnet_key.clone(),
    };
    let own = publisher.keys.pods(Some(&cfg.node));
    let probe_key = format!("{own}rcni-permission-probe");
    let mut conn = None;
    loop {
        let pods = published.borrow_and_update().clone();
        if let Some(pods) = pods {
            let done = match connected(&mut conn, &cfg.access, &own, Some(&probe_key)).await {
                Ok(conn) => publisher.round(conn, &pods).await.map_err(InputError::from),
                Err(e) => Err(InputError::from(e)),
            };
            if let Err(e) = done {
                log::warn!("publish this node's pods: {e}; retrying");
                conn = None;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(enforce::RESCAN) => {}
            changed = published.changed() => if changed.is_err() { return },
            _ = crate::shutdown::stopped(&mut shutdown) => return,
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
