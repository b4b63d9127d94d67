//! The portmap configuration: plugin keys, `runtimeConfig.portMappings`, and
//! the container addresses taken from `prevResult`.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use cni_nft::L4Proto;
use cni_types::go_object::as_list;
use cni_types::{CniError, CniResult, GoObject, NetConf};
use serde_json::value::RawValue;

use super::conditions::{self, Conditions, Syntax};
use crate::common::conf::{field, warn_not_honoured};

/// Go's default mark bit for hairpin masquerading (0x2000).
pub const DEFAULT_MARK_BIT: u32 = 13;

/// One entry of `runtimeConfig.portMappings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: L4Proto,
    /// `None` for "every host address" (absent, empty, `0.0.0.0` or `::`).
    pub host_ip: Option<IpAddr>,
    /// The family the hostIP restricts the mapping to (also for `0.0.0.0` / `::`).
    pub host_family_v6: Option<bool>,
}

impl PortMapping {
    /// Whether the mapping applies to container addresses of this family.
    pub fn applies_to(&self, ipv6: bool) -> bool {
        self.host_family_v6.is_none_or(|v6| v6 == ipv6)
    }
}

/// The plugin keys that change behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapConf {
    pub snat: bool,
    pub masq_all: bool,
    /// The packet-mark bit that flags connections to masquerade.
    pub mark_bit: u32,
    pub conditions_v4: Conditions,
    pub conditions_v6: Conditions,
}

fn invalid(msg: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("portmap: {msg}"))
}

impl PortMapConf {
    /// Reads and validates the plugin keys.
    pub fn parse(conf: &NetConf) -> Result<PortMapConf, CniError> {
        let raw = &conf.raw;
        let backend: Option<String> = field(raw, "backend")?;
        if let Some(b) = backend.as_deref() {
            if !matches!(b, "iptables" | "nftables") {
                return Err(invalid(format!(
                    "unknown backend {b:?} (expected \"iptables\" or \"nftables\")"
                )));
            }
        }
        if backend.as_deref() == Some("iptables") {
            warn_not_honoured(
                "portmap",
                "backend \"iptables\"",
                "rcni writes the port mappings with nftables, in tables ip/ip6 cni_hostport (the Go \
                 nftables backend's layout); iptables-syntax conditions are translated",
            );
        }
        let mark_bit: Option<i64> = field(raw, "markMasqBit")?;
        let external: Option<String> = field(raw, "externalSetMarkChain")?;
        let external = external.filter(|s| !s.is_empty());
        if mark_bit.is_some() && external.is_some() {
            return Err(invalid(
                "Cannot specify externalSetMarkChain and markMasqBit",
            ));
        }
        let mark_bit = match mark_bit {
            None => DEFAULT_MARK_BIT,
            Some(b @ 0..=31) => b as u32,
            Some(b) => {
                return Err(invalid(format!(
                    "MasqMarkBit must be between 0 and 31, got {b}"
                )))
            }
        };
        if let Some(chain) = &external {
            if backend.as_deref() == Some("nftables") {
                return Err(invalid(
                    "externalSetMarkChain is an iptables option and cannot be used with backend \"nftables\"",
                ));
            }
            // The external chain's job is to get hairpin traffic masqueraded; rcni's
            // nftables rules cannot jump to an iptables chain, so they masquerade it themselves.
            warn_not_honoured(
                "portmap",
                &format!("externalSetMarkChain {chain:?}"),
                "rcni marks and masquerades hairpin traffic in its own nftables rules (mark bit 13)",
            );
        }
        let cond_list = |key: &str| -> Result<Vec<String>, CniError> {
            Ok(field::<Vec<String>>(raw, key)?.unwrap_or_default())
        };
        let conditions_v4 = conditions::parse("conditionsV4", &cond_list("conditionsV4")?, false)?;
        let conditions_v6 = conditions::parse("conditionsV6", &cond_list("conditionsV6")?, true)?;
        for (key, c) in [
            ("conditionsV4", &conditions_v4),
            ("conditionsV6", &conditions_v6),
        ] {
            let clash = match (backend.as_deref(), c.syntax) {
                (Some("nftables"), Some(Syntax::Iptables)) => Some("iptables"),
                (Some("iptables"), Some(Syntax::Nftables)) => Some("nftables"),
                _ => None,
            };
            if let Some(syntax) = clash {
                return Err(invalid(format!(
                    "{key} are written in {syntax} syntax, which does not match backend {:?}",
                    backend.as_deref().unwrap_or_default()
                )));
            }
        }
        Ok(PortMapConf {
            snat: field::<bool>(raw, "snat")?.unwrap_or(true),
            masq_all: field::<bool>(raw, "masqAll")?.unwrap_or(false),
            mark_bit,
            conditions_v4,
            conditions_v6,
        })
    }

