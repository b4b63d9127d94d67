//! The CRI verbs over records: run (RunPodSandbox), stop (StopPodSandbox), remove
//! (RemovePodSandbox), status (PodSandboxStatus) and recovery.
//!
//! Every verb persists the record before and after each side effect, so a process killed
//! between any two steps leaves a record that says what may exist. Recovery is no second
//! code path: a record left in `setting-up` goes through the same `undo` a failed run uses, one
//! left in `stopping` through the same `stop_locked` (or `remove_locked` when `rm` was under
//! way) that the verbs use.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cni_runtime::{
    default_ifname, discover, Attachment, Member, Network, Runtime, SandboxNetworks,
    SandboxRequest, SetupMode,
};
use cni_types::{netns_text, validate_container_id};

use crate::error::SandboxError;
use crate::namespaces::{netns_name, Namespaces};
use crate::record::{
    now, NetnsOwner, NetworkRecord, ResultRecord, SandboxRecord, State, RECORD_FORMAT,
};
use crate::request::{capability_args, cni_args, new_id, RunRequest};
use crate::status::{pod_ips, SandboxStatus};
use crate::store::{RecordStore, SandboxLock};

/// How long gc waits for the surviving plugins of a killed verb (they hold its sandbox lock).
pub const ORPHAN_WAIT: Duration = Duration::from_secs(120);

/// The capability argument that marks an attachment as made by the sandboxes of one state dir.
pub const STATE_MARK: &str = "rcni.dev/sandbox-state";

/// The pod-sandbox network manager of one node.
pub struct Sandboxes {
    pub runtime: Runtime,
    pub store: RecordStore,
    pub conf_dir: PathBuf,
    pub namespaces: Arc<dyn Namespaces>,
    /// How the networks of one sandbox are attached (containerd's default: in parallel).
    pub mode: SetupMode,
}

/// What a recovery pass did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Sandboxes whose killed `run` was undone.
    pub undone: Vec<String>,
    /// Sandboxes whose killed `stop` or `rm` was finished.
    pub finished: Vec<String>,
    /// What could not be recovered (the records stay for a retry).
    pub errors: Vec<String>,
}

impl Sandboxes {
    pub fn new(
        runtime: Runtime,
        state_dir: impl Into<PathBuf>,
        conf_dir: impl Into<PathBuf>,
        namespaces: Arc<dyn Namespaces>,
    ) -> Self {
        Sandboxes {
            runtime,
            store: RecordStore::new(state_dir),
            conf_dir: conf_dir.into(),
            namespaces,
            mode: SetupMode::Parallel,
        }
    }

    // ---- run --------------------------------------------------------------------------------

    /// RunPodSandbox. On success the sandbox is ready and has its addresses. On failure
    /// everything attached is torn down, a namespace it created is removed, and the record is
    /// gone (unless the teardown failed too: then the record stays `stopped` with what is
    /// left, for `stop` or `rm` to retry). Running an id that is ready returns its status.
    pub fn run(&self, req: &RunRequest) -> Result<SandboxStatus, SandboxError> {
        let id = match &req.id {
            Some(id) => id.clone(),
            None => new_id()?,
        };
        validate_container_id(&id)
            .map_err(|e| SandboxError::Invalid(format!("sandbox id {id:?}: {}", e.msg)))?;
        let _state = self.store.lock_state(false)?;
        let lock = self.lock(&id)?;
        let out = self.run_locked(&lock, id.clone(), req);
        if out.is_err() && matches!(self.store.load(&id), Ok(None)) {
            // The failed run left nothing, its lock file included.
            lock.release_and_forget();
        }
        out
    }

