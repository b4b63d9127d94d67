//! A node's subnet lease as flannel stores it: the key `<prefix>/subnets/<net>-<len>` (dual-stack:
//! `<net>-<len>&<net6>-<len6>`, IPv6-only: `0.0.0.0-0&<net6>-<len6>`) holding
//! `{"PublicIP":…,"PublicIPv6":…,"BackendType":…,"BackendData":{…},"BackendV6Data":{…}}`.
//!
//! rcni adds `rcniNodeName`, the node's `--node-name`: flannel's readers ignore unknown fields,
//! and it tells an operator (or `etcdctl get`) which node holds which subnet.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use cni_linux::MacAddr;
use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

/// The value of a lease key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAttrs {
    /// The node's underlay IPv4 address (`0.0.0.0` on an IPv6-only node, as flannel writes it).
    #[serde(rename = "PublicIP")]
    pub public_ip: Ipv4Addr,
    /// The node's underlay IPv6 address, on an IPv6 network.
    #[serde(
        rename = "PublicIPv6",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ipv6: Option<Ipv6Addr>,
    /// `host-gw` or `vxlan`.
    #[serde(rename = "BackendType")]
    pub backend_type: String,
    /// Backend-specific data: for VXLAN `{"VNI":1,"VtepMAC":"…"}`.
    #[serde(
        rename = "BackendData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backend_data: Option<BackendData>,
    /// The same for the IPv6 tunnel (its own device and MAC).
    #[serde(
        rename = "BackendV6Data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backend_v6_data: Option<BackendData>,
    /// The node's name (an rcni extension flannel ignores).
    #[serde(
        rename = "rcniNodeName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub node_name: Option<String>,
}

impl LeaseAttrs {
    /// The public IPv4 address, unless it is flannel's "none" (`0.0.0.0`).
    pub fn public_ipv4(&self) -> Option<Ipv4Addr> {
        (!self.public_ip.is_unspecified()).then_some(self.public_ip)
    }
}

/// What a remote node publishes about its tunnel endpoint: for VXLAN `{"VNI":1,"VtepMAC":"…"}`,
/// for WireGuard `{"PublicKey":"<base64>","Port":51820}` (flannel's `wireguardLeaseAttrs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendData {
    /// VXLAN network identifier.
    #[serde(rename = "VNI", default, skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    /// The MAC of the node's VXLAN device.
    #[serde(rename = "VtepMAC", default, skip_serializing_if = "Option::is_none")]
    pub vtep_mac: Option<String>,
    /// The node's WireGuard public key, base64.
    #[serde(rename = "PublicKey", default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The UDP port the node's WireGuard device listens on.
    #[serde(rename = "Port", default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl BackendData {
    /// The VTEP MAC, when present and well-formed.
    pub fn vtep_mac(&self) -> Option<MacAddr> {
        self.vtep_mac.as_deref().and_then(|s| s.parse().ok())
    }

    /// The WireGuard public key, when present and well-formed.
    pub fn wireguard_key(&self) -> Option<cni_linux::wireguard::PublicKey> {
        self.public_key.as_deref().and_then(|s| s.parse().ok())
    }
}

/// A node's subnets: one per enabled family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subnets {
    /// The IPv4 node subnet.
    pub v4: Option<Ipv4Net>,
    /// The IPv6 node subnet.
    pub v6: Option<Ipv6Net>,
}

impl fmt::Display for Subnets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.v4, self.v6) {
            (Some(v4), Some(v6)) => write!(f, "{v4},{v6}"),
            (Some(v4), None) => write!(f, "{v4}"),
            (None, Some(v6)) => write!(f, "{v6}"),
            (None, None) => f.write_str("none"),
        }
    }
}

impl From<Ipv4Net> for Subnets {
    fn from(v4: Ipv4Net) -> Self {
        Subnets {
            v4: Some(v4),
            v6: None,
        }
    }
}

/// One node's lease: its subnets and what it published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The node subnets.
    pub subnet: Subnets,
    /// The published attributes.
    pub attrs: LeaseAttrs,
}

/// The key prefix under which leases live.
pub fn subnets_prefix(prefix: &str) -> String {
    format!("{}/subnets/", prefix.trim_end_matches('/'))
}

/// The lease key of `subnet`: `<prefix>/subnets/198.19.3.0-24`, with `&2001:2:0:3::-64` for
/// the IPv6 subnet (flannel's `MakeSubnetKey`).
pub fn subnet_key(prefix: &str, subnet: Subnets) -> String {
    let v4 = match subnet.v4 {
        Some(n) => format!("{}-{}", n.network(), n.prefix_len()),
        None => "0.0.0.0-0".to_string(),
    };
    match subnet.v6 {
        Some(n) => format!(
            "{}{v4}&{}-{}",
            subnets_prefix(prefix),
            n.network(),
            n.prefix_len()
        ),
        None => format!("{}{v4}", subnets_prefix(prefix)),
    }
}

/// The subnets a lease key names, if the key is under `prefix` and well-formed.
pub fn parse_subnet_key(prefix: &str, key: &str) -> Option<Subnets> {
    let rest = key.strip_prefix(&subnets_prefix(prefix))?;
    let (v4, v6) = match rest.split_once('&') {
        Some((v4, v6)) => (v4, Some(v6)),
        None => (rest, None),
    };
    let (ip, len) = v4.split_once('-')?;
    let net4 = Ipv4Net::new(ip.parse().ok()?, len.parse().ok()?).ok()?;
    let net6 = match v6 {
        Some(v6) => {
            let (ip, len) = v6.rsplit_once('-')?;
            let net = Ipv6Net::new(ip.parse().ok()?, len.parse().ok()?).ok()?;
            (net.network() == net.addr()).then_some(Some(net))?
        }
        None => None,
    };
    // `0.0.0.0-0` is flannel's "no IPv4 subnet", only meaningful next to an IPv6 one.
    let v4 = if net4.prefix_len() == 0 && net4.addr().is_unspecified() {
        net6?;
        None
    } else {
        (net4.network() == net4.addr()).then_some(Some(net4))?
    };
    Some(Subnets { v4, v6: net6 })
}

