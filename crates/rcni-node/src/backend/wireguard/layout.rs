//! Which WireGuard devices a node has and what each remote lease needs on them: the pure part
//! of the backend, from the network's families, flannel's `Mode` and a lease to devices, peers
//! (key, endpoint, allowed IPs) and routes.
//!
//! `separate` (flannel's default): `rcni-wg` carries the IPv4 subnets over the IPv4 underlay
//! (port `ListenPort`, the peer's key and port from `BackendData`) and `rcni-wg-v6` the IPv6
//! subnets over the IPv6 underlay (`ListenPortV6`, `BackendV6Data`). The other modes have one
//! device, `rcni-wg`, carrying both families to one peer per node, reached over IPv4 (`ipv4`),
//! IPv6 (`ipv6`) or the family flannel's `selectMode` picks (`auto`).
//!
//! Deliberate difference: in the one-device modes flannel publishes `ListenPortV6` in
//! `BackendV6Data` although its device listens on `ListenPort` only, so an IPv6 endpoint
//! built from it misses; rcni publishes the port the device listens on in both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use cni_linux::wireguard::{PeerConfig, PublicKey, SecretKey};
use ipnet::IpNet;

use super::settings::{overhead, Mode, WireguardSettings};
use crate::lease::{BackendData, Lease};

/// The IPv4 (or only) device.
pub use cni_attribution::names::rcni_node::WIREGUARD_DEVICE as DEVICE;
/// The IPv6 device of `separate` mode.
pub use cni_attribution::names::rcni_node::WIREGUARD_DEVICE_V6 as DEVICE_V6;

/// One device of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Its name.
    pub name: &'static str,
    /// It carries the IPv4 subnets.
    pub ipv4: bool,
    /// It carries the IPv6 subnets.
    pub ipv6: bool,
    /// Its UDP port.
    pub listen_port: u16,
    /// Its MTU: the underlay's minus WireGuard's overhead over the underlay family it uses.
    pub mtu: u32,
}

/// The node's devices and how it reaches peers.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The network's settings.
    pub settings: WireguardSettings,
    /// The node's public IPv4 address, on a network with IPv4.
    pub local: Option<Ipv4Addr>,
    /// The node's public IPv6 address, on a network with IPv6.
    pub local6: Option<Ipv6Addr>,
    /// The devices, `rcni-wg` first.
    pub devices: Vec<DeviceSpec>,
}

/// What one remote node needs on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePeer {
    /// Index of the device in [`Layout::devices`].
    pub device: usize,
    /// The peer.
    pub config: PeerConfig,
}

impl RemotePeer {
    /// The routes through the device: the peer's subnets.
    pub fn routes(&self) -> &[IpNet] {
        &self.config.allowed_ips
    }
}

/// flannel's "private" addresses (`pkg/ip`): RFC 1918 for IPv4, fc00::/7 for IPv6.
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

impl Layout {
    /// The devices of a network with the public addresses given (one per family it has).
    pub fn new(
        settings: WireguardSettings,
        local: Option<Ipv4Addr>,
        local6: Option<Ipv6Addr>,
        underlay_mtu: u32,
    ) -> Layout {
        let (v4, v6) = (local.is_some(), local6.is_some());
        let device = |name, ipv4, ipv6, listen_port, ipv6_underlay| DeviceSpec {
            name,
            ipv4,
            ipv6,
            listen_port,
            mtu: underlay_mtu.saturating_sub(overhead(ipv6_underlay)),
        };
        let devices = match settings.mode {
            Mode::Separate => [
                v4.then(|| device(DEVICE, true, false, settings.listen_port, false)),
                v6.then(|| device(DEVICE_V6, false, true, settings.listen_port_v6, true)),
            ]
            .into_iter()
            .flatten()
            .collect(),
            Mode::Ipv4 => vec![device(DEVICE, v4, v6, settings.listen_port, false)],
            Mode::Ipv6 | Mode::Auto => {
                vec![device(DEVICE, v4, v6, settings.listen_port, v6)]
            }
        };
        Layout {
            settings,
            local,
            local6,
            devices,
        }
    }

    /// Every device name rcni may have made, for removing the ones this layout has not.
    pub fn all_names() -> [&'static str; 2] {
        [DEVICE, DEVICE_V6]
    }

