//! bandwidth's configuration: the four limits from the top level or from
//! `runtimeConfig.bandwidth`, validated as the Go plugin does, the `shapedSubnets` /
//! `unshapedSubnets` lists of the Go v1.5.x plugin, and the IFB device name.

use cni_types::{CniError, NetConf, RawObject};
use ipnet::IpNet;
use serde_json::value::RawValue;
use sha2::{Digest, Sha512};

use crate::common::conf::field;

const KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// One direction's limit: a rate in bits per second and a burst in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate: u64,
    pub burst: u64,
}

/// Which traffic a limit applies to, by the remote peer's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subnets {
    /// `shapedSubnets`: only traffic with peers in these subnets is shaped.
    Shaped(Vec<IpNet>),
    /// `unshapedSubnets`: traffic with peers in these subnets is not shaped.
    Unshaped(Vec<IpNet>),
}

impl Subnets {
    pub fn nets(&self) -> &[IpNet] {
        match self {
            Subnets::Shaped(n) | Subnets::Unshaped(n) => n,
        }
    }
}

/// The limits of an attachment; `None` means that direction is not shaped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bandwidth {
    /// Traffic into the container (root qdisc on the host veth).
    pub ingress: Option<Limit>,
    /// Traffic out of the container (root qdisc on the IFB device).
    pub egress: Option<Limit>,
    /// The subnet selection; `None` (neither list, or both empty) shapes everything with TBF.
    pub subnets: Option<Subnets>,
}

impl Bandwidth {
    /// Reads the limits. The top-level keys win: `runtimeConfig.bandwidth` is used only when
    /// none of the four appears there. Bad values are code 7.
    pub fn parse(conf: &NetConf) -> Result<Bandwidth, CniError> {
        let mut top = [None; 4];
        for (slot, key) in top.iter_mut().zip(KEYS) {
            *slot = field::<u64>(&conf.raw, key)?;
        }
        let mut top_lists = [None, None];
        for (slot, key) in top_lists.iter_mut().zip(SUBNET_KEYS) {
            *slot = field::<Vec<String>>(&conf.raw, key)?;
        }
        let (values, lists) =
            if top.iter().any(Option::is_some) || top_lists.iter().any(Option::is_some) {
                (
                    top.map(|v| v.unwrap_or(0)),
                    top_lists.map(Option::unwrap_or_default),
                )
            } else {
                runtime_values(&conf.raw)?
            };
        Ok(Bandwidth {
            ingress: limit(values[0], values[1])?,
            egress: limit(values[2], values[3])?,
            subnets: subnets(lists)?,
        })
    }

    /// True when nothing is shaped.
    pub fn is_zero(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }
}

/// `unshapedSubnets`, `shapedSubnets`.
const SUBNET_KEYS: [&str; 2] = ["unshapedSubnets", "shapedSubnets"];

type Values = ([u64; 4], [Vec<String>; 2]);

/// Go's `validateSubnets`: at most one non-empty list, every entry a CIDR.
fn subnets([unshaped, shaped]: [Vec<String>; 2]) -> Result<Option<Subnets>, CniError> {
    if !unshaped.is_empty() && !shaped.is_empty() {
        return Err(CniError::invalid_config(
            "unshapedSubnets and shapedSubnets cannot be both specified, one of them should be \
             discarded",
        ));
    }
    let parse = |list: Vec<String>| -> Result<Vec<IpNet>, CniError> {
        list.iter()
            .map(|s| {
                s.parse::<IpNet>().map(|n| n.trunc()).map_err(|e| {
                    CniError::invalid_config(format!("bad subnet {s:?} provided, details {e}"))
                })
            })
            .collect()
    };
    Ok(if !shaped.is_empty() {
        Some(Subnets::Shaped(parse(shaped)?))
    } else if !unshaped.is_empty() {
        Some(Subnets::Unshaped(parse(unshaped)?))
    } else {
        None
    })
}

/// `runtimeConfig.bandwidth`, decoding only the keys bandwidth knows (anything else in it,
/// `1e400` included, is never decoded).
fn runtime_values(raw: &RawObject) -> Result<Values, CniError> {
    let mut out = [0; 4];
    let mut lists: [Vec<String>; 2] = Default::default();
    let bad = |key: &str, e: serde_json::Error| {
        CniError::invalid_config(format!(
            "failed to load netconf: runtimeConfig.bandwidth.{key}: {e}"
        ))
    };
    let section = raw
        .decode_path::<Box<RawValue>>(&["runtimeConfig", "bandwidth"])
        .map_err(|e| bad("", e))?;
    let Some(section) = section else {
        return Ok((out, lists));
    };
    if !section.get().starts_with('{') {
        return Err(CniError::invalid_config(
            "failed to load netconf: runtimeConfig.bandwidth must be an object",
        ));
    }
    let bw = RawObject::parse(section.get().as_bytes()).map_err(|e| bad("", e))?;
    for (slot, key) in out.iter_mut().zip(KEYS) {
        if let Some(v) = bw.decode::<u64>(key).map_err(|e| bad(key, e))? {
            *slot = v;
        }
    }
    for (slot, key) in lists.iter_mut().zip(SUBNET_KEYS) {
        if let Some(v) = bw.decode::<Vec<String>>(key).map_err(|e| bad(key, e))? {
            *slot = v;
        }
    }
    Ok((out, lists))
}

