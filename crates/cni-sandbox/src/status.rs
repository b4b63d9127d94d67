//! PodSandboxStatus: built from the record alone (no plugin runs), so it cannot fail; an
//! unknown sandbox has an empty network status.

use std::path::PathBuf;

use serde::Serialize;

use cni_runtime::SandboxResult;

use crate::record::{PodMeta, SandboxRecord, State};

/// One network of the sandbox as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkStatus {
    pub name: String,
    pub ifname: String,
    /// False once its DEL succeeded.
    pub attached: bool,
}

/// The network status of one sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    pub id: String,
    /// `None` for a sandbox this node has no record of.
    pub state: Option<State>,
    pub pod: PodMeta,
    pub netns: PathBuf,
    /// The primary address first (an IPv4 address of `eth0` when there is one).
    pub ips: Vec<String>,
    pub networks: Vec<NetworkStatus>,
    /// What the last incomplete teardown reported.
    pub errors: Vec<String>,
}

impl SandboxStatus {
    pub fn unknown(id: &str) -> Self {
        SandboxStatus {
            id: id.to_string(),
            state: None,
            pod: PodMeta::default(),
            netns: PathBuf::new(),
            ips: Vec::new(),
            networks: Vec::new(),
            errors: Vec::new(),
        }
    }

    pub fn of(rec: &SandboxRecord) -> Self {
        SandboxStatus {
            id: rec.id.clone(),
            state: Some(rec.state),
            pod: rec.pod.clone(),
            netns: rec.netns.clone(),
            // Addresses are only the sandbox's while it is ready.
            ips: if rec.state == State::Ready {
                rec.ips.clone()
            } else {
                Vec::new()
            },
            networks: rec
                .networks
                .iter()
                .map(|n| NetworkStatus {
                    name: n.name.clone(),
                    ifname: n.ifname.clone(),
                    attached: !n.detached,
                })
                .collect(),
            errors: rec.errors.clone(),
        }
    }

    pub fn state_name(&self) -> &'static str {
        self.state.map_or("unknown", State::as_str)
    }
}

/// The pod's addresses from the merged result: `eth0`'s first (IPv4 before IPv6, as
/// containerd picks the primary), then every other interface but `lo`.
pub fn pod_ips(result: &SandboxResult) -> Vec<String> {
    let mut eth0: Vec<_> = result.ips_of("eth0");
    eth0.sort_by_key(|ip| !ip.is_ipv4());
    let others = result
        .interfaces
        .iter()
        .filter(|(name, _)| *name != "eth0" && *name != "lo")
        .flat_map(|(_, c)| c.ip_configs.iter());
    eth0.into_iter()
        .chain(others)
        .map(|ip| ip.address.addr().to_string())
        .collect()
}
