//! Every policy verdict visible: the policy program logs the first packet of each connection
//! it denies (and, with `--flow-log all`, of each it allows) to an nfnetlink_log group
//! (`cni_policy::nft::flow_log`); this module reads the group ([`reader`], on a thread of its
//! own, never on the event loop), names each record through the agent's view of the cluster
//! ([`names`], kept by the policy worker in [`index`]), keeps the flows in a bounded store (`rcni_flows::FlowStore`) and serves them:
//! `/flows` and the page `/ui` on the health address and the root-only socket
//! `<state-dir>/flows.sock` ([`routes`], [`socket`]), and the verdict counters of `/metrics`
//! ([`metrics`]).

pub mod index;
pub mod metrics;
pub mod names;
pub mod reader;
pub mod routes;
pub mod socket;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use cni_nft::nflog::LogRecord;
use cni_policy::nft::flow_log::FlowLog;
use rcni_flows::{Bounds, Filter, Flow, FlowStore};
use tokio::sync::watch;

use index::SharedIndex;
use metrics::VerdictCounters;
use names::{ClusterNames, Unnamed};

/// The flow log of a running agent: the index the policy worker keeps, and the flows.
pub struct FlowLogRun {
    pub index: SharedIndex,
    pub flows: SharedFlows,
}

/// Starts the flow log of node `node` when `mode` logs anything: its store, the reader
/// thread, and the flow socket in `state_dir` (a socket that cannot be made is logged: the
/// flows are still served on the health address). Until `shutdown`.
pub fn start(
    node: &str,
    mode: FlowLog,
    state_dir: &Path,
    shutdown: &watch::Receiver<bool>,
) -> Option<FlowLogRun> {
    if mode == FlowLog::Off {
        return None;
    }
    let index = SharedIndex::default();
    let flows = FlowState::new(node, mode, Bounds::default(), Arc::new(index.clone()));
    if let Err(e) = reader::spawn(flows.clone(), shutdown.clone()) {
        log::error!("flow log: cannot start the reader thread: {e}");
    }
    let path = socket::path(state_dir);
    match socket::bind(&path) {
        Ok(listener) => {
            tokio::spawn(socket::serve(
                listener,
                path,
                flows.clone(),
                shutdown.clone(),
            ));
        }
        Err(e) => log::error!("flow log: cannot listen on {}: {e}", path.display()),
    }
    Some(FlowLogRun { index, flows })
}

/// The flows of the node and what is known about how they were gathered.
pub struct FlowState {
    mode: FlowLog,
    node: String,
    names: Arc<dyn ClusterNames>,
    store: Mutex<FlowStore>,
    verdicts: Mutex<VerdictCounters>,
    /// The store's latest change, for followers.
    changed: watch::Sender<u64>,
    stats: Stats,
}

/// What the reader counted.
#[derive(Debug, Default)]
pub struct Stats {
    /// Records whose prefix or headers could not be read.
    pub unnamed: AtomicU64,
    /// Records the socket lost (gaps in the group's sequence numbers).
    pub lost: AtomicU64,
    /// Records the kernel's rate limits held back, denied (and held) and allowed.
    pub suppressed_denied: AtomicU64,
    pub suppressed_allowed: AtomicU64,
    /// 1 while the group is bound.
    pub bound: AtomicU64,
}

/// The flows shared by the reader and the servers.
pub type SharedFlows = Arc<FlowState>;

impl FlowState {
    /// An empty store for node `node` logging `mode`, bounded by `bounds`, naming through
    /// `names`.
    pub fn new(
        node: &str,
        mode: FlowLog,
        bounds: Bounds,
        names: Arc<dyn ClusterNames>,
    ) -> SharedFlows {
        Arc::new(FlowState {
            mode,
            node: node.to_string(),
            names,
            store: Mutex::new(FlowStore::new(bounds)),
            verdicts: Mutex::new(VerdictCounters::default()),
            changed: watch::channel(0).0,
            stats: Stats::default(),
        })
    }

    fn store(&self) -> MutexGuard<'_, FlowStore> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the program logs.
    pub fn mode(&self) -> FlowLog {
        self.mode
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn names(&self) -> &dyn ClusterNames {
        self.names.as_ref()
    }

    /// Names `records` (received at `received`) and keeps their flows.
    pub fn take(&self, records: &[LogRecord], received: SystemTime) {
        let mut flows = Vec::with_capacity(records.len());
        for r in records {
            match names::to_flow(r, self.names.as_ref(), received) {
                Ok(f) => flows.push(f),
                Err(why) => {
                    self.stats.unnamed.fetch_add(1, Ordering::Relaxed);
                    if why == Unnamed::Prefix {
                        log::debug!("flow log: a record with prefix {:?} is not ours", r.prefix);
                    }
                }
            }
        }
        if flows.is_empty() {
            return;
        }
        {
            let mut v = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
            flows.iter().for_each(|f| v.count(f));
        }
        let latest = {
            let mut store = self.store();
            flows.into_iter().for_each(|f| {
                store.record(f);
            });
            store.latest()
        };
        self.changed.send_replace(latest);
    }

    /// The flows `filter` picks now.
    pub fn flows(&self, filter: &Filter) -> Vec<Flow> {
        self.store().flows(filter, jiff::Timestamp::now())
    }

    /// The flows changed after change `seq`, with their change numbers.
    pub fn updated_since(&self, seq: u64) -> Vec<(u64, Flow)> {
        self.store().updated_since(seq)
    }

    /// The latest change and a receiver told of the next ones.
    pub fn subscribe(&self) -> (u64, watch::Receiver<u64>) {
        let rx = self.changed.subscribe();
        let latest = *rx.borrow();
        (latest, rx)
    }

    /// The `/metrics` lines of the flow log.
    pub fn metrics(&self) -> String {
        let usage = self.store().usage();
        let mut v = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        v.forget_gone_policies(self.names.as_ref());
        metrics::render(&v, usage, &self.stats)
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }
}
