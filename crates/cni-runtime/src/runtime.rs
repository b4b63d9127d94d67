//! Running a network's plugin chain (libcni's `CNIConfig` in containernetworking/cni
//! `libcni/api.go`; SPEC.md, Section 3: Execution of Network Configurations).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use cni_invoke::{
    exec_with_result, exec_without_result, find_in_path, get_version_info, ExecOptions, Invocation,
    InvokeError,
};
use cni_types::{validate_network_name, CniResult, RawObject, SpecVersion, VersionInfo};

use cni_attribution::AttachmentId;

use crate::attachment::Attachment;
use crate::cache::{CacheEntry, ResultCache, DEFAULT_CACHE_DIR};
use crate::deadline::Deadline;
use crate::error::{Operation, PluginFailure, PluginId, RuntimeError, Stage};
use crate::lock::NetworkLock;
use crate::network::{plugin_name, plugin_type, Network};
use crate::request;
use crate::trace::TraceContext;

/// Per-command timeouts (libcni has none of its own), each for the whole chain of one
/// operation: the plugins of a chain share it. `None` waits forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub add: Option<Duration>,
    pub del: Option<Duration>,
    pub check: Option<Duration>,
    pub status: Option<Duration>,
    pub gc: Option<Duration>,
    pub version: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            add: Some(Duration::from_secs(60)),
            del: Some(Duration::from_secs(60)),
            check: Some(Duration::from_secs(60)),
            status: Some(Duration::from_secs(30)),
            gc: Some(Duration::from_secs(120)),
            version: Some(Duration::from_secs(10)),
        }
    }
}

impl Timeouts {
    /// The same timeout for every command.
    pub fn uniform(t: Option<Duration>) -> Self {
        Timeouts {
            add: t,
            del: t,
            check: t,
            status: t,
            gc: t,
            version: t,
        }
    }

    fn for_op(&self, op: Operation) -> Option<Duration> {
        match op {
            Operation::Add => self.add,
            Operation::Del => self.del,
            Operation::Check => self.check,
            Operation::Status => self.status,
            Operation::Gc => self.gc,
            Operation::Version | Operation::Validate => self.version,
        }
    }
}

/// One plugin's VERSION answer.
#[derive(Debug)]
pub struct PluginVersion {
    pub plugin_type: String,
    pub info: Result<VersionInfo, RuntimeError>,
}

/// What [`Runtime::validate`] found.
#[derive(Debug, Default)]
pub struct ValidationReport {
    /// Union of the capabilities the plugins declare `true` (as libcni's `ValidateNetworkList`).
    pub capabilities: BTreeSet<String>,
    /// Problems that do not stop the network from running (reserved keys in the file).
    pub warnings: Vec<String>,
}

/// What [`Runtime::gc_picked`] did.
#[derive(Debug, Default)]
pub struct GcReport {
    /// The stale attachments whose chain DEL succeeded (their cache entries are gone).
    pub deleted: Vec<CacheEntry>,
    /// The stale attachments whose chain DEL failed (their cache entries are kept).
    pub failed: Vec<(CacheEntry, RuntimeError)>,
    /// Whether the plugins got GC (the network's version is 1.1.0 or later).
    pub plugins_collected: bool,
    /// The valid list the plugins got.
    pub valid: Vec<AttachmentId>,
    /// The plugins' GC failures.
    pub plugin_errors: Vec<RuntimeError>,
}

/// Runs plugin chains. Cheap to share between threads.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Directories searched for plugins, in order (CNI_PATH).
    pub plugin_paths: Vec<PathBuf>,
    pub cache: ResultCache,
    /// Base options for every plugin run; the timeout comes from `timeouts`.
    pub exec: ExecOptions,
    pub timeouts: Timeouts,
    /// Undo a failed ADD with a DEL of the whole chain (default on; libcni never does).
    pub rollback: bool,
    /// Trace context every plugin gets (default: this process's `TRACEPARENT`, `TRACESTATE`,
    /// `BAGGAGE`).
    pub trace: TraceContext,
}

impl Runtime {
    pub fn new(plugin_paths: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        Runtime {
            plugin_paths,
            cache: ResultCache::new(cache_dir),
            exec: ExecOptions::default(),
            timeouts: Timeouts::default(),
            rollback: true,
            trace: TraceContext::from_env(),
        }
    }

