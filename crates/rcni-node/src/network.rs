//! The network config every node reads from `<prefix>/config`, in flannel's JSON shape, and the
//! subnet arithmetic that follows from it (which node subnets exist, which are free).
//!
//! Dual-stack follows flannel: `EnableIPv4` (default true) with `Network`, `SubnetLen`,
//! `SubnetMin`, `SubnetMax`; `EnableIPv6` (default false) with `IPv6Network`, `IPv6SubnetLen`,
//! `IPv6SubnetMin`, `IPv6SubnetMax`. Either family alone or both; a node then holds one subnet
//! of each enabled family.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;

use crate::backend::wireguard::settings::{self as wg, Mode, WireguardSettings};
use crate::lease::Subnets;

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
    /// An encrypted WireGuard tunnel per address family (or one for both), a peer and a route
    /// per remote node.
    Wireguard(WireguardSettings),
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
            BackendKind::Wireguard(_) => "wireguard",
        }
    }

    /// Bytes the encapsulation takes from the underlay MTU: outer IP header (20 for IPv4, 40
    /// for IPv6) + UDP + VXLAN + inner Ethernet for VXLAN, + WireGuard's header and tag for
    /// WireGuard (whose IPv4-only `Mode` never uses an IPv6 underlay).
    pub fn mtu_overhead(&self, ipv6_underlay: bool) -> u32 {
        match (self, ipv6_underlay) {
            (BackendKind::HostGw, _) => 0,
            (BackendKind::Vxlan { .. }, false) => 50,
            (BackendKind::Vxlan { .. }, true) => 70,
            (BackendKind::Wireguard(s), ipv6) => s.mtu_overhead(ipv6),
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
    listen_port: Option<u16>,
    #[serde(rename = "ListenPortV6")]
    listen_port_v6: Option<u16>,
    #[serde(rename = "PSK")]
    psk: Option<String>,
    persistent_keepalive_interval: Option<u16>,
    mode: Option<String>,
}

impl RawBackend {
    /// Whether a VXLAN setting is given.
    fn has_vxlan_keys(&self) -> bool {
        self.vni.is_some() || self.port.is_some()
    }

    /// Whether a WireGuard setting is given.
    fn has_wireguard_keys(&self) -> bool {
        self.listen_port.is_some()
            || self.listen_port_v6.is_some()
            || self.psk.is_some()
            || self.persistent_keepalive_interval.is_some()
            || self.mode.is_some()
    }

    /// Refuses the settings of other backends than `kind`.
    fn only_keys_of(&self, kind: &str) -> Result<(), ConfigError> {
        if kind != "vxlan" && self.has_vxlan_keys() {
            return Err(ConfigError::Invalid(format!(
                "VNI and Port are VXLAN settings, not {kind} ones"
            )));
        }
        if kind != "wireguard" && self.has_wireguard_keys() {
            return Err(ConfigError::Invalid(format!(
                "ListenPort, ListenPortV6, PSK, PersistentKeepaliveInterval and Mode are \
                 WireGuard settings, not {kind} ones"
            )));
        }
        Ok(())
    }

    /// The `wireguard` backend's settings on a network with the families given.
    fn wireguard(&self, ipv4: bool, ipv6: bool) -> Result<WireguardSettings, ConfigError> {
        let mode = match self.mode.as_deref() {
            None => Mode::Separate,
            Some(m) => Mode::parse(m).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "Mode {m:?} is not one of separate, auto, ipv4, ipv6"
                ))
            })?,
        };
        match mode {
            Mode::Ipv4 if !ipv4 => {
                Err("Mode ipv4 reaches the peers over IPv4: the network has none")
            }
            Mode::Ipv6 if !ipv6 => {
                Err("Mode ipv6 reaches the peers over IPv6: the network has none (EnableIPv6)")
            }
            _ => Ok(()),
        }
        .map_err(|e| ConfigError::Invalid(e.into()))?;
        let psk = self
            .psk
            .as_deref()
            .map(cni_linux::wireguard::SecretKey::from_base64)
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("PSK: {e}")))?;
        let settings = WireguardSettings {
            listen_port: self.listen_port.unwrap_or(wg::DEFAULT_LISTEN_PORT),
            listen_port_v6: self.listen_port_v6.unwrap_or(wg::DEFAULT_LISTEN_PORT_V6),
            psk,
            keepalive: self.persistent_keepalive_interval.unwrap_or(0),
            mode,
        };
        if settings.listen_port == 0 || settings.listen_port_v6 == 0 {
            return Err(ConfigError::Invalid(
                "ListenPort and ListenPortV6 cannot be 0".into(),
            ));
        }
        if mode == Mode::Separate && ipv4 && ipv6 && settings.listen_port == settings.listen_port_v6
        {
            return Err(ConfigError::Invalid(format!(
                "ListenPort and ListenPortV6 are both {}: the two devices of separate mode need \
                 a port each",
                settings.listen_port
            )));
        }
        Ok(settings)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawConfig {
    #[serde(rename = "EnableIPv4")]
    enable_ipv4: Option<bool>,
    #[serde(rename = "EnableIPv6")]
    enable_ipv6: Option<bool>,
    network: Option<Ipv4Net>,
    subnet_len: Option<u8>,
    subnet_min: Option<Ipv4Addr>,
    subnet_max: Option<Ipv4Addr>,
    #[serde(rename = "IPv6Network")]
    ipv6_network: Option<Ipv6Net>,
    #[serde(rename = "IPv6SubnetLen")]
    ipv6_subnet_len: Option<u8>,
    #[serde(rename = "IPv6SubnetMin")]
    ipv6_subnet_min: Option<Ipv6Addr>,
    #[serde(rename = "IPv6SubnetMax")]
    ipv6_subnet_max: Option<Ipv6Addr>,
    backend: Option<RawBackend>,
}

