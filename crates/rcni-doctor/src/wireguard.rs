//! rcni-node's WireGuard tunnels on this node (its `wireguard` backend): whether every peer
//! has shaken hands recently, naming the ones that have not. Read from the devices
//! themselves, the kernel's over generic netlink and wireguard-go's over its socket, not from
//! the agent (which may be what is wrong); the agent's status file only says which node each
//! public key belongs to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cni_attribution::names::rcni_node::{WIREGUARD_DEVICE, WIREGUARD_DEVICE_V6, WIREGUARD_STATUS};
use cni_linux::wireguard::genl::{Genl, KernelDevice};
use cni_linux::wireguard::uapi::{socket_path, UserspaceDevice};
use cni_linux::wireguard::{Device, DeviceControl};
use cni_linux::Handle;
use cni_runtime::Network;
use cni_types::node_agent;
use serde::Serialize;

/// A handshake older than this is not recent: WireGuard drops a session this old
/// (`REJECT_AFTER_TIME`), and peers that exchange traffic shake hands every 2 minutes.
pub const RECENT: Duration = Duration::from_secs(180);

/// The node's WireGuard devices.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tunnels {
    pub devices: Vec<DeviceReport>,
}

/// One device.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceReport {
    pub name: String,
    /// `kernel` or `userspace`.
    pub implementation: &'static str,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub peers: Vec<PeerReport>,
}

/// One peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerReport {
    pub public_key: String,
    /// The node whose lease published the key (from the agent's status file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Seconds since the last handshake; none before the first.
    pub last_handshake_seconds_ago: Option<u64>,
    /// The last handshake is younger than [`RECENT`].
    pub recent: bool,
}

impl PeerReport {
    fn name(&self) -> String {
        match &self.node {
            Some(node) => format!("{node} ({})", self.public_key),
            None => self.public_key.clone(),
        }
    }
}

impl Tunnels {
    /// Every device read and every peer with a recent handshake.
    pub fn is_clean(&self) -> bool {
        self.devices
            .iter()
            .all(|d| d.error.is_none() && d.peers.iter().all(|p| p.recent))
    }
}

/// The peers of `device` judged at `now`, named with `nodes` (public key → node).
pub fn judge(device: &Device, now: SystemTime, nodes: &HashMap<String, String>) -> Vec<PeerReport> {
    device
        .peers
        .iter()
        .map(|p| {
            let key = p.config.public_key.to_base64();
            let age = p
                .last_handshake
                .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO));
            PeerReport {
                node: nodes.get(&key).cloned(),
                public_key: key,
                endpoint: p.config.endpoint.map(|e| e.to_string()),
                last_handshake_seconds_ago: age.map(|a| a.as_secs()),
                recent: age.is_some_and(|a| a < RECENT),
            }
        })
        .collect()
}

/// Public key → node, from the status file of each agent a network's plugins name.
fn node_names(networks: &[Network]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let status_files = networks
        .iter()
        .flat_map(|n| n.plugins())
        .filter_map(|p| p.decode::<String>(node_agent::KEY).ok().flatten())
        .filter_map(|s| Some(PathBuf::from(s).parent()?.join(WIREGUARD_STATUS)));
    for file in status_files {
        let Ok(text) = std::fs::read(&file) else {
            continue;
        };
        let Ok(status) = serde_json::from_slice::<serde_json::Value>(&text) else {
            continue;
        };
        for device in status["devices"].as_array().into_iter().flatten() {
            for peer in device["peers"].as_array().into_iter().flatten() {
                if let (Some(key), Some(node)) = (peer["publicKey"].as_str(), peer["node"].as_str())
                {
                    out.insert(key.to_string(), node.to_string());
                }
            }
        }
    }
    out
}

/// Reads the device `name` (index `index`, link kind `kind`) through the interface of the
/// implementation that runs it.
fn read(name: &str, index: u32, kind: Option<&str>) -> (&'static str, Result<Device, String>) {
    if kind == Some("wireguard") {
        let device = Genl::open()
            .and_then(|genl| KernelDevice::new(genl, index).read())
            .map_err(|e| e.to_string());
        return ("kernel", device);
    }
    let socket = socket_path(name);
    let device = UserspaceDevice::new(&socket).read().map_err(|e| {
        format!("{e} (is its wireguard-go running? rcni-node starts it again within a second)")
    });
    ("userspace", device)
}