    /// With libcni's default cache directory, `/var/lib/cni`.
    pub fn with_default_cache(plugin_paths: Vec<PathBuf>) -> Self {
        Runtime::new(plugin_paths, DEFAULT_CACHE_DIR)
    }

    pub fn cache_dir(&self) -> &Path {
        self.cache.root()
    }

    /// `CNI_PATH`: the search path joined with `:`. Go plugins need it non-empty (Go's skeleton),
    /// so an empty search path still sends something.
    fn cni_path(&self) -> String {
        std::env::join_paths(&self.plugin_paths)
            .ok()
            .and_then(|p| p.into_string().ok())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/opt/cni/bin".to_string())
    }

    pub(crate) fn invocation(&self, op: Operation, att: Option<&Attachment>) -> Invocation {
        let mut inv = Invocation::new(op.command());
        inv.path = self.cni_path();
        if let Some(att) = att {
            inv.container_id = att.container_id.clone();
            inv.netns = att.netns.clone();
            inv.ifname = att.ifname.clone();
            inv.args = att.args_env();
        }
        inv
    }

    /// The clock for one operation over the whole chain.
    pub(crate) fn deadline(&self, op: Operation) -> Deadline {
        Deadline::start(self.timeouts.for_op(op))
    }

    /// Options for the next plugin of an operation: its timeout is what is left of the
    /// operation's deadline, so the deadline is applied once per chain, not once per plugin.
    pub(crate) fn options(
        &self,
        op: Operation,
        plugin: &RawObject,
        deadline: &Deadline,
    ) -> Result<ExecOptions, RuntimeError> {
        let timeout = deadline
            .left()
            .map_err(|e| RuntimeError::DeadlineExceeded {
                plugin: plugin_id(plugin),
                op,
                budget: e.budget,
            })?;
        let mut opts = ExecOptions {
            timeout,
            ..self.exec.clone()
        };
        opts.extra_env.extend(self.trace.env());
        Ok(opts)
    }

    fn locate(&self, op: Operation, plugin: &RawObject) -> Result<PathBuf, RuntimeError> {
        find_in_path(&plugin_type(plugin), &self.plugin_paths)
            .map_err(|e| failure(plugin, op, Stage::Lookup, e.into()))
    }

    // ---- ADD ------------------------------------------------------------------------------

    /// ADD over the chain in order, each result the next plugin's `prevResult` (converted to
    /// the network's version; libcni passes them unconverted). The final result is cached and
    /// returned. On a failure the whole chain gets DEL in reverse before the error is returned.
    ///
    /// Refused before any plugin runs (nothing changes): names that cannot become a cache
    /// file (code 4), and an attachment that already has a cache entry
    /// ([`RuntimeError::AlreadyAttached`], code 4), because a second ADD would fail inside
    /// the plugins and its rollback would DEL the live attachment.
    ///
    /// Before the first plugin runs, the entry is created without a result (exclusively: of
    /// two concurrent ADDs of one attachment only one gets past this). An ADD killed at any
    /// later instant so leaves an entry with the attachment's netns, CNI_ARGS and capability
    /// args: DEL and GC (which holds the network lock exclusively, so it never sees the
    /// entry of a running ADD) find it and run the chain's DEL with the container's netns,
    /// which reaches what GC alone cannot (interfaces inside that namespace). Go libcni reads
    /// such an entry as an attachment without a cached result.
    pub fn add(&self, net: &Network, att: &Attachment) -> Result<CniResult, RuntimeError> {
        self.cache.entry_name(net.name(), att)?;
        let _lock = NetworkLock::shared(self.cache_dir(), net.name())?;
        self.refuse_if_attached(net, att)?;
        let mut entry = CacheEntry {
            container_id: att.container_id.clone(),
            config: net.config_bytes().to_vec(),
            ifname: att.ifname.clone(),
            network_name: net.name().to_string(),
            netns: att.netns.clone(),
            cni_args: att.args.clone(),
            capability_args: att.capability_args.clone(),
            result: None,
        };
        if !self.cache.create(&entry)? {
            // A concurrent ADD claimed it between the check and the claim.
            return Err(self.refuse_if_attached(net, att).err().unwrap_or_else(|| {
                RuntimeError::Internal("the cache entry vanished while claiming it".into())
            }));
        }
        let deadline = self.deadline(Operation::Add);
        let mut prev: Option<CniResult> = None;
        for plugin in net.plugins() {
            match self.add_one(net, plugin, att, prev.as_ref(), &deadline) {
                Ok(r) => prev = Some(r),
                Err(e) => return Err(self.roll_back(net, att, prev.as_ref(), e)),
            }
        }
        let Some(result) = prev else {
            self.cache.remove(net.name(), att);
            return Err(RuntimeError::Config {
                file: net.source.clone(),
                message: "no plugin configs found".into(),
            });
        };
        entry.result = Some(render(&result, result.cni_version));
        if let Err(e) = self.cache.store(&entry) {
            return Err(self.roll_back(net, att, Some(&result), e));
        }
        Ok(result)
    }