/// One family's part of the config: the cluster network and the node subnets carved from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubnetRange {
    /// The cluster network every node subnet of this family is carved from.
    pub network: IpNet,
    /// Prefix length of a node subnet.
    pub subnet_len: u8,
    /// Lowest node subnet handed out.
    pub subnet_min: IpAddr,
    /// Highest node subnet handed out.
    pub subnet_max: IpAddr,
}

fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address of the same family as `like` with the value `n`.
fn from_u128(like: IpAddr, n: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

impl SubnetRange {
    /// Validates one family. Defaults follow flannel: for IPv4 `SubnetLen` 24 (the network
    /// length plus 4, at most 30, for a network of /24 or longer), for IPv6 64 (the network
    /// length plus 2 for a network longer than /62), at most 126; `SubnetMin` the second
    /// subnet, `SubnetMax` the last one. `what` prefixes the key names in errors (`""` or `"IPv6"`).
    fn new(
        network: IpNet,
        subnet_len: Option<u8>,
        min: Option<IpAddr>,
        max: Option<IpAddr>,
        what: &str,
    ) -> Result<Self, ConfigError> {
        let network = network.trunc();
        let plen = network.prefix_len();
        let (default_len, max_len) = match network {
            IpNet::V4(_) if plen < 24 => (24, 30),
            IpNet::V4(_) => ((plen + 4).min(30), 30),
            IpNet::V6(_) if plen <= 62 => (64, 126),
            IpNet::V6(_) => ((plen + 2).min(126), 126),
        };
        let subnet_len = subnet_len.unwrap_or(default_len);
        if subnet_len <= plen || subnet_len > max_len {
            return Err(ConfigError::Invalid(format!(
                "{what}SubnetLen {subnet_len} must be longer than the network's /{plen} and at most {max_len}"
            )));
        }
        let step = 1u128 << (network.max_prefix_len() - subnet_len);
        let first = as_u128(network.network());
        let last = as_u128(network.broadcast()) - (step - 1);
        let base = network.network();
        let subnet_min = min.unwrap_or_else(|| from_u128(base, first + step));
        let subnet_max = max.unwrap_or_else(|| from_u128(base, last));
        for (name, value) in [("SubnetMin", subnet_min), ("SubnetMax", subnet_max)] {
            if !network.contains(&value) || !as_u128(value).is_multiple_of(step) {
                return Err(ConfigError::Invalid(format!(
                    "{what}{name} {value} is not a /{subnet_len} subnet of {network}"
                )));
            }
        }
        if as_u128(subnet_min) > as_u128(subnet_max) {
            return Err(ConfigError::Invalid(format!(
                "{what}SubnetMin {subnet_min} is above {what}SubnetMax {subnet_max}"
            )));
        }
        Ok(SubnetRange {
            network,
            subnet_len,
            subnet_min,
            subnet_max,
        })
    }

    fn step(&self) -> u128 {
        1u128 << (self.network.max_prefix_len() - self.subnet_len)
    }

    /// How many node subnets the range holds.
    pub fn count(&self) -> u128 {
        (as_u128(self.subnet_max) - as_u128(self.subnet_min)) / self.step() + 1
    }

    /// The `i`-th node subnet (`i < count()`).
    pub fn nth(&self, i: u128) -> IpNet {
        let addr = from_u128(self.subnet_min, as_u128(self.subnet_min) + i * self.step());
        IpNet::new(addr, self.subnet_len).expect("valid length")
    }

    /// Whether `subnet` is a node subnet this range can hand out.
    pub fn is_valid_subnet(&self, subnet: IpNet) -> bool {
        subnet.prefix_len() == self.subnet_len
            && subnet.network() == subnet.addr()
            && subnet.addr().is_ipv4() == self.network.addr().is_ipv4()
            && as_u128(subnet.network()) >= as_u128(self.subnet_min)
            && as_u128(subnet.network()) <= as_u128(self.subnet_max)
    }

    /// A free subnet (not in `taken`), from a random starting point among all of them so that
    /// nodes starting together rarely race for the same one; `None` when the range is full.
    /// Walks at most `taken.len() + 1` candidates, so an IPv6 range of billions of subnets
    /// costs no more than a small one.
    pub fn pick_free(&self, taken: &[IpNet], random: u64) -> Option<IpNet> {
        let count = self.count();
        let start = u128::from(random) % count;
        (0..count.min(taken.len() as u128 + 1))
            .map(|i| self.nth((start + i) % count))
            .find(|s| !taken.contains(s))
    }
}

/// The validated network config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// The IPv4 part (`EnableIPv4`, on by default).
    pub ipv4: Option<SubnetRange>,
    /// The IPv6 part (`EnableIPv6`).
    pub ipv6: Option<SubnetRange>,
    /// The data plane.
    pub backend: BackendKind,
}

