//! What the WireGuard backend tells about its tunnels: per device its public key, port and
//! process, per peer the node it belongs to, its endpoint, last handshake and bytes each way.
//! It is read from the devices at every resync, kept in the agent's health state (served as
//! Prometheus series on `/metrics`) and written to `<state-dir>/wireguard/status.json` for
//! `rcni doctor` and operators. Only public keys appear: private and preshared keys are never
//! in it.

use std::fmt::Write as _;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::prometheus::label;

/// The tunnels of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TunnelStatus {
    /// `kernel` or `userspace`.
    pub implementation: String,
    /// When the devices were read (Unix seconds).
    pub updated_unix: u64,
    /// The devices.
    pub devices: Vec<DeviceStatus>,
}

/// One device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceStatus {
    /// Its name.
    pub name: String,
    /// This node's public key.
    pub public_key: String,
    /// Its UDP port.
    pub listen_port: u16,
    /// Its wireguard-go, for the userspace implementation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessStatus>,
    /// Its peers.
    pub peers: Vec<PeerStatus>,
}

/// A supervised process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: u32,
    /// Times the agent found it dead and started it again.
    pub restarts: u64,
}

/// One peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerStatus {
    /// Its public key.
    pub public_key: String,
    /// The node whose lease published it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Where its packets go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Its subnets.
    pub allowed_ips: Vec<String>,
    /// When its last handshake completed (Unix seconds); none before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handshake_unix: Option<u64>,
    /// Bytes received from it.
    pub rx_bytes: u64,
    /// Bytes sent to it.
    pub tx_bytes: u64,
}

impl PeerStatus {
    /// The status of `peer`, which belongs to `node`.
    pub fn of(peer: &cni_linux::wireguard::Peer, node: Option<String>) -> Self {
        PeerStatus {
            public_key: peer.config.public_key.to_base64(),
            node,
            endpoint: peer.config.endpoint.map(|e| e.to_string()),
            allowed_ips: peer
                .config
                .allowed_ips
                .iter()
                .map(|n| n.to_string())
                .collect(),
            last_handshake_unix: peer
                .last_handshake
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            rx_bytes: peer.rx_bytes,
            tx_bytes: peer.tx_bytes,
        }
    }
}

/// The status file's path under the agent's state directory.
pub use cni_attribution::names::rcni_node::WIREGUARD_STATUS as STATUS_FILE;

impl TunnelStatus {
    /// Writes the status to `path` whole (a reader never sees a torn file; informational, so
    /// not synced).
    pub fn write(&self, path: &Path) -> Result<(), cni_persist::PersistError> {
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        cni_persist::replace(path, &json, cni_persist::Durability::Rename)
    }

    /// Prometheus series: one info series per device, its process's restarts, and per peer
    /// the last handshake (0 before the first) and bytes each way.
    pub fn metrics(&self) -> String {
        let mut out = String::from(
            "# HELP rcni_node_wireguard_info The node's WireGuard devices (value 1).\n\
             # TYPE rcni_node_wireguard_info gauge\n",
        );
        for d in &self.devices {
            let _ = writeln!(
                out,
                "rcni_node_wireguard_info{{implementation=\"{}\",device=\"{}\",public_key=\"{}\",listen_port=\"{}\"}} 1",
                label(&self.implementation),
                label(&d.name),
                label(&d.public_key),
                d.listen_port
            );
        }
        out += "# HELP rcni_node_wireguard_process_restarts_total Times a dead wireguard-go was started again.\n\
                # TYPE rcni_node_wireguard_process_restarts_total counter\n";
        for d in &self.devices {
            if let Some(p) = &d.process {
                let _ = writeln!(
                    out,
                    "rcni_node_wireguard_process_restarts_total{{device=\"{}\"}} {}",
                    label(&d.name),
                    p.restarts
                );
            }
        }
        type Pick = fn(&PeerStatus) -> u64;
        let series: [(&str, &str, &str, Pick); 3] = [
            (
                "rcni_node_wireguard_peer_last_handshake_timestamp_seconds",
                "gauge",
                "Unix time of the peer's last handshake (0: none yet).",
                |p| p.last_handshake_unix.unwrap_or(0),
            ),
            (
                "rcni_node_wireguard_peer_receive_bytes_total",
                "counter",
                "Bytes received from the peer.",
                |p| p.rx_bytes,
            ),
            (
                "rcni_node_wireguard_peer_transmit_bytes_total",
                "counter",
                "Bytes sent to the peer.",
                |p| p.tx_bytes,
            ),
        ];
        for (name, kind, help, pick) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for d in &self.devices {
                for p in &d.peers {
                    let _ = writeln!(
                        out,
                        "{name}{{device=\"{}\",public_key=\"{}\",node=\"{}\"}} {}",
                        label(&d.name),
                        label(&p.public_key),
                        label(p.node.as_deref().unwrap_or("")),
                        pick(p)
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_peer_has_its_handshake_and_bytes_in_the_metrics() {
        let status = TunnelStatus {
            implementation: "userspace".into(),
            updated_unix: 5,
            devices: vec![DeviceStatus {
                name: "rcni-wg".into(),
                public_key: "AAA=".into(),
                listen_port: 51820,
                process: Some(ProcessStatus {
                    pid: 42,
                    restarts: 1,
                }),
                peers: vec![
                    PeerStatus {
                        public_key: "BBB=".into(),
                        node: Some("node2".into()),
                        last_handshake_unix: Some(1_700_000_000),
                        rx_bytes: 10,
                        tx_bytes: 20,
                        ..PeerStatus::default()
                    },
                    PeerStatus {
                        public_key: "CCC=".into(),
                        ..PeerStatus::default()
                    },
                ],
            }],
        };
        let m = status.metrics();
        for line in [
            "rcni_node_wireguard_info{implementation=\"userspace\",device=\"rcni-wg\",public_key=\"AAA=\",listen_port=\"51820\"} 1",
            "rcni_node_wireguard_process_restarts_total{device=\"rcni-wg\"} 1",
            "rcni_node_wireguard_peer_last_handshake_timestamp_seconds{device=\"rcni-wg\",public_key=\"BBB=\",node=\"node2\"} 1700000000",
            "rcni_node_wireguard_peer_last_handshake_timestamp_seconds{device=\"rcni-wg\",public_key=\"CCC=\",node=\"\"} 0",
            "rcni_node_wireguard_peer_receive_bytes_total{device=\"rcni-wg\",public_key=\"BBB=\",node=\"node2\"} 10",
            "rcni_node_wireguard_peer_transmit_bytes_total{device=\"rcni-wg\",public_key=\"BBB=\",node=\"node2\"} 20",
        ] {
            assert!(m.lines().any(|l| l == line), "{line} missing from\n{m}");
        }
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json["devices"][0]["peers"][0]["lastHandshakeUnix"],
            1_700_000_000
        );
        assert_eq!(json["devices"][0]["process"]["pid"], 42);
    }
}
