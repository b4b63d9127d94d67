//! Repair of cached attachments: which attachments and which plugins of their chains get
//! their nf_tables rules put back after the host's firewall removed them. The rules
//! themselves are the plugins' business (`Plugin::repair` of `cni-plugin`, each plugin's
//! own): for each plugin of the chain that is rcni's, the runtime executes the
//! `rcni-plugins` binary it links to, under that binary's own name, with
//! `CNI_COMMAND` [`RCNI_REPAIR`] (or [`RCNI_REPAIR_LOOK`]), the attachment's CNI variables
//! and the request the plugin got at ADD (the cached network config, the cached result as
//! `prevResult`, the capability args as `runtimeConfig`). A plugin that is not rcni's (Go's)
//! is never executed: it is named in the report as left alone.
//!
//! An attachment whose netns is gone is reported and left alone (GC's business), as is one
//! whose ADD has not finished.

use std::path::{Path, PathBuf};

use serde_json::Value;

use cni_attribution::names::PLUGINS_EXECUTABLE;
use cni_attribution::AttachmentId;
use cni_invoke::{exec_raw, find_in_path, RCNI_REPAIR, RCNI_REPAIR_LOOK};
use cni_types::{CniResult, RawObject, SpecVersion};

use crate::cache::CacheEntry;
use crate::deadline::Deadline;
use crate::error::Operation;
use crate::lock::NetworkLock;
use crate::network::{plugin_type, Network};
use crate::request::attachment_request;
use crate::runtime::Runtime;

/// Whether a repair puts back what is missing or only says what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairMode {
    /// Only report what is missing (`rcni doctor`).
    Look,
    /// Put it back (`rcni repair`, rcni-node).
    Repair,
}

impl RepairMode {
    fn command(self) -> &'static str {
        match self {
            RepairMode::Look => RCNI_REPAIR_LOOK,
            RepairMode::Repair => RCNI_REPAIR,
        }
    }
}

/// What the plugin answers.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    #[serde(default)]
    restored: Vec<String>,
    #[serde(default)]
    owns_no_rules: bool,
}

/// What happened to one plugin of an attachment's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRepair {
    /// rcni's plugin looked; the list says what was missing and is back (empty: nothing was).
    Restored(Vec<String>),
    /// Not an rcni plugin (Go's, or not found): left alone.
    NotRcni(String),
    /// The plugin failed to repair.
    Failed(String),
}

/// One attachment's repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentRepair {
    pub id: AttachmentId,
    pub netns: PathBuf,
    /// Why the attachment was not looked at (its netns is gone, its ADD has not finished,
    /// it was deleted meanwhile), if it was not.
    pub skipped: Option<String>,
    /// In chain order with their types: each rcni plugin that can own rules and each
    /// plugin that is not rcni's.
    pub plugins: Vec<(String, PluginRepair)>,
}

impl AttachmentRepair {
    /// `<network> <container ID> <ifname>`, how reports name the attachment.
    pub fn who(&self) -> String {
        format!(
            "{} {} {}",
            self.id.network, self.id.container_id, self.id.ifname
        )
    }

    /// Whether anything was restored.
    pub fn restored_any(&self) -> bool {
        self.plugins.iter().any(|(_, p)| match p {
            PluginRepair::Restored(list) => !list.is_empty(),
            _ => false,
        })
    }

    /// Whether a plugin failed.
    pub fn failed(&self) -> bool {
        self.plugins
            .iter()
            .any(|(_, p)| matches!(p, PluginRepair::Failed(_)))
    }
}

/// rcni's multi-call binary when the executable at `path` is (a link to) it.
pub fn rcni_plugins_exe(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path)
        .ok()
        .filter(|p| p.file_name().is_some_and(|n| n == PLUGINS_EXECUTABLE))
}

impl Runtime {
    /// Repairs (or with [`RepairMode::Look`] only inspects) every cached attachment, or
    /// those of `network`, in cache order. Each
    /// attachment is repaired holding its network's lock exclusively (as GC does), with its
    /// entry read again under it, so no ADD or DEL of this runtime runs meanwhile and a
    /// deleted attachment gets no rules back.
    pub fn repair(&self, network: Option<&str>, mode: RepairMode) -> Vec<AttachmentRepair> {
        self.cached_attachments(None)
            .into_iter()
            .filter(|e| network.is_none_or(|n| e.network_name == n))
            .map(|e| self.repair_entry(&e, mode))
            .collect()
    }

