//! Repair of cached attachments: which attachments and which plugins of their chains get
//! their nf_tables rules put back after the host's firewall removed them. The rules
//! themselves are the plugins' business: the runtime hands each rcni plugin of the chain the
//! request it got at ADD (the cached network config, the cached result as `prevResult`, the
//! capability args as `runtimeConfig`, CNI_ARGS) through a [`Repairer`] running in this
//! process (the host namespace), and never executes a plugin that is not rcni's.
//!
//! An attachment whose netns is gone is reported and left alone (GC's business), as is one
//! whose ADD has not finished.

use std::path::{Path, PathBuf};

use serde_json::Value;

use cni_invoke::find_in_path;
use cni_types::{CniError, CniResult, SpecVersion};

use crate::attachment::Attachment;
use crate::cache::CacheEntry;
use crate::lock::NetworkLock;
use crate::network::{plugin_type, Network};
use crate::request::attachment_request;
use crate::runtime::Runtime;

/// The executable every rcni plugin name links to (`rcni-plugins install`).
pub const RCNI_PLUGINS_EXE: &str = "rcni-plugins";

/// Repairs one plugin's rules: (plugin type, its request config, the attachment) to
/// `Ok(None)` when the plugin owns no rules, `Ok(Some(what was restored))` otherwise.
pub type Repairer<'a> =
    dyn Fn(&str, &[u8], &Attachment) -> Result<Option<Vec<String>>, CniError> + 'a;

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
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// Why the attachment was not looked at (its netns is gone, its ADD has not finished,
    /// it was deleted meanwhile), if it was not.
    pub skipped: Option<String>,
    /// In chain order with their types: each rcni plugin that can own rules and each
    /// plugin that is not rcni's.
    pub plugins: Vec<(String, PluginRepair)>,
}

impl AttachmentRepair {
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

/// Whether the executable at `path` is rcni's multi-call binary (the plugin name a link to it).
pub fn is_rcni_plugin(path: &Path) -> bool {
    std::fs::canonicalize(path)
        .ok()
        .and_then(|p| p.file_name().map(|n| n == RCNI_PLUGINS_EXE))
        .unwrap_or(false)
}

impl Runtime {
    /// Repairs every cached attachment, or those of `network`, in cache order. `owns_rules`
    /// says which rcni plugin types can own rules (the others are not asked). Each
    /// attachment is repaired holding its network's lock exclusively (as GC does), with its
    /// entry read again under it, so no ADD or DEL of this runtime runs meanwhile and a
    /// deleted attachment gets no rules back.
    pub fn repair(
        &self,
        network: Option<&str>,
        owns_rules: &dyn Fn(&str) -> bool,
        repairer: &Repairer<'_>,
    ) -> Vec<AttachmentRepair> {
        self.cached_attachments(None)
            .into_iter()
            .filter(|e| network.is_none_or(|n| e.network_name == n))
            .map(|e| self.repair_entry(&e, owns_rules, repairer))
            .collect()
    }

    fn repair_entry(
        &self,
        entry: &CacheEntry,
        owns_rules: &dyn Fn(&str) -> bool,
        repairer: &Repairer<'_>,
    ) -> AttachmentRepair {
        let mut report = AttachmentRepair {
            network: entry.network_name.clone(),
            container_id: entry.container_id.clone(),
            ifname: entry.ifname.clone(),
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
        if entry.netns.is_empty() || !Path::new(&entry.netns).exists() {
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
        for plugin in net.plugins() {
            let kind = plugin_type(plugin);
            let outcome = match self.rcni_path(&kind) {
                Err(path) => PluginRepair::NotRcni(path),
                Ok(()) if !owns_rules(&kind) => continue,
                Ok(()) => attachment_request(
                    plugin,
                    net.name(),
                    net.version,
                    Some(&prev),
                    &att.capability_args,
                )
                .map_err(|e| e.to_string())
                .and_then(|stdin| repairer(&kind, &stdin, &att).map_err(|e| e.msg))
                .map_or_else(PluginRepair::Failed, |r| {
                    PluginRepair::Restored(r.unwrap_or_default())
                }),
            };
            plugins.push((kind, outcome));
        }
        report.plugins = plugins;
        report
    }

    /// `Ok` when the plugin `kind` found on the search path is rcni's; else where it is (or
    /// that it is not found).
    fn rcni_path(&self, kind: &str) -> Result<(), String> {
        match find_in_path(kind, &self.plugin_paths) {
            Ok(path) if is_rcni_plugin(&path) => Ok(()),
            Ok(path) => Err(path.display().to_string()),
            Err(_) => Err(format!("{kind} not found in {}", self.search_path())),
        }
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