impl NetworkConfig {
    /// Parses and validates flannel's JSON. `Backend.Type` is required: flannel's default
    /// (udp) is not an rcni backend.
    pub fn parse(json: &[u8]) -> Result<Self, ConfigError> {
        let raw: RawConfig = serde_json::from_slice(json)?;
        let ipv4 = if raw.enable_ipv4.unwrap_or(true) {
            let network = raw
                .network
                .ok_or_else(|| ConfigError::Invalid("Network is required".into()))?;
            Some(SubnetRange::new(
                network.into(),
                raw.subnet_len,
                raw.subnet_min.map(IpAddr::V4),
                raw.subnet_max.map(IpAddr::V4),
                "",
            )?)
        } else {
            None
        };
        let ipv6 = if raw.enable_ipv6.unwrap_or(false) {
            let network = raw.ipv6_network.ok_or_else(|| {
                ConfigError::Invalid("IPv6Network is required with EnableIPv6".into())
            })?;
            Some(SubnetRange::new(
                network.into(),
                raw.ipv6_subnet_len,
                raw.ipv6_subnet_min.map(IpAddr::V6),
                raw.ipv6_subnet_max.map(IpAddr::V6),
                "IPv6",
            )?)
        } else {
            if raw.ipv6_network.is_some() {
                // flannel ignores it too; say so rather than silently run IPv4 only.
                log::warn!("IPv6Network is set but EnableIPv6 is not true: IPv4 only");
            }
            None
        };
        if ipv4.is_none() && ipv6.is_none() {
            return Err(ConfigError::Invalid(
                "EnableIPv4 and EnableIPv6 are both false: no family left".into(),
            ));
        }
        let backend = raw
            .backend
            .ok_or_else(|| ConfigError::Invalid("Backend is required".into()))?;
        if let Some(kind) = backend.kind.as_deref() {
            backend.only_keys_of(kind)?;
        }
        let backend = match backend.kind.as_deref() {
            Some("host-gw") => BackendKind::HostGw,
            Some("wireguard") => {
                BackendKind::Wireguard(backend.wireguard(ipv4.is_some(), ipv6.is_some())?)
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
                    "Backend.Type {other:?} is not supported (host-gw, vxlan or wireguard)"
                )))
            }
            None => return Err(ConfigError::Invalid("Backend.Type is required".into())),
        };
        Ok(NetworkConfig {
            ipv4,
            ipv6,
            backend,
        })
    }

    /// The cluster networks, IPv4 first.
    pub fn networks(&self) -> Vec<IpNet> {
        [self.ipv4, self.ipv6]
            .iter()
            .flatten()
            .map(|r| r.network)
            .collect()
    }

    /// Whether `subnets` has exactly one valid subnet of each enabled family.
    pub fn is_valid(&self, subnets: Subnets) -> bool {
        fn fits(range: Option<SubnetRange>, subnet: Option<IpNet>) -> bool {
            match (range, subnet) {
                (Some(r), Some(s)) => r.is_valid_subnet(s),
                (None, None) => true,
                _ => false,
            }
        }
        fits(self.ipv4, subnets.v4.map(IpNet::V4)) && fits(self.ipv6, subnets.v6.map(IpNet::V6))
    }

    /// Free subnets of every enabled family (not in `taken`); `None` when a family is full.
    pub fn pick_free(&self, taken: &[Subnets], random: u64) -> Option<Subnets> {
        let mut out = Subnets::default();
        if let Some(r) = self.ipv4 {
            let used: Vec<IpNet> = taken.iter().filter_map(|t| t.v4).map(IpNet::V4).collect();
            let IpNet::V4(v4) = r.pick_free(&used, random)? else {
                unreachable!("an IPv4 range yields IPv4 subnets")
            };
            out.v4 = Some(v4);
        }
        if let Some(r) = self.ipv6 {
            let used: Vec<IpNet> = taken.iter().filter_map(|t| t.v6).map(IpNet::V6).collect();
            let IpNet::V6(v6) = r.pick_free(&used, random.rotate_left(17))? else {
                unreachable!("an IPv6 range yields IPv6 subnets")
            };
            out.v6 = Some(v6);
        }
        Some(out)
    }
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
        let r = c.ipv4.unwrap();
        assert_eq!(c.ipv6, None);
        assert_eq!(r.subnet_len, 24);
        assert_eq!(r.subnet_min, Ipv4Addr::new(198, 19, 1, 0));
        assert_eq!(r.subnet_max, Ipv4Addr::new(198, 19, 255, 0));
        assert_eq!(c.backend, BackendKind::Vxlan { vni: 1, port: 8472 });
        assert_eq!(r.count(), 255);
        assert!(r.is_valid_subnet("198.19.7.0/24".parse().unwrap()));
        assert!(!r.is_valid_subnet("198.19.0.0/24".parse().unwrap()));
        assert!(!r.is_valid_subnet("198.19.7.0/25".parse().unwrap()));
    }

    #[test]
    fn explicit_values_and_host_gw() {
        let c = cfg(r#"{"Network":"198.19.0.0/20","SubnetLen":26,"SubnetMin":"198.19.0.64","SubnetMax":"198.19.0.192","Backend":{"Type":"host-gw"}}"#).unwrap();
        assert_eq!(c.backend, BackendKind::HostGw);
        assert_eq!(c.ipv4.unwrap().count(), 3);
        assert_eq!(c.backend.mtu_overhead(false), 0);
    }

    #[test]
    fn dual_stack_and_ipv6_only_follow_flannels_keys() {
        let c = cfg(r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","Backend":{"Type":"vxlan"}}"#).unwrap();
        let r6 = c.ipv6.unwrap();
        assert_eq!(r6.subnet_len, 64);
        assert_eq!(r6.subnet_min, "2001:2:0:1::".parse::<IpAddr>().unwrap());
        assert_eq!(r6.subnet_max, "2001:2:0:ffff::".parse::<IpAddr>().unwrap());
        assert_eq!(r6.count(), 65535);
        assert_eq!(c.networks().len(), 2);
        assert_eq!(c.backend.mtu_overhead(true), 70);
        let both = Subnets {
            v4: Some("198.19.3.0/24".parse().unwrap()),
            v6: Some("2001:2:0:3::/64".parse().unwrap()),
        };
        assert!(c.is_valid(both));
        assert!(!c.is_valid(Subnets { v6: None, ..both }));
        let only6 = cfg(r#"{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"2001:2::/56","IPv6SubnetLen":64,"Backend":{"Type":"host-gw"}}"#).unwrap();
        assert_eq!(only6.ipv4, None);
        assert!(only6.is_valid(Subnets { v4: None, ..both }));
        // IPv6Network without EnableIPv6 is ignored, as flannel does.
        let ignored = cfg(
            r#"{"Network":"198.19.0.0/16","IPv6Network":"2001:2::/48","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap();
        assert_eq!(ignored.ipv6, None);
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
                r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"Backend":{"Type":"vxlan"}}"#,
                "IPv6Network is required",
            ),
            (
                r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","IPv6SubnetLen":127,"Backend":{"Type":"vxlan"}}"#,
                "IPv6SubnetLen",
            ),
            (
                r#"{"EnableIPv4":false,"Backend":{"Type":"vxlan"}}"#,
                "no family",
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
    fn wireguard_takes_flannels_keys_and_defaults() {
        let c = cfg(r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard"}}"#).unwrap();
        let BackendKind::Wireguard(s) = c.backend else {
            panic!("{:?}", c.backend)
        };
        assert_eq!(
            (s.listen_port, s.listen_port_v6, s.keepalive),
            (51820, 51821, 0)
        );
        assert_eq!((s.mode, s.psk), (Mode::Separate, None));
        assert_eq!(c.backend.name(), "wireguard");
        assert_eq!(c.backend.mtu_overhead(false), 60);
        let c = cfg(r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","Backend":{"Type":"wireguard","ListenPort":7000,"ListenPortV6":7001,"PSK":"yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=","PersistentKeepaliveInterval":25,"Mode":"auto"}}"#).unwrap();
        let BackendKind::Wireguard(s) = c.backend else {
            panic!("{:?}", c.backend)
        };
        assert_eq!(
            (s.listen_port, s.listen_port_v6, s.keepalive),
            (7000, 7001, 25)
        );
        assert_eq!(s.mode, Mode::Auto);
        assert!(s.psk.is_some());
        assert!(!format!("{c:?}").contains("yAnz5"), "the PSK never prints");
        assert_eq!(c.backend.mtu_overhead(true), 80);
        let v4 = cfg(r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","Backend":{"Type":"wireguard","Mode":"ipv4"}}"#).unwrap();
        assert_eq!(v4.backend.mtu_overhead(true), 60, "an IPv4 underlay only");
    }

    #[test]
    fn bad_wireguard_configs_are_refused_with_a_reason() {
        for (json, what) in [
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","Mode":"both"}}"#,
                "Mode \"both\"",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","Mode":"ipv6"}}"#,
                "Mode ipv6",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","PSK":"short"}}"#,
                "PSK",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","VNI":1}}"#,
                "VXLAN settings",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan","ListenPort":1}}"#,
                "WireGuard settings",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","ListenPort":0}}"#,
                "cannot be 0",
            ),
            (
                r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","Backend":{"Type":"wireguard","ListenPort":7000,"ListenPortV6":7000}}"#,
                "a port each",
            ),
            (
                r#"{"Network":"198.19.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":70000}}"#,
                "JSON",
            ),
        ] {
            let err = cfg(json).unwrap_err().to_string();
            assert!(err.contains(what), "{json}: {err}");
        }
    }

    #[test]
    fn pick_free_skips_taken_subnets_and_reports_a_full_network() {
        let c = cfg(r#"{"Network":"198.19.0.0/22","SubnetLen":24,"Backend":{"Type":"host-gw"}}"#)
            .unwrap();
        let r = c.ipv4.unwrap();
        let all: Vec<IpNet> = (0..r.count()).map(|i| r.nth(i)).collect();
        assert_eq!(all.len(), 3);
        for random in 0..10 {
            assert_eq!(r.pick_free(&all[..2], random), Some(all[2]));
        }
        assert_eq!(r.pick_free(&all, 3), None);
        // A huge IPv6 range is not enumerated.
        let c6 = cfg(r#"{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"2001:2::/32","Backend":{"Type":"host-gw"}}"#).unwrap();
        let r6 = c6.ipv6.unwrap();
        assert_eq!(r6.count(), (1u128 << 32) - 1);
        let got = r6.pick_free(&[r6.nth(5)], 5).unwrap();
        assert_eq!(got, r6.nth(6));
    }
}