/// Decodes the four keys (top level and `runtimeConfig.bandwidth`) without validating the
/// limits, as Go's DEL does: a value of the wrong type is code 7.
pub fn check_types(conf: &NetConf) -> Result<(), CniError> {
    for key in KEYS {
        field::<u64>(&conf.raw, key)?;
    }
    runtime_values(&conf.raw).map(drop)
}

/// Go's `validateRateAndBurst`, plus the floor below which the byte values TBF needs are 0.
fn limit(rate: u64, burst: u64) -> Result<Option<Limit>, CniError> {
    let bad = |msg: &str| Err(CniError::invalid_config(msg.to_string()));
    match (rate, burst) {
        (0, 0) => Ok(None),
        (_, 0) => bad("if rate is set, burst must also be set"),
        (0, _) => bad("if burst is set, rate must also be set"),
        _ if burst / 8 >= u64::from(u32::MAX) => bad("burst cannot be more than 4GB"),
        _ if rate < 8 => bad("rate must be at least 8 bits per second"),
        _ if burst < 8 => bad("burst must be at least 8 bits"),
        _ => Ok(Some(Limit { rate, burst })),
    }
}

/// The IFB device of an attachment, named as the Go plugin names it: `bwp` and the first 12
/// hex digits of SHA-512 over the network name followed by the container ID.
pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::digest(format!("{network}{container_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("bwp{}", &hex[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> NetConf {
        cni_plugin::CmdArgs::new(cni_plugin::Command::Add, json.as_bytes())
            .unwrap()
            .conf
    }

    #[test]
    fn top_level_keys_win_over_runtime_config() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth","ingressRate":8000,"ingressBurst":800,
               "runtimeConfig":{"bandwidth":{"egressRate":16000,"egressBurst":1600}}}"#,
        );
        let bw = Bandwidth::parse(&c).unwrap();
        assert_eq!(
            bw.ingress,
            Some(Limit {
                rate: 8000,
                burst: 800
            })
        );
        assert_eq!(bw.egress, None);
    }

    #[test]
    fn runtime_config_is_used_without_top_level_keys() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth",
               "runtimeConfig":{"bandwidth":{"egressRate":16000,"egressBurst":1600}}}"#,
        );
        let bw = Bandwidth::parse(&c).unwrap();
        assert_eq!(
            bw.egress,
            Some(Limit {
                rate: 16000,
                burst: 1600
            })
        );
        assert!(!bw.is_zero());
        let none = conf(r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth"}"#);
        assert!(Bandwidth::parse(&none).unwrap().is_zero());
    }

    #[test]
    fn invalid_limits_are_code_7() {
        for body in [
            r#""ingressRate":8000"#,
            r#""egressBurst":8000"#,
            r#""ingressRate":-1,"ingressBurst":8"#,
            r#""ingressRate":"fast","ingressBurst":8"#,
            r#""ingressRate":8000,"ingressBurst":34359738360"#,
            r#""ingressRate":7,"ingressBurst":800"#,
        ] {
            let c = conf(&format!(
                r#"{{"cniVersion":"1.0.0","name":"n","type":"bandwidth",{body}}}"#
            ));
            assert_eq!(Bandwidth::parse(&c).unwrap_err().code, 7, "{body}");
        }
    }

    #[test]
    fn subnet_lists_are_exclusive_and_parsed() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth",
               "runtimeConfig":{"bandwidth":{"egressRate":16000,"egressBurst":1600,
               "shapedSubnets":["198.18.5.7/24","2001:2::/48"]}}}"#,
        );
        let bw = Bandwidth::parse(&c).unwrap();
        let nets: Vec<IpNet> = vec![
            "198.18.5.0/24".parse().unwrap(),
            "2001:2::/48".parse().unwrap(),
        ];
        assert_eq!(bw.subnets, Some(Subnets::Shaped(nets)));
        let both = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth","egressRate":16000,
               "egressBurst":1600,"shapedSubnets":["198.18.0.0/15"],"unshapedSubnets":["198.19.0.0/16"]}"#,
        );
        let e = Bandwidth::parse(&both).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("cannot be both specified"), "{}", e.msg);
        let bad = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth","unshapedSubnets":["198.18.0.0"]}"#,
        );
        assert_eq!(Bandwidth::parse(&bad).unwrap_err().code, 7);
        // A top-level list alone makes runtimeConfig.bandwidth ignored, as in Go.
        let top = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"bandwidth","unshapedSubnets":[],
               "runtimeConfig":{"bandwidth":{"egressRate":16000,"egressBurst":1600}}}"#,
        );
        assert!(Bandwidth::parse(&top).unwrap().is_zero());
    }

    #[test]
    fn ifb_name_is_15_characters_from_the_hash() {
        let name = ifb_name("net", "cid");
        assert_eq!(name.len(), 15);
        assert!(name.starts_with("bwp"));
        assert_ne!(name, ifb_name("net", "cid2"));
        // SHA-512("netcid") starts with these digits.
        let digest = Sha512::digest(b"netcid");
        assert_eq!(&name[3..5], format!("{:02x}", digest[0]));
    }
}