    fn refuse_if_attached(&self, net: &Network, att: &Attachment) -> Result<(), RuntimeError> {
        match self.cache.existing(net.name(), att)? {
            Some(cache_file) => Err(RuntimeError::AlreadyAttached {
                network: net.name().to_string(),
                container_id: att.container_id.clone(),
                ifname: att.ifname.clone(),
                cache_file,
            }),
            None => Ok(()),
        }
    }

    fn add_one(
        &self,
        net: &Network,
        plugin: &RawObject,
        att: &Attachment,
        prev: Option<&CniResult>,
        deadline: &Deadline,
    ) -> Result<CniResult, RuntimeError> {
        let op = Operation::Add;
        let path = self.locate(op, plugin)?;
        let prev_value = prev.map(|r| render(r, net.version));
        let stdin = attachment_stdin(op, net, plugin, att, prev_value.as_ref())?;
        let inv = self.invocation(op, Some(att));
        let opts = self.options(op, plugin, deadline)?;
        let result = exec_with_result(&path, &inv, &stdin, net.version, &opts)
            .map_err(|e| exec_failure(plugin, op, e))?;
        Ok(normalize(result, net.version))
    }

    /// DEL of the whole chain after a failed ADD (libcni rolls nothing back), with the partial
    /// result as `prevResult` where the version has DEL prevResults (0.4.0 on).
    fn roll_back(
        &self,
        net: &Network,
        att: &Attachment,
        partial: Option<&CniResult>,
        original: RuntimeError,
    ) -> RuntimeError {
        // The entry is this ADD's claim (no other ADD got past it), unless something removed
        // it meanwhile and another ADD completed: then its attachment is live, and DEL would
        // destroy it rather than undo this attempt.
        if let Ok(Some(other)) = self.cache.load_entry(net.name(), att) {
            if other.result.is_some() {
                log::warn!("not rolling back: a concurrent ADD of this attachment completed");
                return original;
            }
        }
        if !self.rollback {
            // libcni's behaviour: nothing is undone, and nothing stays cached.
            self.cache.remove(net.name(), att);
            return original;
        }
        let prev = partial
            .filter(|_| net.version >= SpecVersion::V0_4_0)
            .map(|r| render(r, net.version));
        let errors = self.del_chain(net, att, prev.as_ref(), true);
        self.cache.remove(net.name(), att);
        RuntimeError::RolledBack {
            original: Box::new(original),
            rollback: errors,
        }
    }

    // ---- DEL ------------------------------------------------------------------------------

    /// DEL over the chain in reverse with the cached result as `prevResult` (libcni's
    /// `DelNetworkList`). A corrupt cache is deleted and DEL goes on without one. The cache entry
    /// is removed on success and kept on failure.
    pub fn del(&self, net: &Network, att: &Attachment) -> Result<(), RuntimeError> {
        att.validate(net.name())?;
        let _lock = NetworkLock::shared(self.cache_dir(), net.name())?;
        self.del_locked(net, att)
    }

    /// The attachment with what the caller left empty (`CNI_ARGS`, capability args, netns)
    /// filled in from the values cached at ADD time (libcni's `GetNetworkListCachedConfig`), so DEL
    /// and CHECK repeat what ADD was given: plugins such as portmap only clean up when DEL carries
    /// the same `runtimeConfig`.
    pub fn complete_from_cache(&self, net: &Network, att: &Attachment) -> Attachment {
        let mut att = att.clone();
        if let Some(entry) = self.cache.load_entry(net.name(), &att).ok().flatten() {
            if att.args.is_empty() {
                att.args = entry.cni_args;
            }
            if att.capability_args.is_empty() {
                att.capability_args = entry.capability_args;
            }
            if att.netns.is_empty() {
                att.netns = entry.netns;
            }
        }
        att
    }

