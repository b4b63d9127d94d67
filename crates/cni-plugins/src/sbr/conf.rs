//! The sbr config and the IPs of `CNI_IFNAME` in `prevResult`.

use std::net::IpAddr;

use cni_types::{CniError, CniResult, IpConfig, NetConf};

use crate::common::conf::{field, flag};

/// The first table searched for a free one.
pub const FIRST_TABLE: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbrConf {
    /// Fixed table: rules only.
    pub table: Option<u32>,
    /// Static gateways (at most one per family) used instead of `prevResult`'s.
    pub gateways: Vec<IpAddr>,
}

impl SbrConf {
    pub fn parse(conf: &NetConf) -> Result<SbrConf, CniError> {
        let raw = &conf.raw;
        if flag(raw, "addSourceHints")? {
            return Err(CniError::invalid_config(
                "sbr: addSourceHints is not supported by rcni",
            ));
        }
        if field::<String>(raw, "vrfname")?.is_some_and(|v| !v.is_empty()) {
            return Err(CniError::invalid_config(
                "sbr: vrfname is not supported by rcni (use the vrf plugin after sbr)",
            ));
        }
        let gateways = field::<Vec<IpAddr>>(raw, "gateways")?.unwrap_or_default();
        let v4 = gateways.iter().filter(|g| g.is_ipv4()).count();
        if v4 > 1 || gateways.len() - v4 > 1 {
            return Err(CniError::invalid_config(
                "sbr: at most one IPv4 and one IPv6 gateway",
            ));
        }
        Ok(SbrConf {
            table: field::<u32>(raw, "table")?,
            gateways,
        })
    }

    /// The gateway for `ip`: the configured one of its family, else its own.
    pub fn gateway_for(&self, ip: &IpConfig) -> Option<IpAddr> {
        let v4 = ip.address.addr().is_ipv4();
        self.gateways
            .iter()
            .copied()
            .find(|g| g.is_ipv4() == v4)
            .or(ip.gateway)
    }
}

/// Holds `flock(LOCK_EX)` on the netns file while alive, as Go does (so rcni and Go sbr
/// calls on one pod never pick the same table). The file is opened, never created.
pub fn lock_netns(path: &std::path::Path) -> Result<std::fs::File, CniError> {
    let file = std::fs::File::open(path).map_err(|e| {
        CniError::io(format!(
            "failed to open {} for locking: {e}",
            path.display()
        ))
    })?;
    file.lock()
        .map_err(|e| CniError::io(format!("failed to lock {}: {e}", path.display())))?;
    Ok(file)
}

/// The IPs of `ifname`: those pointing at its `interfaces` entry, and those pointing nowhere.
pub fn ips_of(prev: &CniResult, ifname: &str) -> Result<Vec<IpConfig>, CniError> {
    if prev.ips.is_empty() {
        return Err(CniError::internal(format!(
            "No IP addresses supplied on interface: {ifname}"
        )));
    }
    Ok(prev
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => usize::try_from(i)
                .ok()
                .and_then(|i| prev.interfaces.get(i))
                .is_none_or(|entry| entry.name == ifname),
        })
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SbrConf, CniError> {
        SbrConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn keys_and_refusals() {
        let c = parse(r#"{"name":"n","table":500,"gateways":["198.18.0.1","2001:2::1"]}"#).unwrap();
        assert_eq!(c.table, Some(500));
        assert_eq!(c.gateways.len(), 2);
        assert_eq!(parse(r#"{"name":"n"}"#).unwrap().table, None);
        for json in [
            r#"{"name":"n","addSourceHints":true}"#,
            r#"{"name":"n","vrfname":"red"}"#,
            r#"{"name":"n","gateways":["198.18.0.1","198.18.0.2"]}"#,
            r#"{"name":"n","gateways":["nope"]}"#,
            r#"{"name":"n","table":-1}"#,
        ] {
            assert_eq!(parse(json).unwrap_err().code, 7, "{json}");
        }
    }

    #[test]
    fn ips_of_the_interface() {
        let value: serde_json::Value = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"},{"name":"eth1","sandbox":"/x"}],
                "ips":[{"address":"198.18.0.2/24","interface":0},
                       {"address":"198.18.1.2/24","interface":1,"gateway":"198.18.1.1"},
                       {"address":"198.18.2.2/24"}]}"#,
        )
        .unwrap();
        let prev = CniResult::parse(&value, cni_types::SpecVersion::ALL[0]).unwrap();
        let ips = ips_of(&prev, "eth1").unwrap();
        let addrs: Vec<String> = ips.iter().map(|i| i.address.to_string()).collect();
        assert_eq!(addrs, ["198.18.1.2/24", "198.18.2.2/24"]);
        let c = parse(r#"{"name":"n","gateways":["198.18.1.254"]}"#).unwrap();
        assert_eq!(
            c.gateway_for(&ips[0]),
            Some("198.18.1.254".parse().unwrap())
        );
        assert_eq!(
            parse(r#"{"name":"n"}"#).unwrap().gateway_for(&ips[0]),
            Some("198.18.1.1".parse().unwrap())
        );
    }
}
