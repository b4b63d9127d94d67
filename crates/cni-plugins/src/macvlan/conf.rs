//! The macvlan plugin's config: decoding, defaults and the MAC sources.

use cni_linux::rtnl::virt::MacvlanMode;
use cni_linux::MacAddr;
use cni_types::{CniArgs, CniError, Dns, NetConf};

use crate::common::conf::{container_mac, field, flag};
use crate::common::sublink::{master_key, mtu_key};

/// A decoded macvlan config.
#[derive(Debug, Clone, PartialEq)]
pub struct MacvlanConf {
    /// The parent link; `None` means the default-route interface.
    pub master: Option<String>,
    pub mode: MacvlanMode,
    pub mtu: Option<u32>,
    /// From `runtimeConfig.mac`, then CNI_ARGS `MAC` / `args.cni.mac`, then the `mac` key.
    pub mac: Option<MacAddr>,
    pub link_in_container: bool,
    /// Broadcast queue length, 0 for the kernel default.
    pub bc_queue_len: u32,
    /// `ipam.type` is set; otherwise the link is L2 only.
    pub layer3: bool,
    pub dns: Dns,
}

/// Go's `modeFromString`: empty is bridge.
pub fn parse_mode(s: &str) -> Result<MacvlanMode, CniError> {
    match s {
        "" | "bridge" => Ok(MacvlanMode::Bridge),
        "private" => Ok(MacvlanMode::Private),
        "vepa" => Ok(MacvlanMode::Vepa),
        "passthru" => Ok(MacvlanMode::Passthru),
        other => Err(CniError::invalid_config(format!(
            "unknown macvlan mode: {other:?}"
        ))),
    }
}

/// The mode's name as the config spells it.
pub fn mode_name(mode: MacvlanMode) -> &'static str {
    match mode {
        MacvlanMode::Bridge => "bridge",
        MacvlanMode::Private => "private",
        MacvlanMode::Vepa => "vepa",
        MacvlanMode::Passthru => "passthru",
    }
}

impl MacvlanConf {
    pub fn parse(conf: &NetConf, cni_args: &CniArgs) -> Result<MacvlanConf, CniError> {
        let raw = &conf.raw;
        let config_mac = field::<String>(raw, "mac")?
            .filter(|m| !m.is_empty())
            .map(|m| {
                m.parse::<MacAddr>()
                    .map_err(|_| CniError::invalid_config(format!("invalid MAC address {m:?}")))
            })
            .transpose()?;
        let bc_queue_len = field::<u32>(raw, "bcqueuelen")?.unwrap_or(0);
        Ok(MacvlanConf {
            master: master_key(raw)?,
            mode: parse_mode(&field::<String>(raw, "mode")?.unwrap_or_default())?,
            mtu: mtu_key(raw)?,
            mac: container_mac(conf, cni_args)?.or(config_mac),
            link_in_container: flag(raw, "linkInContainer")?,
            bc_queue_len,
            layer3: !conf.ipam_type.is_empty(),
            dns: conf.dns.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str, args: &str) -> Result<MacvlanConf, CniError> {
        let conf = NetConf::parse(json.as_bytes()).unwrap();
        MacvlanConf::parse(&conf, &CniArgs::parse(args).unwrap())
    }

    #[test]
    fn defaults() {
        let c = parse(r#"{"name":"n","type":"macvlan"}"#, "").unwrap();
        assert_eq!(c.master, None);
        assert_eq!(c.mode, MacvlanMode::Bridge);
        assert_eq!((c.mtu, c.mac, c.bc_queue_len), (None, None, 0));
        assert!(!c.layer3 && !c.link_in_container);
    }

    #[test]
    fn every_key() {
        let c = parse(
            r#"{"name":"n","type":"macvlan","master":"eth1","mode":"vepa","mtu":1400,
                "mac":"02:00:00:00:00:01","linkInContainer":true,"bcqueuelen":100,
                "ipam":{"type":"host-local"},"dns":{"nameservers":["198.18.0.53"]}}"#,
            "",
        )
        .unwrap();
        assert_eq!(c.master.as_deref(), Some("eth1"));
        assert_eq!(c.mode, MacvlanMode::Vepa);
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:01");
        assert!(c.link_in_container && c.layer3);
        assert_eq!(c.bc_queue_len, 100);
        assert_eq!(c.dns.nameservers, ["198.18.0.53"]);
    }

    #[test]
    fn modes() {
        for m in ["", "bridge", "private", "vepa", "passthru"] {
            let mode = parse_mode(m).unwrap();
            if !m.is_empty() {
                assert_eq!(mode_name(mode), m);
            }
        }
        assert_eq!(parse_mode("Bridge").unwrap_err().code, 7);
        assert_eq!(parse_mode("source").unwrap_err().code, 7);
    }

    #[test]
    fn mac_precedence_runtime_config_then_args_then_config() {
        let base = r#""name":"n","type":"macvlan","mac":"02:00:00:00:00:01""#;
        let c = parse(&format!("{{{base}}}"), "").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:01");
        let c = parse(&format!("{{{base}}}"), "MAC=02:00:00:00:00:02").unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:02");
        let c = parse(
            &format!(r#"{{{base},"runtimeConfig":{{"mac":"02:00:00:00:00:03"}}}}"#),
            "MAC=02:00:00:00:00:02",
        )
        .unwrap();
        assert_eq!(c.mac.unwrap().to_string(), "02:00:00:00:00:03");
    }

    #[test]
    fn bad_values_are_code_7() {
        for json in [
            r#"{"name":"n","mode":"nope"}"#,
            r#"{"name":"n","mtu":-5}"#,
            r#"{"name":"n","mac":"zz"}"#,
            r#"{"name":"n","bcqueuelen":-1}"#,
            r#"{"name":"n","linkInContainer":"yes"}"#,
            r#"{"name":"n","master":false}"#,
        ] {
            assert_eq!(parse(json, "").unwrap_err().code, 7, "{json}");
        }
        assert_eq!(parse(r#"{"name":"n"}"#, "FOO=1").unwrap_err().code, 4);
    }
}
