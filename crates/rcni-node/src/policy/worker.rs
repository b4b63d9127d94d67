//! The enforcement worker: one thread that owns the [`View`], the [`Enforcer`] and an
//! nf_tables socket, so that decoding, program changes, commits and conntrack deletions never
//! stall the agent's event loop. It takes [`Job`]s in order; after taking every job that is
//! waiting (a burst becomes one batch), it makes the batch of what changed, commits it, deletes
//! the conntrack entries it makes stale, records the outcome in the health state, and answers
//! the jobs that wait for the program to be in force. No batch is made before the datastore
//! has been read in full and the node's pods listed in full: until then the program a
//! previous run left stays in force. A failed commit is retried after [`RETRY`] (the next
//! batch replaces the whole table), and the node is unhealthy until one succeeds.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use cni_etcd::{Entry, WatchEvent};
use cni_nft::Nft;
use cni_policy::nft::{Change, Delta, Enforcer};
use cni_policy::stored::Keys;
use ipnet::IpNet;
use tokio::sync::oneshot;

use super::conntrack;
use super::view::{Changes, View};
use crate::health::{lock, unix_now, SharedHealth};
use crate::policy_health::failing;

/// Pause before retrying a failed commit.
pub const RETRY: Duration = Duration::from_secs(1);

/// What the program's being in force means to one who waits: `Err` says why it is not.
pub type Answer = Result<(), String>;

/// What the worker is given.
pub enum Job {
    /// A full read of the prefix.
    Listing(Vec<Entry>),
    /// Watched changes of the prefix.
    Watch(Vec<WatchEvent>),
    /// Changes of the local pods; `complete` once the node's pods have been listed in full.
    Local {
        changes: Vec<Change>,
        complete: bool,
    },
    /// Commit what is pending, then answer (with the outcome of that commit).
    Commit(oneshot::Sender<Answer>),
}

/// The worker thread's mailbox (the thread ends when it is dropped).
pub struct Worker {
    tx: mpsc::Sender<Job>,
}

impl Worker {
    /// Starts the worker of node `node` whose pod subnets are `hold`.
    pub fn start(keys: Keys, node: &str, hold: Vec<IpNet>, health: SharedHealth) -> Worker {
        let (tx, rx) = mpsc::channel();
        let state = State {
            view: View::new(keys, node),
            enforcer: Enforcer::with_hold(hold),
            nft: None,
            health,
            local_loaded: false,
            dirty: false,
            failed: false,
            waiters: Vec::new(),
        };
        std::thread::Builder::new()
            .name("rcni-policy".into())
            .spawn(move || run(rx, state))
            .expect("start the policy worker thread");
        Worker { tx }
    }

    /// Hands `job` to the worker.
    pub fn send(&self, job: Job) {
        // The thread only ends when this mailbox is dropped.
        let _ = self.tx.send(job);
    }

    /// Commits what is pending; resolves with the outcome.
    pub fn commit(&self) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Commit(tx));
        rx
    }
}

struct State {
    view: View,
    enforcer: Enforcer,
    nft: Option<Nft>,
    health: SharedHealth,
    local_loaded: bool,
    /// Changes taken since the last batch.
    dirty: bool,
    /// The last commit failed: retry.
    failed: bool,
    waiters: Vec<oneshot::Sender<Answer>>,
}

