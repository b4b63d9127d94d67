//! The attachments whose nf_tables rules are missing (another firewall flushed or reloaded
//! the ruleset): each rcni plugin of the cached chain compares the kernel with what its ADD
//! made, changing nothing (`cni_runtime::repair` in look-only mode). `rcni repair` puts them
//! back.

use cni_runtime::repair::{AttachmentRepair, PluginRepair, RepairMode};
use cni_runtime::Runtime;

/// One attachment with rules missing, or whose rules could not be looked at.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MissingRules {
    pub attachment: String,
    pub missing: Vec<String>,
}

/// Every cached attachment (of a live netns) with missing rules.
pub fn audit(rt: &Runtime) -> Vec<MissingRules> {
    rt.repair(None, RepairMode::Look)
        .iter()
        .filter_map(summary)
        .collect()
}

fn summary(r: &AttachmentRepair) -> Option<MissingRules> {
    let missing: Vec<String> = r
        .plugins
        .iter()
        .flat_map(|(kind, p)| match p {
            PluginRepair::Restored(items) => items.iter().map(|i| format!("{kind}: {i}")).collect(),
            PluginRepair::Failed(e) => vec![format!("{kind}: cannot tell: {e}")],
            PluginRepair::NotRcni(_) => Vec::new(),
        })
        .collect();
    (!missing.is_empty()).then(|| MissingRules {
        attachment: r.who(),
        missing,
    })
}

/// The report section.
pub fn print(list: &[MissingRules]) {
    println!("missing rules: {} attachment(s)", list.len());
    for m in list {
        println!("  {}", m.attachment);
        for item in &m.missing {
            println!("      {item}");
        }
    }
    if !list.is_empty() {
        println!("  put them back: rcni repair");
    }
}