    fn run_locked(
        &self,
        lock: &SandboxLock,
        id: String,
        req: &RunRequest,
    ) -> Result<SandboxStatus, SandboxError> {
        if let Some(rec) = self.store.load(&id)? {
            match rec.state {
                State::Ready => return Ok(SandboxStatus::of(&rec)),
                // We hold its lock, so the run that wrote it is dead: undo it, then run anew.
                State::SettingUp => {
                    let undo = self.undo(lock, rec);
                    if !undo.is_empty() {
                        return Err(SandboxError::Teardown { id, errors: undo });
                    }
                }
                State::Stopping | State::Stopped => return Err(SandboxError::Stopped(id)),
            }
        }
        let networks = self.resolve_networks(&req.networks)?;
        let mut pod = req.pod.clone();
        if pod.uid.is_empty() {
            pod.uid = id.clone();
        }
        let (netns, netns_owner) = match &req.netns {
            Some(p) => {
                netns_text(p)?;
                (p.clone(), NetnsOwner::Caller)
            }
            None => (self.namespaces.path(&netns_name(&id)), NetnsOwner::Sandbox),
        };
        let mut caps = capability_args(req)?;
        // No plugin declares this capability, so none sees it; the result cache keeps it, which
        // is how GC tells this state dir's attachments from other runtimes' in the same cache.
        caps.insert(STATE_MARK.into(), self.state_mark().into());
        let t = now();
        let rec = SandboxRecord {
            format: RECORD_FORMAT,
            cni_args: cni_args(&pod, &id, &req.extra_args)?,
            capability_args: caps,
            id,
            pod,
            netns,
            netns_owner,
            state: State::SettingUp,
            removing: false,
            networks,
            ips: Vec::new(),
            results: Vec::new(),
            errors: Vec::new(),
            created: t,
            updated: t,
        };
        // From here on the record exists, so whatever follows is attributable.
        self.save(&rec)?;
        self.set_up(lock, rec)
    }

    fn set_up(
        &self,
        lock: &SandboxLock,
        mut rec: SandboxRecord,
    ) -> Result<SandboxStatus, SandboxError> {
        if rec.netns_owner == NetnsOwner::Sandbox {
            if let Err(message) = self.namespaces.create(&netns_name(&rec.id)) {
                let e = SandboxError::Netns {
                    path: rec.netns.clone(),
                    message,
                };
                return Err(self.fail(lock, rec, e));
            }
        }
        let members: Result<Vec<Member>, _> = rec
            .networks
            .iter()
            .map(|n| {
                Ok(Member {
                    network: n.network()?,
                    ifname: n.ifname.clone(),
                })
            })
            .collect();
        let members = match members {
            Ok(m) => m,
            Err(e) => return Err(self.fail(lock, rec, SandboxError::Runtime(e))),
        };
        let request = SandboxRequest {
            container_id: rec.id.clone(),
            netns: rec.netns.clone(),
            args: rec.cni_args.clone(),
            capability_args: rec.capability_args.clone(),
        };
        let plugins = self.plugins_holding(lock);
        let result =
            match SandboxNetworks::from_members(members).setup(&plugins, &request, self.mode) {
                Ok(r) => r,
                Err(e) => return Err(self.fail(lock, rec, SandboxError::Runtime(e))),
            };
        if let Some(default) = rec.networks.iter().find(|n| n.ifname == default_ifname(0)) {
            if result.ips_of(&default.ifname).is_empty() {
                let e = SandboxError::NoAddress {
                    network: default.name.clone(),
                    ifname: default.ifname.clone(),
                };
                return Err(self.fail(lock, rec, e));
            }
        }
        rec.ips = pod_ips(&result);
        rec.results = result
            .results
            .iter()
            .map(|r| ResultRecord {
                network: r.network.clone(),
                ifname: r.ifname.clone(),
                result: r
                    .result
                    .to_value(r.result.cni_version)
                    .unwrap_or(serde_json::Value::Null),
            })
            .collect();
        rec.state = State::Ready;
        if let Err(e) = self.save(&rec) {
            rec.state = State::SettingUp;
            return Err(self.fail(lock, rec, e));
        }
        Ok(SandboxStatus::of(&rec))
    }

    /// A failed run: undo, and report both the failure and what the undo could not do.
    fn fail(&self, lock: &SandboxLock, rec: SandboxRecord, original: SandboxError) -> SandboxError {
        SandboxError::SetupFailed {
            original: Box::new(original),
            undo: self.undo(lock, rec),
        }
    }

    /// Undoes a run (failed, or killed and found by recovery): DEL of every network, removal of
    /// the namespace it created, removal of the record. What cannot be undone is kept in the
    /// record as `stopped` with its errors, and returned.
    fn undo(&self, lock: &SandboxLock, mut rec: SandboxRecord) -> Vec<String> {
        let mut errors = self.teardown(lock, &mut rec);
        if errors.is_empty() {
            errors.extend(self.remove_netns(&rec));
        }
        if errors.is_empty() {
            if let Err(e) = self.store.remove(&rec.id) {
                errors.push(e.to_string());
            }
            return errors;
        }
        rec.state = State::Stopped;
        rec.errors = errors.clone();
        if let Err(e) = self.save(&rec) {
            errors.push(e.to_string());
        }
        errors
    }