    pub fn conditions(&self, ipv6: bool) -> &Conditions {
        if ipv6 {
            &self.conditions_v6
        } else {
            &self.conditions_v4
        }
    }
}

fn port(entry: &GoObject<'_>, key: &str, index: usize) -> Result<u16, CniError> {
    let v = entry.int(key).ok().flatten().ok_or_else(|| {
        invalid(format!(
            "portMappings[{index}]: {key} is missing or not an integer"
        ))
    })?;
    match u16::try_from(v) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(format!(
            "portMappings[{index}]: invalid {key} {v} (must be 1 to 65535)"
        ))),
    }
}

/// A string key of a mapping: absent, `null` and `""` are `None`; another type is an error
/// naming `what`.
fn item_str(
    entry: &GoObject<'_>,
    key: &str,
    index: usize,
    what: &str,
) -> Result<Option<String>, CniError> {
    match entry.decode::<Value>(key) {
        Ok(None) => Ok(None),
        Ok(Some(Value::String(s))) => Ok((!s.is_empty()).then_some(s)),
        Ok(Some(other)) => Err(invalid(format!(
            "portMappings[{index}]: bad {what} {other}"
        ))),
        Err(e) => Err(invalid(format!("portMappings[{index}]: bad {what}: {e}"))),
    }
}

/// `runtimeConfig.portMappings`, validated; absent or `null` is empty.
pub fn port_mappings(conf: &NetConf) -> Result<Vec<PortMapping>, CniError> {
    let list = conf
        .runtime_key::<Box<RawValue>>("portMappings")
        .map_err(|e| invalid(e.to_string()))?;
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    let items = as_list(&list, "portMappings")
        .map_err(|_| invalid(format!("portMappings must be a list, got {}", list.get())))?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let must_be_an_object = || invalid(format!("portMappings[{i}] must be an object"));
        if !item.get().starts_with('{') {
            return Err(must_be_an_object());
        }
        let entry = &GoObject::new(Some(item), format!("portMappings[{i}]"))
            .map_err(|_| must_be_an_object())?;
        let host_port = port(entry, "hostPort", i)?;
        let container_port = port(entry, "containerPort", i)?;
        let proto_name = item_str(entry, "protocol", i, "protocol")?;
        let proto_name = proto_name.as_deref().unwrap_or("tcp");
        let protocol = L4Proto::from_name(proto_name).ok_or_else(|| {
            invalid(format!(
                "portMappings[{i}]: unsupported protocol {proto_name:?} (expected tcp, udp or sctp)"
            ))
        })?;
        let (host_ip, host_family_v6) = match item_str(entry, "hostIP", i, "hostIP")? {
            None => (None, None),
            Some(s) => {
                let ip: IpAddr = s
                    .parse()
                    .map_err(|_| invalid(format!("portMappings[{i}]: invalid hostIP {s:?}")))?;
                let v6 = Some(ip.is_ipv6());
                ((!ip.is_unspecified()).then_some(ip), v6)
            }
        };
        out.push(PortMapping {
            host_port,
            container_port,
            protocol,
            host_ip,
            host_family_v6,
        });
    }
    Ok(out)
}

/// The first IPv4 and first IPv6 address of the container interface `ifname` in
/// `prev`: addresses without an interface index count, as in Go.
pub fn container_addresses(prev: &CniResult, ifname: &str) -> (Option<IpNet>, Option<IpNet>) {
    let mut v4 = None;
    let mut v6 = None;
    for ip in &prev.ips {
        let ours = match ip.interface {
            None => true,
            Some(i) => usize::try_from(i)
                .ok()
                .and_then(|i| prev.interfaces.get(i))
                .is_some_and(|iface| iface.name == ifname && !iface.sandbox.is_empty()),
        };
        if !ours {
            continue;
        }
        let slot = if ip.address.addr().is_ipv6() {
            &mut v6
        } else {
            &mut v4
        };
        slot.get_or_insert(ip.address);
    }
    (v4, v6)
}

