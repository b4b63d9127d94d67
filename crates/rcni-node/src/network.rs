//! The network config every node reads from `<prefix>/config`, in flannel's JSON shape, and the
//! subnet arithmetic that follows from it (which node subnets exist, which are free).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

/// The default UDP port of VXLAN (the Linux default, which flannel uses too).
pub const DEFAULT_VXLAN_PORT: u16 = 8472;
/// The default VXLAN network identifier.
pub const DEFAULT_VNI: u32 = 1;

/// Why a network config is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON of the expected shape.
    #[error("network config is not valid JSON of flannel's shape: {0}")]
    Json(#[from] serde_json::Error),
    /// A value is out of range or inconsistent.
    #[error("network config: {0}")]
    Invalid(String),
}

/// Which data plane connects the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A route per remote node through its public IP (nodes share an L2 segment).
    HostGw,
    /// A VXLAN device with a neighbour, an FDB entry and a route per remote node.
    Vxlan {
        /// VXLAN network identifier.
        vni: u32,
        /// UDP destination port.
        port: u16,
    },
}

impl BackendKind {
    /// The name stored in leases (`BackendType`) and used in the config (`Backend.Type`).
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::HostGw => "host-gw",
            BackendKind::Vxlan { .. } => "vxlan",
        }
    }

    /// Bytes the encapsulation takes from the underlay MTU (outer IPv4 + UDP + VXLAN + inner
    /// Ethernet for VXLAN).
    pub fn mtu_overhead(&self) -> u32 {
        match self {
            BackendKind::HostGw => 0,
            BackendKind::Vxlan { .. } => 50,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct RawBackend {
    #[serde(rename = "Type")]
    kind: Option<String>,
    #[serde(rename = "VNI")]
    vni: Option<u32>,
    port: Option<u16>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    network: Option<Ipv4Net>,
    #[serde(rename = "IPv6Network")]
    ipv6_network: Option<String>,
    subnet_len: Option<u8>,
    subnet_min: Option<Ipv4Addr>,
    subnet_max: Option<Ipv4Addr>,
    backend: Option<RawBackend>,
}

/// The validated network config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// The cluster network every node subnet is carved from.
    pub network: Ipv4Net,
    /// Prefix length of a node subnet.
    pub subnet_len: u8,
    /// Lowest node subnet handed out.
    pub subnet_min: Ipv4Addr,
    /// Highest node subnet handed out.
    pub subnet_max: Ipv4Addr,
    /// The data plane.
    pub backend: BackendKind,
}

impl NetworkConfig {
    /// Parses and validates flannel's JSON. Defaults follow flannel: `SubnetLen` 24 (network
    /// length + 4, at most 30, for a network of /24 or longer), `SubnetMin` the second subnet,
    /// `SubnetMax` the last one. `Backend.Type` is required: flannel's default (udp) is not an
    /// rcni backend.
    pub fn parse(json: &[u8]) -> Result<Self, ConfigError> {
        let raw: RawConfig = serde_json::from_slice(json)?;
        if raw.ipv6_network.is_some() {
            return Err(ConfigError::Invalid(
                "IPv6Network is not supported by rcni-node yet (IPv4 node subnets only)".into(),
            ));
        }
        let network = raw
            .network
            .ok_or_else(|| ConfigError::Invalid("Network is required".into()))?
            .trunc();
        let subnet_len = raw.subnet_len.unwrap_or(if network.prefix_len() < 24 {
            24
        } else {
            (network.prefix_len() + 4).min(30)
        });
        if subnet_len <= network.prefix_len() || subnet_len > 30 {
            return Err(ConfigError::Invalid(format!(
                "SubnetLen {subnet_len} must be longer than the network's /{} and at most 30",
                network.prefix_len()
            )));
        }
        let step = subnet_step(subnet_len);
        let first = u32::from(network.network());
        let last = u32::from(network.broadcast()) - (step - 1);
        let subnet_min = raw
            .subnet_min
            .unwrap_or_else(|| Ipv4Addr::from(first + step));
        let subnet_max = raw.subnet_max.unwrap_or_else(|| Ipv4Addr::from(last));
        for (name, value) in [("SubnetMin", subnet_min), ("SubnetMax", subnet_max)] {
            if !network.contains(&value) || u32::from(value) % step != 0 {
                return Err(ConfigError::Invalid(format!(
                    "{name} {value} is not a /{subnet_len} subnet of {network}"
                )));
            }
        }
        if subnet_min > subnet_max {
            return Err(ConfigError::Invalid(format!(
                "SubnetMin {subnet_min} is above SubnetMax {subnet_max}"
            )));
        }
        let backend = raw
            .backend
            .ok_or_else(|| ConfigError::Invalid("Backend is required".into()))?;
        let backend = match backend.kind.as_deref() {
            Some("host-gw") => {
                if backend.vni.is_some() || backend.port.is_some() {
                    return Err(ConfigError::Invalid(
                        "VNI and Port are VXLAN settings, not host-gw ones".into(),
                    ));
                }
                BackendKind::HostGw
            }
            Some("vxlan") => {
                let vni = backend.vni.unwrap_or(DEFAULT_VNI);
                if vni > cni_linux::rtnl::vxlan::MAX_VNI {
                    return Err(ConfigError::Invalid(format!("VNI {vni} is above 2^24-1")));
                }
                BackendKind::Vxlan {
                    vni,
                    port: backend.port.unwrap_or(DEFAULT_VXLAN_PORT),
                }
            }
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "Backend.Type {other:?} is not supported (host-gw or vxlan)"
                )))
            }
            None => return Err(ConfigError::Invalid("Backend.Type is required".into())),
        };
        Ok(NetworkConfig {
            network,
            subnet_len,
            subnet_min,
            subnet_max,
            backend,
        })
    }

    /// Whether `subnet` is a node subnet this config can hand out.
    pub fn is_valid_subnet(&self, subnet: Ipv4Net) -> bool {
        subnet.prefix_len() == self.subnet_len
            && subnet.network() == subnet.addr()
            && subnet.network() >= self.subnet_min
            && subnet.network() <= self.subnet_max
    }

    /// Every node subnet between `SubnetMin` and `SubnetMax`, in order.
    pub fn subnets(&self) -> impl Iterator<Item = Ipv4Net> + '_ {
        let step = subnet_step(self.subnet_len);
        (u32::from(self.subnet_min)..=u32::from(self.subnet_max))
            .step_by(step as usize)
            .map(move |n| Ipv4Net::new(Ipv4Addr::from(n), self.subnet_len).expect("valid length"))
    }

    /// A free subnet (not in `taken`), picked at random among the free ones so that nodes
    /// starting together rarely race for the same one; `None` when the network is full.
    pub fn pick_free(&self, taken: &[Ipv4Net], random: u64) -> Option<Ipv4Net> {
        let free: Vec<Ipv4Net> = self.subnets().filter(|s| !taken.contains(s)).collect();
        if free.is_empty() {
            return None;
        }
        Some(free[(random % free.len() as u64) as usize])
    }
}

