//! A node's subnet lease as flannel stores it: the key `<prefix>/subnets/<net>-<len>` holding
//! `{"PublicIP":…,"BackendType":…,"BackendData":{…}}`.

use std::net::Ipv4Addr;

use cni_linux::MacAddr;
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// The value of a lease key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAttrs {
    /// The node's underlay address.
    #[serde(rename = "PublicIP")]
    pub public_ip: Ipv4Addr,
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
}

/// What a remote VXLAN node publishes about its tunnel endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendData {
    /// VXLAN network identifier.
    #[serde(rename = "VNI", default, skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    /// The MAC of the node's VXLAN device.
    #[serde(rename = "VtepMAC", default, skip_serializing_if = "Option::is_none")]
    pub vtep_mac: Option<String>,
}

impl BackendData {
    /// The VTEP MAC, when present and well-formed.
    pub fn vtep_mac(&self) -> Option<MacAddr> {
        self.vtep_mac.as_deref().and_then(|s| s.parse().ok())
    }
}

/// One node's lease: its subnet and what it published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The node subnet.
    pub subnet: Ipv4Net,
    /// The published attributes.
    pub attrs: LeaseAttrs,
}

/// The key prefix under which leases live.
pub fn subnets_prefix(prefix: &str) -> String {
    format!("{}/subnets/", prefix.trim_end_matches('/'))
}

/// The lease key of `subnet`: `<prefix>/subnets/198.19.3.0-24`.
pub fn subnet_key(prefix: &str, subnet: Ipv4Net) -> String {
    format!(
        "{}{}-{}",
        subnets_prefix(prefix),
        subnet.network(),
        subnet.prefix_len()
    )
}

/// The subnet a lease key names, if the key is under `prefix` and well-formed.
pub fn parse_subnet_key(prefix: &str, key: &str) -> Option<Ipv4Net> {
    let rest = key.strip_prefix(&subnets_prefix(prefix))?;
    let (ip, len) = rest.split_once('-')?;
    let net = Ipv4Net::new(ip.parse().ok()?, len.parse().ok()?).ok()?;
    (net.network() == net.addr()).then_some(net)
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
        let key = subnet_key("/rcni.io/network", net);
        assert_eq!(key, "/rcni.io/network/subnets/198.19.3.0-24");
        assert_eq!(parse_subnet_key("/rcni.io/network/", &key), Some(net));
        assert_eq!(parse_subnet_key("/other", &key), None);
        assert_eq!(
            parse_subnet_key("/p", "/p/subnets/198.19.3.1-24"),
            None,
            "host bits set"
        );
        assert_eq!(parse_subnet_key("/p", "/p/subnets/junk"), None);
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
    }
}
