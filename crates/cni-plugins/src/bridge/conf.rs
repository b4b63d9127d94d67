//! The bridge plugin's config: decoding, defaults and the
//! checks Go makes before touching the kernel.

use cni_linux::MacAddr;
use cni_types::{CniArgs, CniError, Dns, NetConf};

use super::vlan;
use crate::common::conf::{container_mac, field, flag, mtu};

pub const DEFAULT_BRIDGE: &str = "cni0";

/// A decoded and validated bridge config.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeConf {
    pub bridge: String,
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    pub ip_masq_backend: Option<String>,
    pub mtu: Option<u32>,
    pub hairpin_mode: bool,
    pub promisc_mode: bool,
    /// Access VLAN, 0 for none.
    pub vlan: u16,
    /// Trunk VLANs, sorted and de-duplicated.
    pub vlan_trunk: Vec<u16>,
    /// `vlanTrunk` was given (even empty): a new bridge gets VLAN filtering.
    pub vlan_trunk_set: bool,
    pub preserve_default_vlan: bool,
    pub macspoofchk: bool,
    pub enable_dad: bool,
    /// `ipv6LinkLocal` (rcni only): give the container interface its IPv6 link-local address
    /// even when the attachment has no IPv6 address, as the Go plugin always does. Off by
    /// default: see `docs/compatibility.md`, bridge.
    pub ipv6_link_local: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    /// The container MAC from the `mac` capability, `args` or CNI_ARGS.
    pub mac: Option<MacAddr>,
    /// `ipam.type` is set: the attachment gets addresses.
    pub layer3: bool,
    pub dns: Dns,
}

impl BridgeConf {
    /// Decodes the config of a request. ADD-only combination checks live in
    /// [`BridgeConf::validate_for_add`].
    pub fn parse(conf: &NetConf, cni_args: &CniArgs) -> Result<BridgeConf, CniError> {
        let raw = &conf.raw;
        let bridge = field::<String>(raw, "bridge")?
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
        let vlan_id = field::<i64>(raw, "vlan")?.unwrap_or(0);
        if !(0..=4094).contains(&vlan_id) {
            return Err(CniError::invalid_config(format!(
                "invalid VLAN ID {vlan_id} (must be between 0 and 4094)"
            )));
        }
        let trunk = field::<Box<serde_json::value::RawValue>>(raw, "vlanTrunk")?;
        let vlan_trunk = match &trunk {
            Some(t) => vlan::expand_trunk(t.get())?,
            None => Vec::new(),
        };
        let is_default_gateway = flag(raw, "isDefaultGateway")?;
        // Go's bridge decodes these into structs: a non-object is refused there at decode
        // time, and here before the first kernel change (not later, by the IPAM plugin).
        for key in ["runtimeConfig", "args"] {
            let text = raw.get(key).map(|v| v.get().trim_start());
            if text.is_some_and(|t| !t.starts_with('{') && t != "null") {
                return Err(CniError::invalid_config(format!(
                    "bridge: {key} must be an object"
                )));
            }
        }
        Ok(BridgeConf {
            bridge,
            // isDefaultGateway implies isGateway.
            is_gateway: flag(raw, "isGateway")? || is_default_gateway,
            is_default_gateway,
            force_address: flag(raw, "forceAddress")?,
            ip_masq: flag(raw, "ipMasq")?,
            ip_masq_backend: field::<String>(raw, "ipMasqBackend")?,
            mtu: mtu("bridge", raw)?,
            hairpin_mode: flag(raw, "hairpinMode")?,
            promisc_mode: flag(raw, "promiscMode")?,
            vlan: u16::try_from(vlan_id).unwrap_or(0),
            vlan_trunk,
            vlan_trunk_set: trunk.is_some(),
            preserve_default_vlan: flag(raw, "preserveDefaultVlan")?,
            macspoofchk: flag(raw, "macspoofchk")?,
            enable_dad: flag(raw, "enabledad")?,
            ipv6_link_local: flag(raw, "ipv6LinkLocal")?,
            disable_container_interface: flag(raw, "disableContainerInterface")?,
            port_isolation: flag(raw, "portIsolation")?,
            mac: container_mac(conf, cni_args)?,
            layer3: !conf.ipam_type.is_empty(),
            dns: conf.dns.clone(),
        })
    }

