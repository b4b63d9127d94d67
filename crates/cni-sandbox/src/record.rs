//! The persistent record of one pod sandbox: everything `stop`, `rm`, recovery and GC need,
//! even after the network's config file is gone (each network keeps the config it was
//! attached with).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use cni_runtime::{Network, RuntimeError};
use cni_types::RawObject;

/// Version of the record format, written into every record.
pub const RECORD_FORMAT: u32 = 1;

/// Where a sandbox is in its lifecycle. A record found in `SettingUp` or `Stopping` with no
/// live process working on it was left by a crash: recovery undoes the first and finishes
/// the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    SettingUp,
    Ready,
    Stopping,
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::SettingUp => "setting-up",
            State::Ready => "ready",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
        }
    }

    /// A state only a running (or killed) verb leaves a record in.
    pub fn is_transient(self) -> bool {
        matches!(self, State::SettingUp | State::Stopping)
    }
}

/// Who made the sandbox's network namespace (and so who removes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetnsOwner {
    /// Created by this crate under `/run/netns`; removed by `rm` and by a failed `run`.
    Sandbox,
    /// Given by the caller; never removed here.
    Caller,
}

/// The Kubernetes identity of the pod (what goes into `CNI_ARGS`), and its labels (what
/// NetworkPolicy selectors match; recorded for the node agent, never passed to plugins).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One network of the sandbox, with the config it is attached with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetworkRecord {
    pub name: String,
    pub ifname: String,
    /// The list bytes as loaded (what the result cache stores too), as text.
    pub config: String,
    /// Every plugin of the chain, including plugins loaded from the network's sub-directory.
    pub plugins: Vec<RawObject>,
    /// True once a DEL of this network succeeded; teardown skips it from then on.
    #[serde(default)]
    pub detached: bool,
}

impl NetworkRecord {
    pub fn of(net: &Network, ifname: &str) -> Self {
        NetworkRecord {
            name: net.name().to_string(),
            ifname: ifname.to_string(),
            config: String::from_utf8_lossy(net.config_bytes()).into_owned(),
            plugins: net.plugins().to_vec(),
            detached: false,
        }
    }

    /// The network as it was when the sandbox was set up.
    pub fn network(&self) -> Result<Network, RuntimeError> {
        let mut net = Network::from_list_bytes(self.config.as_bytes())?;
        net.list.plugins = self.plugins.clone();
        Ok(net)
    }
}

/// What one network's ADD returned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultRecord {
    pub network: String,
    pub ifname: String,
    pub result: Value,
}

/// One sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub format: u32,
    pub id: String,
    pub pod: PodMeta,
    /// The netns path plugins get as `CNI_NETNS` (UTF-8: checked before the record is made).
    pub netns: PathBuf,
    pub netns_owner: NetnsOwner,
    pub state: State,
    /// Set by `rm`: a crash during removal is finished by removing, not only stopping.
    #[serde(default)]
    pub removing: bool,
    /// In attach order (the built-in loopback network first).
    pub networks: Vec<NetworkRecord>,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
    /// The pod's addresses: the primary (first address of `eth0`) first.
    #[serde(default)]
    pub ips: Vec<String>,
    #[serde(default)]
    pub results: Vec<ResultRecord>,
    /// What the last failed teardown reported (empty once it completes).
    #[serde(default)]
    pub errors: Vec<String>,
    /// Seconds since the epoch.
    pub created: u64,
    pub updated: u64,
}

impl SandboxRecord {
    /// Whether a verb was working on the sandbox when the record was written: recovery
    /// finishes or undoes such a record when no live process holds its lock.
    pub fn needs_recovery(&self) -> bool {
        self.state.is_transient() || self.removing
    }

    /// Networks a teardown still has to DEL, in attach order.
    pub fn attached(&self) -> impl DoubleEndedIterator<Item = &NetworkRecord> {
        self.networks.iter().filter(|n| !n.detached)
    }
}

/// Seconds since the epoch (0 on a clock before it).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_comes_back_from_its_record_with_every_plugin() {
        let mut net = Network::from_list_bytes(
            br#"{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","mtu":123456789012345678901}]}"#,
        )
        .unwrap();
        // A plugin from the network's sub-directory is not in the list bytes.
        net.list
            .plugins
            .push(RawObject::parse(br#"{"type":"portmap"}"#).unwrap());
        let rec = NetworkRecord::of(&net, "eth0");
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains("123456789012345678901"), "{text}");
        let back: NetworkRecord = serde_json::from_str(&text).unwrap();
        let again = back.network().unwrap();
        assert_eq!(again.plugin_types(), ["bridge", "portmap"]);
        assert_eq!(again.version, net.version);
        assert_eq!(again.name(), "n");
    }

    #[test]
    fn states_are_kebab_case_and_transient_ones_are_known() {
        assert_eq!(
            serde_json::to_string(&State::SettingUp).unwrap(),
            "\"setting-up\""
        );
        assert!(State::SettingUp.is_transient() && State::Stopping.is_transient());
        assert!(!State::Ready.is_transient() && !State::Stopped.is_transient());
        assert_eq!(State::Stopped.as_str(), "stopped");
    }
}