/// rcni-node's WireGuard devices in this network namespace (none on a node of another
/// backend), their peers judged now; the node behind each key from the agents the configs
/// in `conf_dir` name.
pub fn audit(conf_dir: &Path) -> Tunnels {
    let mut tunnels = Tunnels::default();
    let Ok(mut nl) = Handle::new() else {
        return tunnels;
    };
    let networks = cni_runtime::discover(conf_dir)
        .map(|found| found.networks)
        .unwrap_or_default();
    let nodes = node_names(&networks);
    for name in [WIREGUARD_DEVICE, WIREGUARD_DEVICE_V6] {
        let Ok(link) = nl.link_by_name(name) else {
            continue;
        };
        let (implementation, device) = read(name, link.index, link.kind.as_deref());
        let (error, peers) = match device {
            Ok(d) => (None, judge(&d, SystemTime::now(), &nodes)),
            Err(e) => (Some(e), Vec::new()),
        };
        tunnels.devices.push(DeviceReport {
            name: name.to_string(),
            implementation,
            error,
            peers,
        });
    }
    tunnels
}

/// The report, for a node with WireGuard devices.
pub fn print(tunnels: &Tunnels) {
    for d in &tunnels.devices {
        let head = format!("wireguard {} ({})", d.name, d.implementation);
        if let Some(e) = &d.error {
            println!("{head}: cannot be read: {e}");
            continue;
        }
        let stale: Vec<&PeerReport> = d.peers.iter().filter(|p| !p.recent).collect();
        if stale.is_empty() {
            println!(
                "{head}: {} peer(s), every one with a handshake in the last {} s",
                d.peers.len(),
                RECENT.as_secs()
            );
            continue;
        }
        println!(
            "{head}: {} peer(s), {} without a handshake in the last {} s",
            d.peers.len(),
            stale.len(),
            RECENT.as_secs()
        );
        for p in stale {
            let when = match p.last_handshake_seconds_ago {
                Some(s) => format!("last handshake {s} s ago"),
                None => "no handshake yet".to_string(),
            };
            let endpoint = p.endpoint.as_deref().unwrap_or("no endpoint");
            println!("  {}: {when} (endpoint {endpoint})", p.name());
        }
        println!(
            "  a peer this node exchanged no traffic with has none (PersistentKeepaliveInterval \
             keeps them current); otherwise check that the peer's agent runs and that UDP to \
             its endpoint passes"
        );
    }
}

#[cfg(test)]
mod tests {
    use cni_linux::wireguard::{Peer, PeerConfig, PublicKey};

    use super::*;

    fn peer(b: u8, handshake: Option<u64>) -> Peer {
        Peer {
            config: PeerConfig {
                public_key: PublicKey([b; 32]),
                preshared_key: None,
                endpoint: Some("198.18.0.12:51820".parse().unwrap()),
                persistent_keepalive: 0,
                allowed_ips: Vec::new(),
            },
            last_handshake: handshake.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
            rx_bytes: 0,
            tx_bytes: 0,
        }
    }

    #[test]
    fn peers_without_a_handshake_in_180_s_are_not_recent_and_named_by_node() {
        let device = Device {
            peers: vec![peer(1, Some(1_000)), peer(2, Some(800)), peer(3, None)],
            ..Device::default()
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_100);
        let nodes = HashMap::from([(PublicKey([2; 32]).to_base64(), "node3".to_string())]);
        let got = judge(&device, now, &nodes);
        assert_eq!(
            got.iter()
                .map(|p| (p.recent, p.last_handshake_seconds_ago))
                .collect::<Vec<_>>(),
            [(true, Some(100)), (false, Some(300)), (false, None)]
        );
        assert_eq!(got[1].name(), format!("node3 ({})", PublicKey([2; 32])));
        assert_eq!(got[1].endpoint.as_deref(), Some("198.18.0.12:51820"));
        let tunnels = Tunnels {
            devices: vec![DeviceReport {
                name: "rcni-wg".into(),
                implementation: "userspace",
                error: None,
                peers: got,
            }],
        };
        assert!(!tunnels.is_clean());
        assert!(Tunnels::default().is_clean());
    }
}
