//! WireGuard devices, configured the same way whichever implementation runs them:
//!
//! - the kernel's (`ip link add … type wireguard`), over generic netlink, family `wireguard`
//!   ([`genl::KernelDevice`], and [`crate::rtnl::link_add::LinkAdd::wireguard`] for the link);
//! - a userspace one (wireguard-go) driving a TUN device, over its configuration socket
//!   `/var/run/wireguard/<name>.sock` ([`uapi::UserspaceDevice`]), the cross-platform
//!   "configuration protocol" of <https://www.wireguard.com/xplatform/>.
//!
//! Both read a [`Device`] (the private key, the listen port, every peer with its statistics)
//! and apply a [`DeviceUpdate`] (a new key or port, peers set or removed) through one trait,
//! [`DeviceControl`], so a caller diffs what it wants against what runs once, for both. A peer
//! set with [`PeerChange::Set`] gets exactly the allowed IPs, preshared key and keepalive
//! given (the "replace allowed IPs" flag, a zero key for "none"), so a set is idempotent.
//! Keys are [`key::PublicKey`] and [`key::SecretKey`], the latter never printed.
//!
//! Nothing here runs `wg` or `ip`.

pub mod genl;
pub mod key;
pub mod uapi;

use std::net::SocketAddr;
use std::time::SystemTime;

use ipnet::IpNet;

pub use key::{KeyError, PublicKey, SecretKey};

/// A peer as a device reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// What the peer is configured with.
    pub config: PeerConfig,
    /// When the last handshake completed; `None` before the first.
    pub last_handshake: Option<SystemTime>,
    /// Bytes received from the peer (after decryption).
    pub rx_bytes: u64,
    /// Bytes sent to the peer.
    pub tx_bytes: u64,
}

/// What a peer is configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The peer's identity.
    pub public_key: PublicKey,
    /// The symmetric key mixed into its handshakes, if any.
    pub preshared_key: Option<SecretKey>,
    /// Where its packets go (and, after a roam, where they last came from).
    pub endpoint: Option<SocketAddr>,
    /// Seconds between keepalives; 0 for none.
    pub persistent_keepalive: u16,
    /// The source addresses accepted from it and the destinations routed to it, sorted.
    pub allowed_ips: Vec<IpNet>,
}

impl PeerConfig {
    /// The same config with its allowed IPs sorted (the order a device reports them in varies).
    pub fn normalized(mut self) -> Self {
        self.allowed_ips.sort();
        self.allowed_ips.dedup();
        self.preshared_key = self.preshared_key.filter(|k| !k.is_zero());
        self
    }
}

/// A device's configuration and peers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    /// Its private key, once one is set.
    pub private_key: Option<SecretKey>,
    /// Its UDP port; 0 before one is set or chosen.
    pub listen_port: u16,
    /// Every peer.
    pub peers: Vec<Peer>,
}

/// One change to a device's peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerChange {
    /// Adds the peer, or makes an existing one exactly this (its allowed IPs replaced).
    Set(PeerConfig),
    /// Removes the peer (a missing one is fine).
    Remove(PublicKey),
}

impl PeerChange {
    /// The peer the change is about.
    pub fn public_key(&self) -> PublicKey {
        match self {
            PeerChange::Set(c) => c.public_key,
            PeerChange::Remove(k) => *k,
        }
    }
}

/// Changes to apply to a device in one go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceUpdate {
    /// A new private key.
    pub private_key: Option<SecretKey>,
    /// A new listen port.
    pub listen_port: Option<u16>,
    /// Remove every peer the update does not set.
    pub replace_peers: bool,
    /// Peer changes, applied in order.
    pub peers: Vec<PeerChange>,
}

impl DeviceUpdate {
    /// Whether the update changes nothing.
    pub fn is_empty(&self) -> bool {
        self.private_key.is_none()
            && self.listen_port.is_none()
            && !self.replace_peers
            && self.peers.is_empty()
    }
}

/// Reads and configures one WireGuard device.
pub trait DeviceControl: Send {
    /// The device's configuration, peers and statistics.
    fn read(&mut self) -> Result<Device, Error>;
    /// Applies `update`.
    fn apply(&mut self, update: &DeviceUpdate) -> Result<(), Error>;
}

/// Why a WireGuard device could not be read or configured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel has no WireGuard.
    #[error(
        "this kernel has no WireGuard: the generic netlink family \"wireguard\" is not \
         registered (the wireguard module is not loaded and could not be loaded)"
    )]
    NoKernelSupport,
    /// A generic netlink request failed.
    #[error(transparent)]
    Netlink(#[from] crate::rtnl::Error),
    /// The userspace implementation's socket could not be reached or read.
    #[error("{path}: {source}")]
    Socket {
        /// The configuration socket.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The userspace implementation refused a request.
    #[error("{path}: the request was refused (errno={errno})")]
    Refused {
        /// The configuration socket.
        path: String,
        /// The errno it answered with.
        errno: i64,
    },
    /// An answer could not be understood.
    #[error("{path}: malformed answer: {what}")]
    Malformed {
        /// Where it came from.
        path: String,
        /// What was wrong.
        what: String,
    },
}