    /// The networks to attach: the named ones, or the default network; the built-in loopback
    /// network on `lo` first.
    fn resolve_networks(&self, names: &[String]) -> Result<Vec<NetworkRecord>, SandboxError> {
        let found = discover(&self.conf_dir)?;
        let nets: Vec<Network> = if names.is_empty() {
            let net = found.default_network().ok_or_else(|| {
                SandboxError::Invalid(format!(
                    "no network config found in {}",
                    self.conf_dir.display()
                ))
            })?;
            vec![net.clone()]
        } else {
            names
                .iter()
                .map(|n| found.require(n).cloned())
                .collect::<Result<_, _>>()?
        };
        Ok(SandboxNetworks::new(nets, true)
            .members()
            .iter()
            .map(|m| NetworkRecord::of(&m.network, &m.ifname))
            .collect())
    }

    // ---- stop and remove ----------------------------------------------------------------------

    /// StopPodSandbox: DEL of every network still attached, in reverse, continuing past
    /// failures. Stopping an unknown or stopped sandbox succeeds; after a failure the record
    /// keeps the networks still attached and a retry DELs only those.
    pub fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let _state = self.store.lock_state(false)?;
        let lock = self.lock(id)?;
        match self.store.load(id)? {
            None => {
                lock.release_and_forget();
                Ok(())
            }
            Some(mut rec) => self.stop_locked(&lock, &mut rec),
        }
    }

    fn stop_locked(&self, lock: &SandboxLock, rec: &mut SandboxRecord) -> Result<(), SandboxError> {
        if rec.state == State::Stopped && rec.attached().next().is_none() {
            return Ok(());
        }
        rec.state = State::Stopping;
        self.save(rec)?;
        let errors = self.teardown(lock, rec);
        rec.state = State::Stopped;
        rec.errors = errors.clone();
        self.save(rec)?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SandboxError::Teardown {
                id: rec.id.clone(),
                errors,
            })
        }
    }

    /// RemovePodSandbox: whatever stop did not do, then the namespace (if created here) and
    /// the record. Removing an unknown sandbox succeeds.
    pub fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let _state = self.store.lock_state(false)?;
        let lock = self.lock(id)?;
        let Some(mut rec) = self.store.load(id)? else {
            lock.release_and_forget();
            return Ok(());
        };
        self.remove_locked(&lock, &mut rec)?;
        lock.release_and_forget();
        Ok(())
    }

    fn remove_locked(
        &self,
        lock: &SandboxLock,
        rec: &mut SandboxRecord,
    ) -> Result<(), SandboxError> {
        if !rec.removing {
            rec.removing = true;
            self.save(rec)?;
        }
        self.stop_locked(lock, rec)?;
        let errors = self.remove_netns(rec);
        if !errors.is_empty() {
            rec.errors = errors.clone();
            self.save(rec)?;
            return Err(SandboxError::Teardown {
                id: rec.id.clone(),
                errors,
            });
        }
        self.store.remove(&rec.id)
    }

    /// DEL of every attached network in reverse (every plugin of each chain, past failures),
    /// each marked detached when it succeeds.
    /// A namespace that is gone is passed as an empty `CNI_NETNS` (what the kubelet flow sends
    /// after a reboot): the plugins still release what lives outside it.
    fn teardown(&self, lock: &SandboxLock, rec: &mut SandboxRecord) -> Vec<String> {
        let netns = if !rec.netns.as_os_str().is_empty() && self.namespaces.exists(&rec.netns) {
            rec.netns.clone()
        } else {
            PathBuf::new()
        };
        let plugins = self.plugins_holding(lock);
        let mut errors = Vec::new();
        for n in rec.networks.iter_mut().rev().filter(|n| !n.detached) {
            let att = Attachment {
                container_id: rec.id.clone(),
                netns: netns.clone(),
                ifname: n.ifname.clone(),
                args: rec.cni_args.clone(),
                capability_args: rec.capability_args.clone(),
            };
            match n
                .network()
                .and_then(|net| plugins.del_keep_going(&net, &att))
            {
                Ok(()) => n.detached = true,
                Err(e) => errors.push(format!("network {:?} on {}: {e}", n.name, n.ifname)),
            }
        }
        errors
    }

    fn remove_netns(&self, rec: &SandboxRecord) -> Vec<String> {
        if rec.netns_owner != NetnsOwner::Sandbox {
            return Vec::new();
        }
        match self.namespaces.remove(&netns_name(&rec.id)) {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("namespace {}: {e}", rec.netns.display())],
        }
    }

    // ---- status and list ----------------------------------------------------------------------

    /// PodSandboxStatus: never fails; an unknown or unreadable sandbox has an empty status.
    pub fn status(&self, id: &str) -> SandboxStatus {
        match self.store.load(id) {
            Ok(Some(rec)) => SandboxStatus::of(&rec),
            Ok(None) => SandboxStatus::unknown(id),
            Err(e) => {
                log::warn!("{e}");
                SandboxStatus::unknown(id)
            }
        }
    }

    /// Every sandbox with a record.
    pub fn list(&self) -> Result<Vec<SandboxStatus>, SandboxError> {
        let (recs, bad) = self.store.records()?;
        for e in bad {
            log::warn!("{e}");
        }
        Ok(recs.iter().map(SandboxStatus::of).collect())
    }

    // ---- recovery -----------------------------------------------------------------------------

    /// Finishes or undoes what killed processes left: a record in `setting-up` is undone, one
    /// in `stopping` (or being removed) is stopped (or removed). Records whose verb is still
    /// running elsewhere (their lock is held) are left alone.
    pub fn recover(&self) -> Result<Recovery, SandboxError> {
        let _state = self.store.lock_state(false)?;
        self.recover_locked(false)
    }

    /// Recovery with the state lock held. With `exclusive` (gc holds it exclusively) no verb
    /// is alive, so a sandbox lock that is held belongs to the plugins of a killed verb, which
    /// outlive it: recovery waits for them (up to [`ORPHAN_WAIT`]) instead of racing their
    /// ADD with its DEL.
    pub(crate) fn recover_locked(&self, exclusive: bool) -> Result<Recovery, SandboxError> {
        let mut report = Recovery::default();
        let recs = self.store.pending_records()?;
        for seen in &recs {
            let mut lock = self.store.lock_sandbox(&seen.id, false)?;
            if lock.is_none() && exclusive && seen.needs_recovery() {
                log::warn!(
                    "sandbox {}: waiting for the plugins of a killed run or stop to exit",
                    seen.id
                );
                lock = self.store.lock_sandbox_within(&seen.id, ORPHAN_WAIT)?;
                if lock.is_none() {
                    report.errors.push(format!(
                        "sandbox {}: still locked after {}s by the plugins of a killed verb; \
                         left for the next gc",
                        seen.id,
                        ORPHAN_WAIT.as_secs()
                    ));
                }
            }
            let Some(lock) = lock else {
                continue;
            };
            // Re-read under the lock: the owner may have finished meanwhile.
            let current = self.store.load(&seen.id)?;
            let gone = current.is_none();
            let Some(mut rec) = current.filter(SandboxRecord::needs_recovery) else {
                if gone {
                    // Its verb removed it: the lock file this pass re-created goes too.
                    lock.release_and_forget();
                } else {
                    // A verb killed between making the marker and writing its record: with
                    // the sandbox locked no verb is between those two steps now.
                    self.store.clear_pending(&seen.id);
                }
                continue;
            };
            let id = rec.id.clone();
            let outcome = if rec.state == State::SettingUp {
                let errors = self.undo(&lock, rec);
                if errors.is_empty() {
                    report.undone.push(id.clone());
                }
                report.errors.extend(errors);
                Ok(())
            } else if rec.removing {
                self.remove_locked(&lock, &mut rec).map(|()| {
                    report.finished.push(id.clone());
                })
            } else {
                self.stop_locked(&lock, &mut rec)
                    .map(|()| report.finished.push(id.clone()))
            };
            if let Err(e) = outcome {
                report.errors.push(e.to_string());
            }
            if self.store.load(&id)?.is_none() {
                lock.release_and_forget();
            }
        }
        Ok(report)
    }

    /// The value of [`STATE_MARK`] for this state dir: its absolute path.
    pub(crate) fn state_mark(&self) -> String {
        std::path::absolute(self.store.dir())
            .unwrap_or_else(|_| self.store.dir().to_path_buf())
            .display()
            .to_string()
    }

    /// The runtime whose plugins inherit the sandbox lock the verb holds (and no other child
    /// of this process does): plugins that outlive a killed verb keep the sandbox locked
    /// until they exit (see `store.rs`).
    fn plugins_holding(&self, lock: &SandboxLock) -> Runtime {
        let mut runtime = self.runtime.clone();
        runtime.exec.pass_fds.push(lock.descriptor());
        runtime
    }

    fn lock(&self, id: &str) -> Result<SandboxLock, SandboxError> {
        self.store
            .lock_sandbox(id, true)?
            .ok_or_else(|| SandboxError::Invalid(format!("sandbox {id} is locked")))
    }

    fn save(&self, rec: &SandboxRecord) -> Result<(), SandboxError> {
        let mut rec = rec.clone();
        rec.updated = now();
        self.store.save(&rec)
    }
}