    /// [`Runtime::del`] after [`Runtime::complete_from_cache`].
    pub fn del_with_cached_args(
        &self,
        net: &Network,
        att: &Attachment,
    ) -> Result<(), RuntimeError> {
        self.del(net, &self.complete_from_cache(net, att))
    }

    /// [`Runtime::del`], except that every plugin of the chain gets its DEL even after one
    /// failed, and all failures are reported: libcni's `DelNetworkList` stops at the first,
    /// leaking what the plugins before it in the reverse order hold (containerd issue #12130). The
    /// cache entry is removed only when every DEL succeeded.
    pub fn del_keep_going(&self, net: &Network, att: &Attachment) -> Result<(), RuntimeError> {
        att.validate(net.name())?;
        let _lock = NetworkLock::shared(self.cache_dir(), net.name())?;
        self.del_chain_cached(net, att, true)
    }

    fn del_locked(&self, net: &Network, att: &Attachment) -> Result<(), RuntimeError> {
        self.del_chain_cached(net, att, false)
    }

    fn del_chain_cached(
        &self,
        net: &Network,
        att: &Attachment,
        keep_going: bool,
    ) -> Result<(), RuntimeError> {
        // A name too long for a cache file never had an entry (ADD refuses it; Go libcni
        // fails to write it after its plugins ran), so DEL runs without one and can still
        // clean up such an attachment.
        let cacheable = self.cache.entry_name(net.name(), att).is_ok();
        let prev = if cacheable && net.version >= SpecVersion::V0_4_0 {
            match self.cache.load_result(net.name(), att, net.version) {
                Ok(v) => v,
                Err(e) => {
                    log::warn!("{e}; deleting the cache entry and running DEL without prevResult");
                    self.cache.remove(net.name(), att);
                    None
                }
            }
        } else {
            None
        };
        let mut errors = self.del_chain(net, att, prev.as_ref(), keep_going);
        match errors.len() {
            0 => {
                self.cache.remove(net.name(), att);
                Ok(())
            }
            1 => Err(errors.remove(0)),
            _ => Err(RuntimeError::Multiple(errors)),
        }
    }

    /// Runs DEL over every plugin in reverse. Stops at the first error unless `keep_going`.
    /// The chain gets a DEL budget of its own, also when it rolls back an ADD that ran out of
    /// time: the undo must still run.
    fn del_chain(
        &self,
        net: &Network,
        att: &Attachment,
        prev: Option<&Value>,
        keep_going: bool,
    ) -> Vec<RuntimeError> {
        let op = Operation::Del;
        let deadline = self.deadline(op);
        let mut errors = Vec::new();
        for plugin in net.plugins().iter().rev() {
            if let Err(e) = self.run_without_result(op, net, plugin, att, prev, &deadline) {
                errors.push(e);
                if !keep_going {
                    break;
                }
            }
        }
        errors
    }

    fn run_without_result(
        &self,
        op: Operation,
        net: &Network,
        plugin: &RawObject,
        att: &Attachment,
        prev: Option<&Value>,
        deadline: &Deadline,
    ) -> Result<(), RuntimeError> {
        let path = self.locate(op, plugin)?;
        let stdin = attachment_stdin(op, net, plugin, att, prev)?;
        let opts = self.options(op, plugin, deadline)?;
        exec_without_result(&path, &self.invocation(op, Some(att)), &stdin, &opts)
            .map_err(|e| exec_failure(plugin, op, e))
    }

    // ---- CHECK ----------------------------------------------------------------------------

    /// CHECK over the chain in order with the cached result (libcni's `CheckNetworkList`). Versions
    /// below 0.4.0 are rejected before `disableCheck` is looked at; `disableCheck` succeeds without
    /// running anything. Unlike libcni, a missing cached result is an error (the spec requires a
    /// `prevResult`; libcni then runs CHECK without one).
    pub fn check(&self, net: &Network, att: &Attachment) -> Result<(), RuntimeError> {
        self.cache.entry_name(net.name(), att)?;
        if !net.version.allows_check() {
            return Err(RuntimeError::CheckNotSupported(net.version.to_string()));
        }
        if net.list.disable_check {
            return Ok(());
        }
        let prev = self
            .cache
            .load_result(net.name(), att, net.version)?
            .ok_or_else(|| RuntimeError::NoCachedResult {
                network: net.name().to_string(),
                container_id: att.container_id.clone(),
                ifname: att.ifname.clone(),
            })?;
        let op = Operation::Check;
        let deadline = self.deadline(op);
        for plugin in net.plugins() {
            self.run_without_result(op, net, plugin, att, Some(&prev), &deadline)?;
        }
        Ok(())
    }

