//! The nf_tables objects a batch creates: families, chains (regular and base) and named sets,
//! plus the name checks shared by all of them.

use std::fmt;
use std::net::IpAddr;

use crate::Error;

/// Longest table, chain or set name the kernel accepts (NFT_NAME_MAXLEN less the NUL).
pub const MAX_NAME_LEN: usize = 255;

/// An nf_tables address family (`NFPROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `inet`: IPv4 and IPv6 together.
    Inet,
    /// `ip`: IPv4.
    Ip,
    /// `ip6`: IPv6.
    Ip6,
    /// `arp`.
    Arp,
    /// `bridge`.
    Bridge,
    /// `netdev`.
    Netdev,
}

impl From<cni_attribution::names::NftFamily> for Family {
    fn from(f: cni_attribution::names::NftFamily) -> Family {
        use cni_attribution::names::NftFamily as F;
        match f {
            F::Inet => Family::Inet,
            F::Ip => Family::Ip,
            F::Ip6 => Family::Ip6,
            F::Bridge => Family::Bridge,
        }
    }
}

impl Family {
    /// The `NFPROTO_*` number.
    pub fn number(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Ip => 2,
            Family::Arp => 3,
            Family::Netdev => 5,
            Family::Bridge => 7,
            Family::Ip6 => 10,
        }
    }

    /// The family matching an address: `ip` for IPv4, `ip6` for IPv6.
    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::Ip,
            IpAddr::V6(_) => Family::Ip6,
        }
    }

    /// The name `nft` uses.
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Arp => "arp",
            Family::Bridge => "bridge",
            Family::Netdev => "netdev",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks a table, chain or set name before it is sent.
pub(crate) fn check_name(kind: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
        return Err(Error::Invalid(format!(
            "{kind} name {name:?} must be 1 to {MAX_NAME_LEN} bytes without NUL"
        )));
    }
    Ok(())
}

/// The type of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    /// `filter`.
    Filter,
    /// `nat`: sees the first packet of each connection only.
    Nat,
    /// `route`: re-routes packets whose mark or addresses changed (output hook only).
    Route,
}

impl ChainType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
            ChainType::Route => "route",
        }
    }
}

/// The netfilter hook a base chain is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `prerouting`.
    Prerouting,
    /// `input`.
    Input,
    /// `forward`.
    Forward,
    /// `output`.
    Output,
    /// `postrouting`.
    Postrouting,
}

impl Hook {
    pub(crate) fn number(self) -> u32 {
        match self {
            Hook::Prerouting => 0,
            Hook::Input => 1,
            Hook::Forward => 2,
            Hook::Output => 3,
            Hook::Postrouting => 4,
        }
    }
}

/// Standard base-chain priorities (`nft`'s named priorities for the ip/ip6/inet families).
pub mod priority {
    /// `raw`.
    pub const RAW: i32 = -300;
    /// `mangle`.
    pub const MANGLE: i32 = -150;
    /// `dstnat`.
    pub const DSTNAT: i32 = -100;
    /// `filter`.
    pub const FILTER: i32 = 0;
    /// `security`.
    pub const SECURITY: i32 = 50;
    /// `srcnat`.
    pub const SRCNAT: i32 = 100;
}

/// A base chain's default verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
}

impl Policy {
    pub(crate) fn number(self) -> u32 {
        match self {
            Policy::Drop => 0,
            Policy::Accept => 1,
        }
    }
}

/// What makes a chain a base chain: it is attached to a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    /// `filter`, `nat` or `route`.
    pub chain_type: ChainType,
    /// The hook.
    pub hook: Hook,
    /// Lower runs first; see [`priority`].
    pub priority: i32,
    /// Default verdict; `None` leaves the kernel default (accept).
    pub policy: Option<Policy>,
}

/// A chain to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Family of its table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Chain name.
    pub name: String,
    /// `Some` for a base chain.
    pub base: Option<BaseChain>,
}

impl Chain {
    /// A regular chain, reached only by jump or goto.
    pub fn regular(family: Family, table: &str, name: &str) -> Self {
        Chain {
            family,
            table: table.to_string(),
            name: name.to_string(),
            base: None,
        }
    }