    /// What this node publishes in `BackendData` and `BackendV6Data`.
    pub fn published(&self, public: &PublicKey) -> (Option<BackendData>, Option<BackendData>) {
        let data = |ipv6: bool| {
            let dev = self
                .devices
                .iter()
                .find(|d| if ipv6 { d.ipv6 } else { d.ipv4 })?;
            Some(BackendData {
                public_key: Some(public.to_base64()),
                port: Some(dev.listen_port),
                ..BackendData::default()
            })
        };
        (data(false), data(true))
    }

    /// The peers a remote lease needs, one per device that carries a family both sides have.
    pub fn peers_for(&self, lease: &Lease, psk: Option<SecretKey>) -> Vec<RemotePeer> {
        if lease.attrs.backend_type != "wireguard" {
            log::warn!(
                "lease {} is of backend {}, not wireguard: skipped",
                lease.subnet,
                lease.attrs.backend_type
            );
            return Vec::new();
        }
        let a = &lease.attrs;
        let v4 = (a.public_ipv4(), a.backend_data.as_ref(), lease.subnet.v4);
        let v6 = (a.public_ipv6, a.backend_v6_data.as_ref(), lease.subnet.v6);
        let mut out = Vec::new();
        for (index, dev) in self.devices.iter().enumerate() {
            let mut nets: Vec<IpNet> = Vec::new();
            if dev.ipv4 {
                nets.extend(v4.2.map(IpNet::V4));
            }
            if dev.ipv6 {
                nets.extend(v6.2.map(IpNet::V6));
            }
            // The family that reaches the peer, its address and what it published for it.
            let over_ipv6 = match self.settings.mode {
                Mode::Separate => dev.ipv6,
                Mode::Ipv4 => false,
                Mode::Ipv6 => true,
                Mode::Auto => self.auto_over_ipv6(a.public_ipv4(), a.public_ipv6),
            };
            let (ip, data): (Option<IpAddr>, _) = if over_ipv6 {
                (v6.0.map(IpAddr::V6), v6.1.or(v4.1))
            } else {
                (v4.0.map(IpAddr::V4), v4.1.or(v6.1))
            };
            let key = data.and_then(BackendData::wireguard_key);
            let (Some(ip), Some(key), false) = (ip, key, nets.is_empty()) else {
                log::warn!(
                    "lease {} has no WireGuard key or address for {}: skipped",
                    lease.subnet,
                    dev.name
                );
                continue;
            };
            let port = data.and_then(|d| d.port).unwrap_or(dev.listen_port);
            out.push(RemotePeer {
                device: index,
                config: PeerConfig {
                    public_key: key,
                    preshared_key: psk,
                    endpoint: Some(SocketAddr::new(ip, port)),
                    persistent_keepalive: self.settings.keepalive,
                    allowed_ips: nets,
                }
                .normalized(),
            });
        }
        out
    }