    // ---- STATUS ---------------------------------------------------------------------------

    /// STATUS over the chain in order, stopping at the first error, whose code (50/51) is kept
    /// (libcni's `GetStatusNetworkList`). Below 1.1.0 there is no STATUS: success without running
    /// anything.
    pub fn status(&self, net: &Network) -> Result<(), RuntimeError> {
        validate_network_name(net.name()).map_err(RuntimeError::Invalid)?;
        if !net.version.allows_status_and_gc() {
            return Ok(());
        }
        let op = Operation::Status;
        let deadline = self.deadline(op);
        for plugin in net.plugins() {
            let stdin = request::status_request(plugin, net.name(), net.version);
            self.run_network_verb(op, plugin, stdin, &deadline)?;
        }
        Ok(())
    }

    // ---- GC -------------------------------------------------------------------------------

    /// GC (libcni's `GCNetworkList`): DEL every cached attachment of this network that is not in
    /// `valid` (with the parameters cached at ADD), then GC to every plugin with the valid list
    /// (1.1.0 on). Errors are collected, not fatal. `disableGC` does nothing. Holds the network
    /// lock exclusively, so no ADD or DEL of this network runs meanwhile (SPEC.md, Section 3:
    /// Execution of Network Configurations, "Lifecycle & Ordering").
    pub fn gc(&self, net: &Network, valid: &[AttachmentId]) -> Result<(), RuntimeError> {
        validate_network_name(net.name()).map_err(RuntimeError::Invalid)?;
        if net.list.disable_gc {
            return Ok(());
        }
        let _lock = self.gc_lock(net)?;
        // Attachments of other networks are not this GC's to judge.
        let valid: Vec<AttachmentId> = valid
            .iter()
            .filter(|a| a.network == net.name())
            .cloned()
            .collect();
        let stale = self
            .cache
            .attachments(None)
            .into_iter()
            .filter(|e| e.network_name == net.name() && !valid.contains(&e.id()));
        let mut errors: Vec<RuntimeError> = stale
            .filter_map(|entry| self.del_stale_locked(net, &entry).err())
            .collect();
        errors.extend(self.gc_plugins_locked(net, &valid));
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(RuntimeError::Multiple(errors)),
        }
    }

    /// GC for a caller that learns elsewhere which attachments are gone (a node agent asking
    /// its CRI runtime which sandboxes exist). Under the network lock held exclusively, every
    /// cached attachment of `net` that `is_stale` picks gets its chain DEL as its runtime
    /// would run it: with the config, netns, CNI_ARGS and capability args cached at its ADD
    /// (`net` when the cached config is unreadable or of another network). Then every plugin
    /// of `net` gets GC (1.1.0 on) with the valid list: the network's remaining cached
    /// attachments plus what `also_valid` returns, asked after the DELs, right before the
    /// plugins run. An attachment whose DEL failed is not in that list. `disableGC` does
    /// nothing. The picking runs under the lock, so an entry written by an ADD that waited for
    /// it is judged as it is then.
    pub fn gc_picked(
        &self,
        net: &Network,
        mut is_stale: impl FnMut(&CacheEntry) -> bool,
        also_valid: impl FnOnce() -> Vec<AttachmentId>,
    ) -> Result<GcReport, RuntimeError> {
        validate_network_name(net.name()).map_err(RuntimeError::Invalid)?;
        let mut report = GcReport::default();
        if net.list.disable_gc {
            return Ok(report);
        }
        let _lock = self.gc_lock(net)?;
        let mut valid = Vec::new();
        for entry in self.cache.attachments(None) {
            if entry.network_name != net.name() {
                continue;
            }
            if !is_stale(&entry) {
                valid.push(entry.id());
                continue;
            }
            let cached = Network::from_list_bytes(&entry.config)
                .ok()
                .filter(|cached| cached.name() == net.name());
            match self.del_stale_locked(cached.as_ref().unwrap_or(net), &entry) {
                Ok(()) => report.deleted.push(entry),
                Err(e) => report.failed.push((entry, e)),
            }
        }
        valid.extend(also_valid().into_iter().filter(|a| a.network == net.name()));
        valid.sort();
        valid.dedup();
        report.plugin_errors = self.gc_plugins_locked(net, &valid);
        report.plugins_collected = net.version.allows_status_and_gc();
        report.valid = valid;
        Ok(report)
    }

    /// The network lock held exclusively, after removing the cache temp files that killed
    /// writes left: with the lock held no ADD of this network is writing an entry.
    fn gc_lock(&self, net: &Network) -> Result<NetworkLock, RuntimeError> {
        let lock = NetworkLock::exclusive(self.cache_dir(), net.name())?;
        let swept = self.cache.sweep_temps(net.name());
        if swept > 0 {
            log::info!("removed {swept} cache temp file(s) left by killed writes");
        }
        Ok(lock)
    }

    /// The chain DEL of one stale cached attachment with the parameters cached at its ADD.
    fn del_stale_locked(&self, net: &Network, entry: &CacheEntry) -> Result<(), RuntimeError> {
        let att = entry.attachment();
        att.validate(net.name())
            .and_then(|()| self.del_locked(net, &att))
            .map_err(|e| RuntimeError::StaleDelete {
                container_id: entry.container_id.clone(),
                ifname: entry.ifname.clone(),
                source: Box::new(e),
            })
    }

    /// GC to every plugin of the chain with `valid` (nothing below 1.1.0); every failure is
    /// returned.
    fn gc_plugins_locked(&self, net: &Network, valid: &[AttachmentId]) -> Vec<RuntimeError> {
        if !net.version.allows_status_and_gc() {
            return Vec::new();
        }
        let op = Operation::Gc;
        let deadline = self.deadline(op);
        let run = |plugin: &RawObject| {
            let stdin = request::gc_request(plugin, net.name(), net.version, valid);
            self.run_network_verb(op, plugin, stdin, &deadline)
        };
        net.plugins().iter().filter_map(|p| run(p).err()).collect()
    }

    /// Runs a verb of the whole network (STATUS, GC: no attachment) on one plugin with the
    /// request built for it.
    fn run_network_verb(
        &self,
        op: Operation,
        plugin: &RawObject,
        stdin: Result<Vec<u8>, serde_json::Error>,
        deadline: &Deadline,
    ) -> Result<(), RuntimeError> {
        let path = self.locate(op, plugin)?;
        let stdin = stdin.map_err(|e| {
            failure(
                plugin,
                op,
                Stage::Request,
                PluginFailure::Other(e.to_string()),
            )
        })?;
        let opts = self.options(op, plugin, deadline)?;
        exec_without_result(&path, &self.invocation(op, None), &stdin, &opts)
            .map_err(|e| exec_failure(plugin, op, e))
    }

    // ---- VERSION and validation -------------------------------------------------------------

    /// Every plugin's VERSION answer, in chain order.
    pub fn version(&self, net: &Network) -> Vec<PluginVersion> {
        let op = Operation::Version;
        net.plugins()
            .iter()
            .map(|plugin| PluginVersion {
                plugin_type: plugin_type(plugin),
                // Each plugin's VERSION is its own question, with its own budget.
                info: self.locate(op, plugin).and_then(|path| {
                    let opts = self.options(op, plugin, &self.deadline(op))?;
                    get_version_info(&path, &opts).map_err(|e| exec_failure(plugin, op, e))
                }),
            })
            .collect()
    }

    /// The network at the highest version that both the config offers (`cniVersion` ∪
    /// `cniVersions`) and every plugin reports in its VERSION answer (SPEC.md, Section 1, "Version
    /// considerations", allows consulting the plugins; libcni never does). Fails when there is
    /// none.
    pub fn negotiate_version(&self, net: &Network) -> Result<Network, RuntimeError> {
        let mut common: Vec<SpecVersion> = net
            .list
            .cni_versions
            .iter()
            .chain(std::iter::once(&net.list.cni_version))
            .filter_map(|v| SpecVersion::parse(v).ok())
            .filter(|v| v.is_known())
            .collect();
        for (plugin, answer) in net.plugins().iter().zip(self.version(net)) {
            let info = answer.info?;
            let supported: Vec<SpecVersion> = info
                .supported_versions
                .iter()
                .filter_map(|v| SpecVersion::parse(v).ok())
                .collect();
            common.retain(|v| supported.contains(v));
            if common.is_empty() {
                return Err(failure(
                    plugin,
                    Operation::Version,
                    Stage::Compatibility,
                    PluginFailure::Other(format!(
                        "no version offered by network {:?} is supported by plugin {} (supports {:?})",
                        net.name(),
                        answer.plugin_type,
                        info.supported_versions
                    )),
                ));
            }
        }
        let mut out = net.clone();
        if let Some(best) = common.into_iter().max() {
            out.version = best;
        }
        Ok(out)
    }

    /// Checks that every plugin exists and supports the network's version (libcni's
    /// `ValidateNetworkList`); all problems are reported together. Returns the union of declared
    /// capabilities and warnings about keys reserved for the runtime (SPEC.md, Section 1: Network
    /// configuration format).
    pub fn validate(&self, net: &Network) -> Result<ValidationReport, RuntimeError> {
        validate_network_name(net.name()).map_err(RuntimeError::Invalid)?;
        let mut report = ValidationReport::default();
        let mut errors = Vec::new();
        let wanted = net.version.to_string();
        for (plugin, answer) in net.plugins().iter().zip(self.version(net)) {
            match answer.info {
                Ok(info) if info.supports(&wanted) => {}
                Ok(info) => errors.push(failure(
                    plugin,
                    Operation::Validate,
                    Stage::Compatibility,
                    PluginFailure::Other(format!(
                        "plugin {} does not support config version {wanted:?} (supports {:?})",
                        answer.plugin_type, info.supported_versions
                    )),
                )),
                Err(e) => errors.push(e),
            }
            match request::declared_capabilities(plugin) {
                Ok(caps) => report.capabilities.extend(caps),
                Err(e) => errors.push(failure(
                    plugin,
                    Operation::Validate,
                    Stage::Request,
                    PluginFailure::Other(format!("invalid capabilities: {e}")),
                )),
            }
            for key in plugin.keys() {
                if key == "runtimeConfig" || key == "args" || key.starts_with("cni.dev/") {
                    report.warnings.push(format!(
                        "plugin type={:?}: key {key:?} is reserved for the runtime",
                        answer.plugin_type
                    ));
                }
            }
        }
        match errors.len() {
            0 => Ok(report),
            1 => Err(errors.remove(0)),
            _ => Err(RuntimeError::Multiple(errors)),
        }
    }

    // ---- cache access -------------------------------------------------------------------------

    /// Cached attachments, optionally of one container (libcni `GetCachedAttachments`).
    pub fn cached_attachments(&self, container_id: Option<&str>) -> Vec<CacheEntry> {
        self.cache.attachments(container_id)
    }

    /// The cached result of an attachment converted to the network's version.
    pub fn cached_result(
        &self,
        net: &Network,
        att: &Attachment,
    ) -> Result<Option<Value>, RuntimeError> {
        self.cache.load_result(net.name(), att, net.version)
    }
}