    fn repair_entry(&self, entry: &CacheEntry, mode: RepairMode) -> AttachmentRepair {
        let mut report = AttachmentRepair {
            id: entry.id(),
            netns: entry.netns.clone(),
            skipped: None,
            plugins: Vec::new(),
        };
        let _lock = match NetworkLock::exclusive(self.cache_dir(), &entry.network_name) {
            Ok(lock) => lock,
            Err(e) => {
                report.plugins = vec![(String::new(), PluginRepair::Failed(e.to_string()))];
                return report;
            }
        };
        let att = entry.attachment();
        let Ok(Some(entry)) = self.cache.load_entry(&entry.network_name, &att) else {
            report.skipped = Some("deleted meanwhile".into());
            return report;
        };
        if entry.netns.as_os_str().is_empty() || !entry.netns.exists() {
            report.skipped = Some(format!("netns {:?} is gone", entry.netns));
            return report;
        }
        if entry.result.as_ref().is_none_or(Value::is_null) {
            report.skipped = Some("its ADD has not finished (no cached result)".into());
            return report;
        }
        let prepared = cached_network(&entry).and_then(|net| {
            let prev = cached_prev_result(&entry, net.version)?;
            Ok((net, prev))
        });
        let (net, prev) = match prepared {
            Ok(p) => p,
            Err(e) => {
                report.plugins = vec![(String::new(), PluginRepair::Failed(e))];
                return report;
            }
        };
        let mut plugins = Vec::new();
        let deadline = self.deadline(Operation::Check);
        for plugin in net.plugins() {
            let kind = plugin_type(plugin);
            let exe = match self.rcni_exe(&kind) {
                Ok(exe) => exe,
                Err(path) => {
                    plugins.push((kind, PluginRepair::NotRcni(path)));
                    continue;
                }
            };
            let answer = attachment_request(
                plugin,
                net.name(),
                net.version,
                Some(&prev),
                &entry.capability_args,
            )
            .map_err(|e| e.to_string())
            .and_then(|stdin| self.ask(&exe, plugin, &entry, &stdin, mode, &deadline));
            match answer {
                Ok(a) if a.owns_no_rules => {}
                Ok(a) => plugins.push((kind, PluginRepair::Restored(a.restored))),
                Err(e) => plugins.push((kind, PluginRepair::Failed(e))),
            }
        }
        report.plugins = plugins;
        report
    }

    /// rcni's executable when the plugin `kind` found on the search path links to it; else
    /// where that plugin is (or that it is not found).
    fn rcni_exe(&self, kind: &str) -> Result<PathBuf, String> {
        match find_in_path(kind, &self.plugin_paths) {
            Ok(path) => rcni_plugins_exe(&path).ok_or_else(|| path.display().to_string()),
            Err(_) => Err(format!("{kind} not found in {}", self.search_path())),
        }
    }

    /// Runs one plugin's repair: its answer, or the failure as text.
    fn ask(
        &self,
        exe: &Path,
        plugin: &RawObject,
        entry: &CacheEntry,
        stdin: &[u8],
        mode: RepairMode,
        deadline: &Deadline,
    ) -> Result<Answer, String> {
        let mut inv = self.invocation(Operation::Check, Some(&entry.attachment()));
        inv.command = mode.command().to_string();
        let opts = self
            .options(Operation::Check, plugin, deadline)
            .map_err(|e| e.to_string())?;
        let out = exec_raw(exe, &inv, stdin, &opts).map_err(|e| e.to_string())?;
        serde_json::from_slice(&out).map_err(|e| format!("unreadable answer: {e}"))
    }

    fn search_path(&self) -> String {
        let dirs: Vec<String> = self
            .plugin_paths
            .iter()
            .map(|p: &PathBuf| p.display().to_string())
            .collect();
        dirs.join(":")
    }
}

/// The network config the attachment was added with.
fn cached_network(entry: &CacheEntry) -> Result<Network, String> {
    Network::from_list_bytes(&entry.config)
        .or_else(|_| Network::from_single_plugin_bytes(&entry.config))
        .map_err(|e| format!("cached network config: {e}"))
}

/// The cached result in the network's version.
fn cached_prev_result(entry: &CacheEntry, version: SpecVersion) -> Result<Value, String> {
    let raw = entry.result.as_ref().unwrap_or(&Value::Null);
    CniResult::parse(raw, SpecVersion::V0_1_0)
        .and_then(|r| r.to_value(version))
        .map_err(|e| format!("cached result: {e}"))
}