/// Decodes a lease from its key and value; `None` (logged) for anything malformed, which a
/// node skips rather than fail on.
pub fn decode(prefix: &str, key: &str, value: &[u8]) -> Option<Lease> {
    let subnet = parse_subnet_key(prefix, key)?;
    match serde_json::from_slice::<LeaseAttrs>(value) {
        Ok(attrs) => Some(Lease { subnet, attrs }),
        Err(e) => {
            log::warn!("ignoring malformed lease {key}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_flannels_layout() {
        let net: Ipv4Net = "198.19.3.0/24".parse().unwrap();
        let key = subnet_key("/rcni.io/network", net.into());
        assert_eq!(key, "/rcni.io/network/subnets/198.19.3.0-24");
        assert_eq!(
            parse_subnet_key("/rcni.io/network/", &key),
            Some(net.into())
        );
        assert_eq!(parse_subnet_key("/other", &key), None);
        assert_eq!(
            parse_subnet_key("/p", "/p/subnets/198.19.3.1-24"),
            None,
            "host bits set"
        );
        assert_eq!(parse_subnet_key("/p", "/p/subnets/junk"), None);
    }

    #[test]
    fn dual_stack_and_ipv6_only_keys_follow_flannels_layout() {
        let v6: Ipv6Net = "2001:2:0:3::/64".parse().unwrap();
        let both = Subnets {
            v4: Some("198.19.3.0/24".parse().unwrap()),
            v6: Some(v6),
        };
        let key = subnet_key("/p", both);
        assert_eq!(key, "/p/subnets/198.19.3.0-24&2001:2:0:3::-64");
        assert_eq!(parse_subnet_key("/p", &key), Some(both));
        let only6 = Subnets {
            v4: None,
            v6: Some(v6),
        };
        let key = subnet_key("/p", only6);
        assert_eq!(key, "/p/subnets/0.0.0.0-0&2001:2:0:3::-64");
        assert_eq!(parse_subnet_key("/p", &key), Some(only6));
        assert_eq!(parse_subnet_key("/p", "/p/subnets/0.0.0.0-0"), None);
        assert_eq!(
            parse_subnet_key("/p", "/p/subnets/198.19.3.0-24&2001:2:0:3::1-64"),
            None,
            "host bits set"
        );
    }

    #[test]
    fn lease_values_round_trip_flannels_json() {
        let flannel = br#"{"PublicIP":"198.18.0.2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:11:22:33:44:55"}}"#;
        let lease = decode("/p", "/p/subnets/198.19.3.0-24", flannel).unwrap();
        assert_eq!(lease.attrs.public_ip, Ipv4Addr::new(198, 18, 0, 2));
        let data = lease.attrs.backend_data.clone().unwrap();
        assert_eq!(data.vtep_mac().unwrap().to_string(), "0e:11:22:33:44:55");
        assert_eq!(
            serde_json::to_vec(&lease.attrs).unwrap(),
            flannel.to_vec(),
            "byte-identical to flannel's encoding"
        );
        let hostgw = br#"{"PublicIP":"198.18.0.2","BackendType":"host-gw"}"#;
        let lease = decode("/p", "/p/subnets/198.19.4.0-24", hostgw).unwrap();
        assert_eq!(lease.attrs.backend_data, None);
        assert_eq!(decode("/p", "/p/subnets/198.19.4.0-24", b"{"), None);
        let dual = br#"{"PublicIP":"198.18.0.2","PublicIPv6":"2001:2::2","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:11:22:33:44:55"},"BackendV6Data":{"VNI":1,"VtepMAC":"0e:11:22:33:44:66"},"rcniNodeName":"n1"}"#;
        let lease = decode("/p", "/p/subnets/198.19.4.0-24&2001:2:0:4::-64", dual).unwrap();
        assert_eq!(lease.attrs.public_ipv6, Some("2001:2::2".parse().unwrap()));
        assert_eq!(lease.attrs.node_name.as_deref(), Some("n1"));
        assert_eq!(serde_json::to_vec(&lease.attrs).unwrap(), dual.to_vec());
        // flannel's WireGuard lease, both families.
        let wg = br#"{"PublicIP":"198.18.0.2","PublicIPv6":"2001:2::2","BackendType":"wireguard","BackendData":{"PublicKey":"HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=","Port":51820},"BackendV6Data":{"PublicKey":"HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=","Port":51821}}"#;
        let lease = decode("/p", "/p/subnets/198.19.4.0-24&2001:2:0:4::-64", wg).unwrap();
        let data = lease.attrs.backend_data.clone().unwrap();
        assert_eq!(data.port, Some(51820));
        assert_eq!(
            data.wireguard_key().unwrap().to_string(),
            "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
        );
        assert_eq!(
            lease.attrs.backend_v6_data.as_ref().unwrap().port,
            Some(51821)
        );
        assert_eq!(serde_json::to_vec(&lease.attrs).unwrap(), wg.to_vec());
    }
}