    /// flannel's `selectMode`: IPv4 unless the peer has no IPv4 or only IPv6 is public on
    /// both sides.
    fn auto_over_ipv6(&self, ip4: Option<Ipv4Addr>, ip6: Option<Ipv6Addr>) -> bool {
        let (Some(ip6), Some(ip4)) = (ip6, ip4) else {
            return ip4.is_none();
        };
        if !is_private(IpAddr::V4(ip4)) && self.local.is_some() {
            return false;
        }
        let local6_public = self.local6.is_some_and(|l| !is_private(IpAddr::V6(l)));
        !is_private(IpAddr::V6(ip6)) && local6_public
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{LeaseAttrs, Subnets};

    const KEY: &str = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";

    fn settings(mode: Mode) -> WireguardSettings {
        WireguardSettings {
            listen_port: 51820,
            listen_port_v6: 51821,
            psk: None,
            keepalive: 25,
            mode,
        }
    }

    fn data(port: u16) -> Option<BackendData> {
        Some(BackendData {
            public_key: Some(KEY.into()),
            port: Some(port),
            ..BackendData::default()
        })
    }

    fn dual_lease(ip4: &str, ip6: &str) -> Lease {
        Lease {
            subnet: Subnets {
                v4: Some("198.19.2.0/24".parse().unwrap()),
                v6: Some("2001:2:1:2::/64".parse().unwrap()),
            },
            attrs: LeaseAttrs {
                public_ip: ip4.parse().unwrap(),
                public_ipv6: Some(ip6.parse().unwrap()),
                backend_type: "wireguard".into(),
                backend_data: data(51820),
                backend_v6_data: data(51821),
                node_name: Some("n2".into()),
            },
        }
    }

    #[test]
    fn separate_mode_has_a_device_and_a_peer_per_family() {
        let l = Layout::new(
            settings(Mode::Separate),
            Some("198.18.0.11".parse().unwrap()),
            Some("2001:2::11".parse().unwrap()),
            1500,
        );
        assert_eq!(
            l.devices
                .iter()
                .map(|d| (d.name, d.listen_port, d.mtu))
                .collect::<Vec<_>>(),
            [(DEVICE, 51820, 1440), (DEVICE_V6, 51821, 1420)]
        );
        let peers = l.peers_for(&dual_lease("198.18.0.12", "2001:2::12"), None);
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0].device, 0);
        assert_eq!(
            peers[0].config.endpoint,
            Some("198.18.0.12:51820".parse().unwrap())
        );
        assert_eq!(
            peers[0].routes(),
            ["198.19.2.0/24".parse::<IpNet>().unwrap()]
        );
        assert_eq!(peers[0].config.persistent_keepalive, 25);
        assert_eq!(
            peers[1].config.endpoint,
            Some("[2001:2::12]:51821".parse().unwrap())
        );
        assert_eq!(
            peers[1].routes(),
            ["2001:2:1:2::/64".parse::<IpNet>().unwrap()]
        );
        let (d4, d6) = l.published(&KEY.parse().unwrap());
        assert_eq!(
            (d4.unwrap().port, d6.unwrap().port),
            (Some(51820), Some(51821))
        );
    }

    #[test]
    fn one_device_modes_carry_both_families_to_one_peer_over_the_chosen_family() {
        let local = Some("198.18.0.11".parse().unwrap());
        let local6 = Some("2001:2::11".parse().unwrap());
        let lease = dual_lease("198.18.0.12", "2001:2::12");
        for (mode, endpoint) in [
            (Mode::Ipv4, "198.18.0.12:51820"),
            (Mode::Ipv6, "[2001:2::12]:51821"),
            // Both public: IPv4 (flannel's rule).
            (Mode::Auto, "198.18.0.12:51820"),
        ] {
            let l = Layout::new(settings(mode), local, local6, 1500);
            assert_eq!(l.devices.len(), 1);
            let peers = l.peers_for(&lease, None);
            assert_eq!(peers.len(), 1, "{mode:?}");
            assert_eq!(peers[0].config.endpoint, Some(endpoint.parse().unwrap()));
            assert_eq!(peers[0].routes().len(), 2);
        }
        assert_eq!(
            Layout::new(settings(Mode::Ipv4), local, local6, 1500).devices[0].mtu,
            1440
        );
        assert_eq!(
            Layout::new(settings(Mode::Auto), local, local6, 1500).devices[0].mtu,
            1420
        );
        // A private IPv4 on the peer and public IPv6 on both sides: IPv6.
        let l = Layout::new(settings(Mode::Auto), local, local6, 1500);
        let private4 = dual_lease("10.0.0.12", "2001:2::12");
        let peers = l.peers_for(&private4, None);
        assert_eq!(
            peers[0].config.endpoint,
            Some("[2001:2::12]:51821".parse().unwrap())
        );
        // The published port is the one the device listens on, in both.
        let (d4, d6) = l.published(&KEY.parse().unwrap());
        assert_eq!(
            (d4.unwrap().port, d6.unwrap().port),
            (Some(51820), Some(51820))
        );
    }

    #[test]
    fn a_lease_of_another_backend_or_without_a_key_gives_no_peer() {
        let l = Layout::new(
            settings(Mode::Separate),
            Some("198.18.0.11".parse().unwrap()),
            None,
            1500,
        );
        let mut lease = dual_lease("198.18.0.12", "2001:2::12");
        lease.attrs.backend_type = "vxlan".into();
        assert!(l.peers_for(&lease, None).is_empty());
        let mut lease = dual_lease("198.18.0.12", "2001:2::12");
        lease.attrs.backend_data = None;
        lease.attrs.backend_v6_data = None;
        assert!(l.peers_for(&lease, None).is_empty());
        // An old lease without Port: this node's port.
        let mut lease = dual_lease("198.18.0.12", "2001:2::12");
        lease.attrs.backend_data.as_mut().unwrap().port = None;
        let psk = SecretKey::from_bytes([3; 32]);
        let peers = l.peers_for(&lease, Some(psk));
        assert_eq!(
            peers[0].config.endpoint,
            Some("198.18.0.12:51820".parse().unwrap())
        );
        assert_eq!(peers[0].config.preshared_key, Some(psk));
    }
}
