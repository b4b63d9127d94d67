//! rcni's repair command: a plugin puts back the nf_tables rules its ADD made for an
//! attachment after something else on the host removed them (`nft flush ruleset`,
//! `iptables -F`, a firewalld reload), or with [`RepairMode::Look`] only says which are
//! missing. It is a capability of the [`Plugin`](crate::Plugin) trait
//! ([`Plugin::repair`](crate::Plugin::repair)), dispatched by the runner from `CNI_COMMAND`
//! (`cni_invoke::RCNI_REPAIR`, `cni_invoke::RCNI_REPAIR_LOOK`) like the spec's commands; a
//! plugin that makes no rules keeps the default answer, [`RepairAnswer::OwnsNoRules`].
//!
//! The request is the one the plugin got at ADD (config, the cached result as `prevResult`,
//! container ID, ifname, CNI_ARGS). A repair runs the rule-installing part of the plugin's
//! own ADD for what is missing only, so repeating it changes nothing; links, addresses,
//! routes, leases and sysctls are never touched.

use serde_json::json;

use cni_types::pretty_json;

/// Appended to CHECK errors about missing rules: the command that puts them back.
pub const REPAIR_HINT: &str = "`rcni repair` puts the attachment's rules back";

/// Whether a repair puts back what is missing or only says what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepairMode {
    /// Only report what is missing (`CNI_COMMAND=RCNI_REPAIR_LOOK`).
    Look,
    /// Put it back (`CNI_COMMAND=RCNI_REPAIR`).
    Repair,
}

/// A plugin's answer to a repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairAnswer {
    /// The plugin makes no nf_tables rules (or none for this config).
    OwnsNoRules,
    /// What was missing and, unless only looking, is back now; empty when nothing was.
    Restored(Vec<String>),
}

impl RepairAnswer {
    /// The answer on stdout: `{"restored": [...]}` or `{"ownsNoRules": true}`.
    pub fn to_json(&self) -> String {
        match self {
            RepairAnswer::OwnsNoRules => pretty_json(&json!({ "ownsNoRules": true })),
            RepairAnswer::Restored(list) => pretty_json(&json!({ "restored": list })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The wire form the runtime's repair reads (`cni_runtime::repair`).
    #[test]
    fn answers_on_the_wire() {
        let v: serde_json::Value =
            serde_json::from_str(&RepairAnswer::OwnsNoRules.to_json()).unwrap();
        assert_eq!(v, json!({"ownsNoRules": true}));
        let v: serde_json::Value =
            serde_json::from_str(&RepairAnswer::Restored(vec!["ipMasq: x".into()]).to_json())
                .unwrap();
        assert_eq!(v, json!({"restored": ["ipMasq: x"]}));
    }
}