    /// The combination checks Go makes at ADD.
    pub fn validate_for_add(&self) -> Result<(), CniError> {
        if self.layer3 && self.disable_container_interface {
            return Err(CniError::invalid_config(
                "cannot use IPAM when DisableContainerInterface flag is set",
            ));
        }
        if self.hairpin_mode && self.promisc_mode {
            return Err(CniError::invalid_config(
                "cannot set hairpin mode and promiscuous mode at the same time",
            ));
        }
        Ok(())
    }

    /// A new bridge gets VLAN filtering when any VLAN option is set.
    pub fn vlan_filtering(&self) -> bool {
        self.vlan != 0 || self.vlan_trunk_set
    }

    /// Whether the host port needs VLAN entries.
    pub fn has_vlans(&self) -> bool {
        self.vlan != 0 || !self.vlan_trunk.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<BridgeConf, CniError> {
        let conf = NetConf::parse(json.as_bytes()).unwrap();
        BridgeConf::parse(&conf, &CniArgs::default())
    }

    #[test]
    fn defaults() {
        let c = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).unwrap();
        assert_eq!(c.bridge, "cni0");
        assert!(!c.is_gateway && !c.layer3 && !c.vlan_filtering() && !c.has_vlans());
        assert_eq!(c.mtu, None);
        assert_eq!(c.mac, None);
        c.validate_for_add().unwrap();
    }

    #[test]
    fn keys_and_implications() {
        let c = parse(
            r#"{"name":"n","Bridge":"br9","isDefaultGateway":true,"MTU":1400,"hairpinMode":true,
                "vlan":7,"vlanTrunk":[{"id":5},{"minID":3,"maxID":4}],"ipam":{"type":"host-local"},
                "portIsolation":true,"enabledad":true,"dns":{"nameservers":["1.1.1.1"]},
                "unknownKey":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(c.bridge, "br9");
        assert!(c.is_gateway && c.is_default_gateway && c.layer3 && c.hairpin_mode);
        assert!(c.port_isolation && c.enable_dad);
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(c.vlan, 7);
        assert_eq!(c.vlan_trunk, [3, 4, 5]);
        assert!(c.vlan_filtering() && c.has_vlans());
        assert_eq!(c.dns.nameservers, ["1.1.1.1"]);
        assert_eq!(
            parse(r#"{"name":"n","bridge":""}"#).unwrap().bridge,
            DEFAULT_BRIDGE
        );
        assert!(parse(r#"{"name":"n","vlanTrunk":[]}"#)
            .unwrap()
            .vlan_filtering());
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            r#"{"name":"n","vlan":4095}"#,
            r#"{"name":"n","vlan":-1}"#,
            r#"{"name":"n","isGateway":"true"}"#,
            r#"{"name":"n","mtu":1500.5}"#,
            r#"{"name":"n","vlanTrunk":[{"id":0}]}"#,
            r#"{"name":"n","args":{"cni":{"mac":"nope"}}}"#,
        ] {
            assert_eq!(parse(bad).unwrap_err().code, 7, "{bad}");
        }
    }

    #[test]
    fn add_combinations() {
        let e = parse(r#"{"name":"n","hairpinMode":true,"promiscMode":true}"#)
            .unwrap()
            .validate_for_add()
            .unwrap_err();
        assert!(e.msg.contains("hairpin"));
        let e = parse(r#"{"name":"n","disableContainerInterface":true,"ipam":{"type":"x"}}"#)
            .unwrap()
            .validate_for_add()
            .unwrap_err();
        assert!(e.msg.contains("DisableContainerInterface"));
        parse(r#"{"name":"n","disableContainerInterface":true}"#)
            .unwrap()
            .validate_for_add()
            .unwrap();
    }
}