fn run(rx: mpsc::Receiver<Job>, mut state: State) {
    loop {
        let first = if state.failed {
            match rx.recv_timeout(RETRY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        };
        for job in first.into_iter().chain(rx.try_iter()) {
            state.take(job);
        }
        state.sync();
    }
}

impl State {
    fn take(&mut self, job: Job) {
        match job {
            Job::Listing(entries) => {
                let changes = self.view.load(entries);
                self.apply(changes);
                self.dirty = true;
            }
            Job::Watch(events) => {
                let changes = self.view.apply(events);
                self.apply(changes);
            }
            Job::Local { changes, complete } => {
                self.local_loaded |= complete;
                self.dirty |= complete;
                self.apply(Changes {
                    changes,
                    bad: Vec::new(),
                });
            }
            Job::Commit(waiter) => {
                self.waiters.push(waiter);
                self.dirty = true;
            }
        }
    }

    /// Gives `changes` to the enforcer; a change it refuses (a selector Kubernetes would
    /// refuse) is left out like an unreadable value.
    fn apply(&mut self, changes: Changes) {
        let mut bad = changes.bad.len() as u64;
        for b in &changes.bad {
            log::warn!("policy input {b}; left out");
        }
        for change in changes.changes {
            self.dirty = true;
            let what = describe(&change);
            if let Err(e) = self.enforcer.apply(change) {
                log::warn!("{what}: {e}; left out");
                bad += 1;
            }
        }
        if bad > 0 {
            if let Some(p) = lock(&self.health).policy.as_mut() {
                p.bad_inputs += bad;
            }
        }
    }

    /// Makes, commits and records the batch of what changed, if the inputs are complete.
    fn sync(&mut self) {
        if !self.view.loaded() || !self.local_loaded {
            // Nothing of this run is in force: those waiting (a DEL) are answered, the
            // first program will hold what they told.
            self.answer(&Ok(()));
            return;
        }
        if !self.dirty && !self.failed {
            self.answer(&Ok(()));
            return;
        }
        self.dirty = false;
        let started = Instant::now();
        let outcome = self.commit();
        let answer = match outcome {
            Ok(delta) => {
                self.failed = false;
                let flushed = self.flush(&delta);
                self.record_success(&delta, started, flushed);
                Ok(())
            }
            Err(cause) => {
                self.failed = true;
                log::warn!("policy program not applied: {cause}; the previous one stays, retrying");
                if let Some(p) = lock(&self.health).policy.as_mut() {
                    p.sync_errors += 1;
                    failing(&mut p.program, &cause);
                }
                Err(format!("the policy program cannot be committed: {cause}"))
            }
        };
        self.answer(&answer);
    }

    /// The batch, committed.
    fn commit(&mut self) -> Result<Delta, String> {
        let delta = self.enforcer.batch().map_err(|e| {
            self.enforcer.reset();
            e.to_string()
        })?;
        if delta.batch.is_empty() {
            return Ok(delta);
        }
        let nft = match self.nft.as_mut() {
            Some(nft) => nft,
            None => self.nft.insert(Nft::new().map_err(|e| e.to_string())?),
        };
        if let Err(e) = nft.commit(&delta.batch) {
            // What is in the kernel is no longer known: the next batch replaces it whole.
            self.enforcer.reset();
            self.nft = None;
            return Err(e.to_string());
        }
        Ok(delta)
    }

    /// Deletes the conntrack entries `delta` makes stale; how many. The program is in force
    /// whatever happens here; a failure is logged.
    fn flush(&mut self, delta: &Delta) -> usize {
        let Some(nft) = self.nft.as_mut() else {
            return 0;
        };
        conntrack::flush(nft, &self.enforcer, delta).unwrap_or_else(|e| {
            log::warn!("conntrack entries of denied or stale connections not deleted: {e}");
            0
        })
    }

    fn record_success(&mut self, delta: &Delta, started: Instant, flushed: usize) {
        let s = &delta.summary;
        if !delta.batch.is_empty() {
            log::info!(
                "policy program: {} policies, {} local pod(s) isolated, {} addresses, {} held; committed in {} ms; {flushed} stale connection(s) stopped",
                s.policies,
                s.isolated_pods,
                s.elements,
                s.held_addresses,
                started.elapsed().as_millis()
            );
        }
        let mut h = lock(&self.health);
        let Some(p) = h.policy.as_mut() else {
            return;
        };
        p.ready = true;
        p.program = None;
        p.policies = s.policies;
        p.selected_pods = s.isolated_pods;
        p.set_elements = s.elements;
        p.held_addresses = s.held_addresses;
        p.last_sync_unix = Some(unix_now());
    }

    fn answer(&mut self, answer: &Answer) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.send(answer.clone());
        }
    }
}

/// What a change is about, for messages.
fn describe(change: &Change) -> String {
    match change {
        Change::Pod { id, .. } => format!("pod {id}"),
        Change::Policy { key, .. } => format!("policy {key}"),
        Change::Namespace { name, .. } => format!("namespace {name}"),
    }
}