/// The result stamped with `version` when it can be rendered there, else left as it is.
fn normalize(result: CniResult, version: SpecVersion) -> CniResult {
    if result.cni_version != version && result.to_value(version).is_ok() {
        result.with_version(version)
    } else {
        result
    }
}

/// The result as JSON in `version`, falling back to its own version.
fn render(result: &CniResult, version: SpecVersion) -> Value {
    result
        .to_value(version)
        .or_else(|_| result.to_value(result.cni_version))
        .unwrap_or(Value::Null)
}

fn plugin_id(plugin: &RawObject) -> PluginId {
    PluginId {
        plugin_type: plugin_type(plugin),
        name: plugin_name(plugin),
    }
}

/// The request config of one plugin for an attachment command (ADD, DEL, CHECK).
fn attachment_stdin(
    op: Operation,
    net: &Network,
    plugin: &RawObject,
    att: &Attachment,
    prev: Option<&Value>,
) -> Result<Vec<u8>, RuntimeError> {
    request::attachment_request(plugin, net.name(), net.version, prev, &att.capability_args)
        .map_err(|e| {
            failure(
                plugin,
                op,
                Stage::Request,
                PluginFailure::Other(e.to_string()),
            )
        })
}

fn failure(plugin: &RawObject, op: Operation, stage: Stage, source: PluginFailure) -> RuntimeError {
    RuntimeError::Plugin {
        plugin: plugin_id(plugin),
        op,
        stage,
        source: Box::new(source),
    }
}

fn exec_failure(plugin: &RawObject, op: Operation, e: InvokeError) -> RuntimeError {
    let stage = match e {
        InvokeError::BadResult { .. } | InvokeError::BadVersionInfo { .. } => Stage::Result,
        _ => Stage::Exec,
    };
    failure(plugin, op, stage, e.into())
}