fn subnet_step(len: u8) -> u32 {
    1u32 << (32 - u32::from(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> Result<NetworkConfig, ConfigError> {
        NetworkConfig::parse(json.as_bytes())
    }

    #[test]
    fn flannel_shape_with_defaults() {
        let c = cfg(r#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan"}}"#).unwrap();
        assert_eq!(c.subnet_len, 24);
        assert_eq!(c.subnet_min, Ipv4Addr::new(198, 19, 1, 0));
        assert_eq!(c.subnet_max, Ipv4Addr::new(198, 19, 255, 0));
        assert_eq!(c.backend, BackendKind::Vxlan { vni: 1, port: 8472 });
        assert_eq!(c.subnets().count(), 255);
        assert!(c.is_valid_subnet("198.19.7.0/24".parse().unwrap()));
        assert!(!c.is_valid_subnet("198.19.0.0/24".parse().unwrap()));
        assert!(!c.is_valid_subnet("198.19.7.0/25".parse().unwrap()));
    }

    #[test]
    fn explicit_values_and_host_gw() {
        let c = cfg(r#"{"Network":"198.19.0.0/20","SubnetLen":26,"SubnetMin":"198.19.0.64","SubnetMax":"198.19.0.192","Backend":{"Type":"host-gw"}}"#).unwrap();
        assert_eq!(c.backend, BackendKind::HostGw);
        assert_eq!(c.subnets().count(), 3);
        assert_eq!(c.backend.mtu_overhead(), 0);
    }

    #[test]
    fn bad_configs_are_refused_with_a_reason() {
        for (json, what) in [
            (r#"{"Backend":{"Type":"vxlan"}}"#, "Network is required"),
            (r#"{"Network":"198.19.0.0/16"}"#, "Backend is required"),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"udp"}}"#,
                "not supported",
            ),
            (
                r#"{"Network":"198.19.0.0/16","SubnetLen":16,"Backend":{"Type":"vxlan"}}"#,
                "SubnetLen",
            ),
            (
                r#"{"Network":"198.19.0.0/16","SubnetMin":"198.19.0.5","Backend":{"Type":"vxlan"}}"#,
                "SubnetMin",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan","VNI":16777216}}"#,
                "VNI",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"host-gw","VNI":2}}"#,
                "VXLAN settings",
            ),
            (
                r#"{"Network":"198.19.0.0/16","IPv6Network":"fd00::/48","Backend":{"Type":"vxlan"}}"#,
                "IPv6Network",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan","Bogus":1}}"#,
                "unknown field",
            ),
            ("[1]", "JSON"),
        ] {
            let err = cfg(json).unwrap_err().to_string();
            assert!(err.contains(what), "{json}: {err}");
        }
    }

    #[test]
    fn pick_free_skips_taken_subnets_and_reports_a_full_network() {
        let c = cfg(r#"{"Network":"198.19.0.0/22","SubnetLen":24,"Backend":{"Type":"host-gw"}}"#)
            .unwrap();
        let all: Vec<_> = c.subnets().collect();
        assert_eq!(all.len(), 3);
        for r in 0..10 {
            let got = c.pick_free(&all[..2], r).unwrap();
            assert_eq!(got, all[2]);
        }
        assert_eq!(c.pick_free(&all, 3), None);
    }
}
