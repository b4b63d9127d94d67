//! The `wireguard` backend's part of the network config, flannel's keys
//! (`pkg/backend/wireguard/wireguard.go`): `ListenPort` [51820], `ListenPortV6` [51821],
//! `PSK` (base64), `PersistentKeepaliveInterval` (seconds) [0], `Mode` [`separate`].

use cni_linux::wireguard::SecretKey;

/// flannel's default UDP port of the IPv4 device.
pub const DEFAULT_LISTEN_PORT: u16 = 51820;
/// flannel's default UDP port of the IPv6 device (`separate` mode).
pub const DEFAULT_LISTEN_PORT_V6: u16 = 51821;

/// How a dual-stack network is carried (flannel's `Mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One device per family: `rcni-wg` over the IPv4 underlay for the IPv4 subnets,
    /// `rcni-wg-v6` over the IPv6 underlay for the IPv6 subnets.
    Separate,
    /// One device carrying both families, each peer reached over the family flannel's rule
    /// picks (IPv4 unless only IPv6 is public on both sides).
    Auto,
    /// One device, every peer reached over IPv4.
    Ipv4,
    /// One device, every peer reached over IPv6.
    Ipv6,
}

impl Mode {
    /// Parses flannel's value.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "separate" => Some(Mode::Separate),
            "auto" => Some(Mode::Auto),
            "ipv4" => Some(Mode::Ipv4),
            "ipv6" => Some(Mode::Ipv6),
            _ => None,
        }
    }

    /// flannel's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Separate => "separate",
            Mode::Auto => "auto",
            Mode::Ipv4 => "ipv4",
            Mode::Ipv6 => "ipv6",
        }
    }
}

/// The validated settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireguardSettings {
    /// UDP port of the IPv4 device (of the one device outside `separate` mode).
    pub listen_port: u16,
    /// UDP port of the IPv6 device in `separate` mode.
    pub listen_port_v6: u16,
    /// The preshared key every peer gets, from the config (`--wireguard-psk-file` is the
    /// other source).
    pub psk: Option<SecretKey>,
    /// Seconds between keepalives to each peer; 0 for none.
    pub keepalive: u16,
    /// How the families are carried.
    pub mode: Mode,
}

/// WireGuard's own bytes per packet: the 16-byte data header (type, receiver index, counter)
/// and the 16-byte authentication tag.
const WIREGUARD_HEADER_AND_TAG: u32 = 32;

/// The bytes WireGuard takes from the underlay MTU over an IPv4 or IPv6 underlay: outer IP
/// header (20 or 40) + UDP (8) + WireGuard's 32.
pub fn overhead(ipv6_underlay: bool) -> u32 {
    let ip = if ipv6_underlay { 40 } else { 20 };
    ip + 8 + WIREGUARD_HEADER_AND_TAG
}

impl WireguardSettings {
    /// The largest overhead of the devices a network with (or without) IPv6 gets: an IPv6
    /// underlay is used unless every peer is reached over IPv4.
    pub fn mtu_overhead(&self, network_has_ipv6: bool) -> u32 {
        overhead(network_has_ipv6 && self.mode != Mode::Ipv4)
    }
}
