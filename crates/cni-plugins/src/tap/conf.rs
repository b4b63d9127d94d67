//! The tap config.

use cni_linux::MacAddr;
use cni_types::{CniArgs, CniError, Dns, NetConf};

use crate::common::conf::{container_mac, field, flag};
use crate::common::sublink::mtu_key;

#[derive(Debug, Clone, PartialEq)]
pub struct TapConf {
    /// From `runtimeConfig.mac`, then CNI_ARGS `MAC` / `args.cni.mac`, then the `mac` key.
    pub mac: Option<MacAddr>,
    pub mtu: Option<u32>,
    pub multi_queue: bool,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// A bridge in the container to enslave the tap to.
    pub bridge: Option<String>,
    pub layer3: bool,
    pub dns: Dns,
}

impl TapConf {
    pub fn parse(conf: &NetConf, cni_args: &CniArgs) -> Result<TapConf, CniError> {
        let raw = &conf.raw;
        if field::<String>(raw, "selinuxcontext")?.is_some_and(|s| !s.is_empty()) {
            return Err(CniError::invalid_config(
                "tap: selinuxcontext is not supported by rcni",
            ));
        }
        let config_mac = field::<String>(raw, "mac")?
            .filter(|m| !m.is_empty())
            .map(|m| {
                m.parse::<MacAddr>()
                    .map_err(|_| CniError::invalid_config(format!("invalid MAC address {m:?}")))
            })
            .transpose()?;
        Ok(TapConf {
            mac: container_mac(conf, cni_args)?.or(config_mac),
            mtu: mtu_key(raw)?,
            multi_queue: flag(raw, "multiQueue")?,
            owner: field::<u32>(raw, "owner")?,
            group: field::<u32>(raw, "group")?,
            bridge: field::<String>(raw, "bridge")?.filter(|b| !b.is_empty()),
            layer3: !conf.ipam_type.is_empty(),
            dns: conf.dns.clone(),
        })
    }

    /// Go sets a vnet header only on its netlink path, taken when both ids are given.
    pub fn vnet_hdr(&self) -> bool {
        self.owner.is_some() && self.group.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<TapConf, CniError> {
        let conf = NetConf::parse(json.as_bytes()).unwrap();
        TapConf::parse(&conf, &CniArgs::parse("").unwrap())
    }

    #[test]
    fn every_key() {
        let c = parse(
            r#"{"name":"n","type":"tap","mac":"02:00:00:00:00:07","mtu":1400,"multiQueue":true,
                "owner":1000,"group":100,"bridge":"br0","ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:07");
        assert_eq!(
            (c.mtu, c.owner, c.group),
            (Some(1400), Some(1000), Some(100))
        );
        assert!(c.multi_queue && c.layer3 && c.vnet_hdr());
        assert_eq!(c.bridge.as_deref(), Some("br0"));
        let d = parse(r#"{"name":"n","owner":0}"#).unwrap();
        assert_eq!(
            (d.mac, d.mtu, d.group, d.bridge.clone()),
            (None, None, None, None)
        );
        assert!(!d.multi_queue && !d.layer3 && !d.vnet_hdr());
    }

    #[test]
    fn refusals_are_code_7() {
        for json in [
            r#"{"name":"n","selinuxcontext":"system_u:system_r:container_t:s0"}"#,
            r#"{"name":"n","owner":-1}"#,
            r#"{"name":"n","group":"wheel"}"#,
            r#"{"name":"n","multiQueue":"yes"}"#,
            r#"{"name":"n","mac":"nope"}"#,
            r#"{"name":"n","mtu":-3}"#,
        ] {
            assert_eq!(parse(json).unwrap_err().code, 7, "{json}");
        }
    }
}
