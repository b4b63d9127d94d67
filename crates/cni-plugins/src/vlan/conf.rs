//! The vlan plugin's config: decoding and the checks made before the kernel is touched.

use cni_types::{CniError, Dns, NetConf};

use crate::common::conf::{field, flag};
use crate::common::sublink::{master_key, mtu_key};

/// A decoded vlan config.
#[derive(Debug, Clone, PartialEq)]
pub struct VlanConf {
    /// The parent link (required).
    pub master: String,
    /// 0-4094.
    pub vlan_id: u16,
    /// Bounded by the master's MTU at ADD and CHECK.
    pub mtu: Option<u32>,
    pub link_in_container: bool,
    /// `ipam.type` is set (required for ADD).
    pub has_ipam: bool,
    pub dns: Dns,
}

impl VlanConf {
    pub fn parse(conf: &NetConf) -> Result<VlanConf, CniError> {
        let raw = &conf.raw;
        let master = master_key(raw)?.ok_or_else(|| {
            CniError::invalid_config(
                "\"master\" field is required. It specifies the host interface name to create the VLAN for.",
            )
        })?;
        let id = field::<i64>(raw, "vlanId")?.unwrap_or(0);
        let vlan_id = u16::try_from(id)
            .ok()
            .filter(|id| *id <= 4094)
            .ok_or_else(|| {
                CniError::invalid_config(format!(
                    "invalid VLAN ID {id} (must be between 0 and 4094 inclusive)"
                ))
            })?;
        Ok(VlanConf {
            master,
            vlan_id,
            mtu: mtu_key(raw)?,
            link_in_container: flag(raw, "linkInContainer")?,
            has_ipam: !conf.ipam_type.is_empty(),
            dns: conf.dns.clone(),
        })
    }

    /// Every command needs an IPAM plugin, as in Go.
    pub fn require_ipam(&self) -> Result<(), CniError> {
        if self.has_ipam {
            Ok(())
        } else {
            Err(CniError::invalid_config("vlan: IPAM must be specified"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<VlanConf, CniError> {
        VlanConf::parse(&NetConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn every_key() {
        let c = parse(
            r#"{"name":"n","type":"vlan","master":"eth0","vlanId":100,"mtu":1400,
                "linkInContainer":true,"ipam":{"type":"host-local"},"dns":{"domain":"x"}}"#,
        )
        .unwrap();
        assert_eq!(
            (c.master.as_str(), c.vlan_id, c.mtu),
            ("eth0", 100, Some(1400))
        );
        assert!(c.link_in_container && c.has_ipam);
        assert_eq!(c.dns.domain, "x");
        assert!(c.require_ipam().is_ok());
    }

    #[test]
    fn defaults_and_requirements() {
        let c = parse(r#"{"name":"n","master":"eth0"}"#).unwrap();
        assert_eq!((c.vlan_id, c.mtu), (0, None));
        assert_eq!(c.require_ipam().unwrap_err().code, 7);
        let e = parse(r#"{"name":"n"}"#).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("master"));
        assert_eq!(parse(r#"{"name":"n","master":""}"#).unwrap_err().code, 7);
    }

    #[test]
    fn vlan_id_range() {
        for ok in [0, 1, 4094] {
            let c = parse(&format!(r#"{{"name":"n","master":"m","vlanId":{ok}}}"#)).unwrap();
            assert_eq!(i64::from(c.vlan_id), ok);
        }
        for bad in ["-1", "4095", "70000", "1.5", "\"5\""] {
            let e = parse(&format!(r#"{{"name":"n","master":"m","vlanId":{bad}}}"#)).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
        }
    }
}
