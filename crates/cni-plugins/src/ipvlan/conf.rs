//! The ipvlan plugin's config: decoding, defaults, and the chained-master rule.

use cni_linux::rtnl::virt::IpvlanMode;
use cni_types::{CniError, CniResult, Dns, NetConf};

use crate::common::conf::{field, flag};
use crate::common::sublink::{master_key, mtu_key};

/// A decoded ipvlan config.
#[derive(Debug, Clone, PartialEq)]
pub struct IpvlanConf {
    /// The parent link as configured; see [`IpvlanConf::master_name`] for the default.
    pub master: Option<String>,
    pub mode: IpvlanMode,
    /// Not bounded by the master's MTU (as in Go).
    pub mtu: Option<u32>,
    pub link_in_container: bool,
    /// `ipam.type` is set.
    pub has_ipam: bool,
    pub dns: Dns,
}

/// Go's `modeFromString`: empty is l2.
pub fn parse_mode(s: &str) -> Result<IpvlanMode, CniError> {
    match s {
        "" | "l2" => Ok(IpvlanMode::L2),
        "l3" => Ok(IpvlanMode::L3),
        "l3s" => Ok(IpvlanMode::L3s),
        other => Err(CniError::invalid_config(format!(
            "unknown ipvlan mode: {other:?}"
        ))),
    }
}

pub fn mode_name(mode: IpvlanMode) -> &'static str {
    match mode {
        IpvlanMode::L2 => "l2",
        IpvlanMode::L3 => "l3",
        IpvlanMode::L3s => "l3s",
    }
}

impl IpvlanConf {
    pub fn parse(conf: &NetConf) -> Result<IpvlanConf, CniError> {
        let raw = &conf.raw;
        Ok(IpvlanConf {
            master: master_key(raw)?,
            mode: parse_mode(&field::<String>(raw, "mode")?.unwrap_or_default())?,
            mtu: mtu_key(raw)?,
            link_in_container: flag(raw, "linkInContainer")?,
            has_ipam: !conf.ipam_type.is_empty(),
            dns: conf.dns.clone(),
        })
    }

    /// The master to use: the configured one; when chained, the single named interface of
    /// `prev`; `None` means "the default-route interface".
    pub fn master_name(&self, prev: Option<&CniResult>) -> Result<Option<String>, CniError> {
        if let Some(m) = &self.master {
            return Ok(Some(m.clone()));
        }
        match prev {
            None => Ok(None),
            Some(r) if r.interfaces.len() == 1 && !r.interfaces[0].name.is_empty() => {
                Ok(Some(r.interfaces[0].name.clone()))
            }
            Some(_) => Err(CniError::invalid_config(
                "chained master failure. PrevResult lacks a single named interface",
            )),
        }
    }

    /// Where ADD gets addresses: IPAM when set, else a `prevResult` that holds IPs.
    pub fn chained_ips(&self, prev: Option<&CniResult>) -> Result<Option<CniResult>, CniError> {
        if self.has_ipam {
            return Ok(None);
        }
        match prev {
            Some(r) if !r.ips.is_empty() => Ok(Some(r.clone())),
            _ => Err(CniError::invalid_config("ipvlan: IPAM must be specified")),
        }
    }
}

#[cfg(test)]
mod tests {
    use cni_types::{Interface, IpConfig, SpecVersion};

    use super::*;

    fn parse(json: &str) -> Result<IpvlanConf, CniError> {
        IpvlanConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    fn prev(names: &[&str], with_ip: bool) -> CniResult {
        let mut r = CniResult::new(SpecVersion::ALL[SpecVersion::ALL.len() - 1]);
        r.interfaces = names
            .iter()
            .map(|n| Interface {
                name: n.to_string(),
                ..Interface::default()
            })
            .collect();
        if with_ip {
            r.ips.push(IpConfig {
                interface: Some(0),
                address: "198.18.1.5/24".parse().unwrap(),
                gateway: None,
            });
        }
        r
    }

    #[test]
    fn defaults_and_every_key() {
        let c = parse(r#"{"name":"n","type":"ipvlan"}"#).unwrap();
        assert_eq!((c.master, c.mode, c.mtu), (None, IpvlanMode::L2, None));
        assert!(!c.has_ipam && !c.link_in_container);
        let c = parse(
            r#"{"name":"n","type":"ipvlan","master":"eth1","mode":"l3s","mtu":9000,
                "linkInContainer":true,"ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        assert_eq!(c.master.as_deref(), Some("eth1"));
        assert_eq!((c.mode, c.mtu), (IpvlanMode::L3s, Some(9000)));
        assert!(c.has_ipam && c.link_in_container);
    }

    #[test]
    fn modes() {
        for m in ["l2", "l3", "l3s"] {
            assert_eq!(mode_name(parse_mode(m).unwrap()), m);
        }
        assert_eq!(parse_mode("").unwrap(), IpvlanMode::L2);
        assert_eq!(parse_mode("L2").unwrap_err().code, 7);
        assert_eq!(
            parse(r#"{"name":"n","mode":"bridge"}"#).unwrap_err().code,
            7
        );
        assert_eq!(parse(r#"{"name":"n","mtu":-1}"#).unwrap_err().code, 7);
    }

    #[test]
    fn chained_master_is_the_single_prev_interface() {
        let c = parse(r#"{"name":"n"}"#).unwrap();
        assert_eq!(c.master_name(None).unwrap(), None);
        assert_eq!(
            c.master_name(Some(&prev(&["eth0"], true)))
                .unwrap()
                .as_deref(),
            Some("eth0")
        );
        assert_eq!(
            c.master_name(Some(&prev(&["a", "b"], true)))
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(c.master_name(Some(&prev(&[""], true))).unwrap_err().code, 7);
        let c = parse(r#"{"name":"n","master":"m0"}"#).unwrap();
        assert_eq!(
            c.master_name(Some(&prev(&["a", "b"], true)))
                .unwrap()
                .as_deref(),
            Some("m0")
        );
    }

    #[test]
    fn ipam_or_chained_ips_required() {
        let c = parse(r#"{"name":"n"}"#).unwrap();
        assert_eq!(c.chained_ips(None).unwrap_err().code, 7);
        assert_eq!(
            c.chained_ips(Some(&prev(&["eth0"], false)))
                .unwrap_err()
                .code,
            7
        );
        let r = c
            .chained_ips(Some(&prev(&["eth0"], true)))
            .unwrap()
            .unwrap();
        assert_eq!(r.ips.len(), 1);
        let c = parse(r#"{"name":"n","ipam":{"type":"static"}}"#).unwrap();
        assert!(c
            .chained_ips(Some(&prev(&["eth0"], true)))
            .unwrap()
            .is_none());
    }
}