    /// A base chain attached to `hook` at `priority`.
    pub fn base(
        family: Family,
        table: &str,
        name: &str,
        chain_type: ChainType,
        hook: Hook,
        priority: i32,
    ) -> Self {
        Chain {
            base: Some(BaseChain {
                chain_type,
                hook,
                priority,
                policy: None,
            }),
            ..Chain::regular(family, table, name)
        }
    }

    /// Sets the policy of a base chain (ignored for a regular chain).
    pub fn with_policy(mut self, policy: Policy) -> Self {
        if let Some(base) = self.base.as_mut() {
            base.policy = Some(policy);
        }
        self
    }
}

/// The type of a set key or map value, with `nft`'s type id so `nft list` can show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetType {
    /// `ipv4_addr`.
    Ipv4Addr,
    /// `ipv6_addr`.
    Ipv6Addr,
    /// `inet_proto` (one byte).
    InetProto,
    /// `inet_service` (a port, big-endian).
    InetService,
    /// `mark` (host byte order).
    Mark,
    /// `ifname` (16 bytes, NUL padded).
    IfName,
}

impl SetType {
    /// `nft`'s datatype number (include/datatype.h).
    pub(crate) fn type_id(self) -> u32 {
        match self {
            SetType::Ipv4Addr => 7,
            SetType::Ipv6Addr => 8,
            SetType::InetProto => 12,
            SetType::InetService => 13,
            SetType::Mark => 19,
            SetType::IfName => 41,
        }
    }

    /// Length of a value in bytes.
    pub fn byte_len(self) -> u32 {
        match self {
            SetType::Ipv4Addr => 4,
            SetType::Ipv6Addr => 16,
            SetType::InetProto => 1,
            SetType::InetService => 2,
            SetType::Mark => 4,
            SetType::IfName => 16,
        }
    }
}

/// A named set (or, with `data`, a map) to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// Family of its table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Set name.
    pub name: String,
    /// Key type.
    pub key: SetType,
    /// Value type for a map; `None` for a plain set.
    pub data: Option<SetType>,
}

impl Set {
    /// A plain set of `key` values.
    pub fn new(family: Family, table: &str, name: &str, key: SetType) -> Self {
        Set {
            family,
            table: table.to_string(),
            name: name.to_string(),
            key,
            data: None,
        }
    }

    /// A map from `key` to `data` values.
    pub fn map(family: Family, table: &str, name: &str, key: SetType, data: SetType) -> Self {
        Set {
            data: Some(data),
            ..Set::new(family, table, name, key)
        }
    }
}

/// The bytes of an address as the kernel sees them in a packet (and in a set's keys).
pub(crate) fn addr_bytes(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// One set element (key, plus the value for a map), as raw bytes in the set's types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElement {
    /// The key bytes.
    pub key: Vec<u8>,
    /// The mapped value bytes for a map.
    pub data: Option<Vec<u8>>,
}

impl SetElement {
    /// An element from raw key bytes.
    pub fn new(key: Vec<u8>) -> Self {
        SetElement { key, data: None }
    }

    /// An address element (4 or 16 bytes).
    pub fn addr(addr: IpAddr) -> Self {
        Self::new(addr_bytes(addr))
    }

    /// A port element (big-endian).
    pub fn port(port: u16) -> Self {
        Self::new(port.to_be_bytes().to_vec())
    }

    /// Adds a map value.
    pub fn with_data(mut self, data: Vec<u8>) -> Self {
        self.data = Some(data);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("table", "cni_hostport").is_ok());
        assert!(check_name("table", "").is_err());
        assert!(check_name("chain", "a\0b").is_err());
        assert!(check_name("chain", &"x".repeat(256)).is_err());
    }

    #[test]
    fn family_numbers_match_nfproto() {
        assert_eq!(Family::Inet.number(), 1);
        assert_eq!(Family::Ip.number(), 2);
        assert_eq!(Family::Ip6.number(), 10);
        assert_eq!(Family::of("fd00::1".parse().unwrap()), Family::Ip6);
        assert_eq!(Family::Ip6.to_string(), "ip6");
    }
}