/// Building blocks of the layouts' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn conf(snat: bool, masq_all: bool) -> PortMapConf {
        PortMapConf {
            snat,
            masq_all,
            mark_bit: 13,
            conditions_v4: Conditions::default(),
            conditions_v6: Conditions::default(),
        }
    }

    /// TCP `port` → 80, on `host_ip` when given.
    pub fn mapping(port: u16, host_ip: Option<&str>) -> PortMapping {
        let ip: Option<IpAddr> = host_ip.map(|s| s.parse().unwrap());
        PortMapping {
            host_port: port,
            container_port: 80,
            protocol: L4Proto::Tcp,
            host_ip: ip,
            host_family_v6: ip.map(|i| i.is_ipv6()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> NetConf {
        NetConf::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn defaults_and_mark_bit_rules() {
        let c = PortMapConf::parse(&conf(r#"{"name":"n","type":"portmap"}"#)).unwrap();
        assert!(c.snat && !c.masq_all);
        assert_eq!(c.mark_bit, 13);
        for bad in [
            r#"{"name":"n","type":"portmap","markMasqBit":32}"#,
            r#"{"name":"n","type":"portmap","markMasqBit":1,"externalSetMarkChain":"X"}"#,
            r#"{"name":"n","type":"portmap","backend":"nftables","externalSetMarkChain":"X"}"#,
            r#"{"name":"n","type":"portmap","backend":"nftables","conditionsV4":["-s","1.2.3.4"]}"#,
            r#"{"name":"n","type":"portmap","backend":"ebpf"}"#,
            r#"{"name":"n","type":"portmap","snat":"yes"}"#,
        ] {
            assert_eq!(PortMapConf::parse(&conf(bad)).unwrap_err().code, 7, "{bad}");
        }
        let c = PortMapConf::parse(&conf(
            r#"{"name":"n","type":"portmap","externalSetMarkChain":"KUBE-MARK-MASQ","snat":false}"#,
        ))
        .unwrap();
        assert!(!c.snat);
    }

    // Keys of a mapping follow Go's rule: the spelling given last wins, even over an exact
    // match given first, and repeated runtimeConfig sections merge.
    #[test]
    fn mapping_keys_follow_gos_rule() {
        let m = port_mappings(&conf(
            r#"{"name":"n","type":"portmap","runtimeConfig":{"portMappings":[
            {"hostPort":8080,"HostPort":8081,"containerPort":80,"protocol":"tcp","PROTOCOL":"udp"}]},
            "RuntimeConfig":{"other":1}}"#,
        ))
        .unwrap();
        assert_eq!((m[0].host_port, m[0].protocol), (8081, L4Proto::Udp));
    }

    #[test]
    fn mappings_are_validated() {
        let m = port_mappings(&conf(
            r#"{"name":"n","type":"portmap","runtimeConfig":{"portMappings":[
            {"hostPort":8080,"containerPort":80,"protocol":"TCP"},
            {"hostPort":53,"containerPort":53,"protocol":"udp","hostIP":"::"},
            {"hostPort":9,"containerPort":9,"protocol":"sctp","hostIP":"198.18.128.1"}]}}"#,
        ))
        .unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].protocol, L4Proto::Tcp);
        assert!(m[0].applies_to(true) && m[0].applies_to(false));
        assert!(m[1].host_ip.is_none() && m[1].applies_to(true) && !m[1].applies_to(false));
        assert_eq!(m[2].host_ip, Some("198.18.128.1".parse().unwrap()));
        for bad in [
            r#"[{"hostPort":0,"containerPort":80}]"#,
            r#"[{"hostPort":70000,"containerPort":80}]"#,
            r#"[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]"#,
            r#"[{"hostPort":80,"containerPort":80,"hostIP":"nope"}]"#,
            r#"[{"containerPort":80}]"#,
            r#"{}"#,
        ] {
            let j = format!(
                r#"{{"name":"n","type":"portmap","runtimeConfig":{{"portMappings":{bad}}}}}"#
            );
            assert_eq!(port_mappings(&conf(&j)).unwrap_err().code, 7, "{bad}");
        }
        assert!(port_mappings(&conf(r#"{"name":"n","type":"portmap"}"#))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn container_addresses_follow_the_interface_index() {
        let prev = CniResult::parse(
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "interfaces": [
                    {"name": "cni0"},
                    {"name": "eth0", "sandbox": "/run/netns/x"},
                    {"name": "eth1", "sandbox": "/run/netns/x"}
                ],
                "ips": [
                    {"address": "198.18.144.5/24", "interface": 2},
                    {"address": "198.18.128.5/24", "interface": 1},
                    {"address": "198.18.128.6/24", "interface": 1},
                    {"address": "fd00::5/64"}
                ]
            }),
            cni_types::SpecVersion::V1_0_0,
        )
        .unwrap();
        let (v4, v6) = container_addresses(&prev, "eth0");
        assert_eq!(v4, Some("198.18.128.5/24".parse().unwrap()));
        assert_eq!(v6, Some("fd00::5/64".parse().unwrap()));
    }
}
