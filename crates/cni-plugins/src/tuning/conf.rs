//! The tuning configuration: plugin keys, the `args.cni` overrides, and the MAC
//! sources in Go's precedence.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use cni_linux::MacAddr;
use cni_types::{go_decode, CniArgs, CniError, NetConf, RawObject};

use crate::common::conf::{field, nested_string};

/// Go's default backup directory.
pub use cni_attribution::names::TUNING_DATA_DIR as DEFAULT_DATA_DIR;

/// What ADD changes and CHECK verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningConf {
    /// Where the backup files go.
    pub data_dir: PathBuf,
    /// Sysctl keys (as written, before `IFNAME` substitution) and values, config order, with
    /// the `args.cni.sysctl` entries replacing or following them.
    pub sysctl: Vec<(String, String)>,
    pub mac: Option<MacAddr>,
    /// true turns promiscuous mode on; false leaves it as it is (CHECK: requires it off).
    pub promisc: bool,
    pub mtu: Option<u32>,
    pub tx_qlen: Option<u32>,
    pub allmulti: Option<bool>,
}

fn invalid(msg: impl fmt::Display) -> CniError {
    CniError::invalid_config(format!("tuning: {msg}"))
}

/// The `args.cni` object, matched case-insensitively at each level; absent when any step is
/// (or is not an object). It stays raw: only the keys tuning reads are decoded.
fn args_cni(conf: &NetConf) -> Result<Option<RawObject>, CniError> {
    conf.raw
        .decode_path::<RawObject>(&["args", "cni"])
        .or_else(|_| Ok(None))
}

/// `args.cni.<key>`, decoded; `null` is absent, a value of the wrong type is code 7.
fn arg<T: DeserializeOwned>(cni: Option<&RawObject>, key: &str) -> Result<Option<T>, CniError> {
    let Some(cni) = cni else {
        return Ok(None);
    };
    cni.decode(key)
        .map_err(|e| invalid(format!("failed to load netconf: args.cni.{key}: {e}")))
}

/// A sysctl object as ordered (key, value) pairs; values must be strings.
fn sysctl_pairs(
    obj: serde_json::Map<String, Value>,
    what: &str,
) -> Result<Vec<(String, String)>, CniError> {
    obj.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            other => Err(invalid(format!(
                "failed to load netconf: {what}: value of {k:?} must be a string, got {other}"
            ))),
        })
        .collect()
}

/// A non-negative integer key that fits the kernel's u32; 0 means "unset" for the MTU.
fn non_negative(key: &str, v: Option<i64>) -> Result<Option<u32>, CniError> {
    v.map(|n| u32::try_from(n).map_err(|_| invalid(format!("invalid {key} {n}"))))
        .transpose()
}

impl TuningConf {
    /// Reads the config, the `args.cni` overrides and the MAC sources. `stdin` is the raw
    /// request, needed to find duplicated sysctl keys (which a parsed object no longer shows).
    pub fn parse(conf: &NetConf, stdin: &[u8], cni_args: &CniArgs) -> Result<TuningConf, CniError> {
        reject_duplicate_sysctl_keys(stdin)?;
        let raw = &conf.raw;
        let cni = args_cni(conf)?;
        let cni = cni.as_ref();

        let mut sysctl = match field::<serde_json::Map<String, Value>>(raw, "sysctl")? {
            Some(obj) => sysctl_pairs(obj, "sysctl")?,
            None => Vec::new(),
        };
        // Unlike Go, a null `sysctl` with `args.cni.sysctl` set is fine (Go writes into a nil
        // map and panics).
        if let Some(obj) = arg::<serde_json::Map<String, Value>>(cni, "sysctl")? {
            for (k, v) in sysctl_pairs(obj, "args.cni.sysctl")? {
                match sysctl.iter_mut().find(|(have, _)| *have == k) {
                    Some(entry) => entry.1 = v,
                    None => sysctl.push((k, v)),
                }
            }
        }

        let promisc =
            arg::<bool>(cni, "promisc")?.unwrap_or(field::<bool>(raw, "promisc")?.unwrap_or(false));
        let mtu = arg::<i64>(cni, "mtu")?.or(field::<i64>(raw, "mtu")?);
        let mtu = non_negative("mtu", mtu)?.filter(|m| *m != 0);
        let tx_qlen = arg::<i64>(cni, "txQLen")?.or(field::<i64>(raw, "txQLen")?);
        let tx_qlen = non_negative("txQLen", tx_qlen)?;
        let allmulti = arg::<bool>(cni, "allmulti")?.or(field::<bool>(raw, "allmulti")?);

        let data_dir = field::<String>(raw, "dataDir")?
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| DEFAULT_DATA_DIR.to_string());

        Ok(TuningConf {
            data_dir: PathBuf::from(data_dir),
            sysctl,
            mac: mac(conf, cni, cni_args)?,
            promisc,
            mtu,
            tx_qlen,
            allmulti,
        })
    }

    /// Whether ADD changes any link attribute (and so writes a backup first).
    pub fn changes_link(&self) -> bool {
        self.mac.is_some()
            || self.promisc
            || self.mtu.is_some()
            || self.tx_qlen.is_some()
            || self.allmulti.is_some()
    }
}

/// The backup directory alone, for DEL: a config that does not decode falls back to the
/// default (DEL must not fail on it).
pub fn data_dir(conf: &NetConf) -> PathBuf {
    match field::<String>(&conf.raw, "dataDir") {
        Ok(Some(d)) if !d.is_empty() => PathBuf::from(d),
        Ok(_) => PathBuf::from(DEFAULT_DATA_DIR),
        Err(e) => {
            log::warn!("tuning: {}; using {DEFAULT_DATA_DIR}", e.msg);
            PathBuf::from(DEFAULT_DATA_DIR)
        }
    }
}

/// The MAC, later sources winning (Go's order): the `mac` key, CNI_ARGS `MAC`,
/// `runtimeConfig.mac`, then `args.cni.mac` (which wins even when empty, meaning "no change").
fn mac(
    conf: &NetConf,
    cni: Option<&RawObject>,
    cni_args: &CniArgs,
) -> Result<Option<MacAddr>, CniError> {
    cni_args
        .check_known(&["MAC"])
        .map_err(|e| e.to_cni_error())?;
    let mut mac = field::<String>(&conf.raw, "mac")?.unwrap_or_default();
    if let Some(m) = cni_args.get("MAC").filter(|m| !m.is_empty()) {
        mac = m.to_string();
    }
    match nested_string(&conf.raw, "runtimeConfig", &["mac"]) {
        Ok(Some(m)) if !m.is_empty() => mac = m,
        Ok(_) => {}
        Err(e) => return Err(invalid(e.msg)),
    }
    if let Some(m) = arg::<String>(cni, "mac")? {
        mac = m;
    }
    if mac.is_empty() {
        return Ok(None);
    }
    mac.parse::<MacAddr>()
        .map(Some)
        .map_err(|_| invalid(format!("invalid MAC address {mac:?}")))
}

/// Go refuses a config whose `sysctl` object names a key twice (a parsed map keeps only the
/// last). Every top-level key that fills the `sysctl` field (`cni_types::go_decode::fold_eq`)
/// counts, as Go decodes each of them into the same field.
pub fn reject_duplicate_sysctl_keys(stdin: &[u8]) -> Result<(), CniError> {
    let mut de = serde_json::Deserializer::from_slice(stdin);
    match de.deserialize_map(TopLevel) {
        Ok(Some(key)) => Err(invalid(format!(
            "duplicated sysctl keys are not allowed: {key:?}"
        ))),
        // The config was parsed before; anything odd here is reported by the typed decode.
        Ok(None) | Err(_) => Ok(()),
    }
}

/// Walks the top-level object; yields the first repeated sysctl key.
struct TopLevel;

impl<'de> Visitor<'de> for TopLevel {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut duplicate = None;
        while let Some(key) = map.next_key::<String>()? {
            if go_decode::fold_eq(&key, "sysctl") {
                let keys = map.next_value::<SysctlKeys>()?.0;
                for k in keys {
                    if !seen.insert(k.clone()) && duplicate.is_none() {
                        duplicate = Some(k);
                    }
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(duplicate)
    }
}

/// The keys of a sysctl object in order, repeats included; empty for anything else.
struct SysctlKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for SysctlKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = SysctlKeys;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sysctl object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SysctlKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(SysctlKeys(keys))
            }
            fn visit_unit<E>(self) -> Result<SysctlKeys, E> {
                Ok(SysctlKeys(Vec::new()))
            }
        }
        d.deserialize_any(Keys).or(Ok(SysctlKeys(Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(json: &str, env: &str) -> Result<TuningConf, CniError> {
        let conf = NetConf::parse(json.as_bytes()).unwrap();
        TuningConf::parse(&conf, json.as_bytes(), &CniArgs::parse(env).unwrap())
    }

    fn parse(json: &str) -> Result<TuningConf, CniError> {
        parse_with(json, "")
    }

    #[test]
    fn podman_empty_tuning_changes_nothing() {
        let c = parse(r#"{"cniVersion":"0.4.0","name":"podman","type":"tuning"}"#).unwrap();
        assert!(c.sysctl.is_empty() && !c.changes_link());
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        let c = parse(r#"{"name":"n","dataDir":""}"#).unwrap();
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    }

    #[test]
    fn keys_and_args_overrides() {
        let c = parse(
            r#"{"name":"n","sysctl":{"net.core.somaxconn":"500","net.ipv4.conf.IFNAME.arp_filter":"1"},
               "mac":"02:00:00:00:00:01","promisc":true,"mtu":1400,"txQLen":0,"allmulti":false,
               "dataDir":"/tmp/x",
               "Args":{"CNI":{"Sysctl":{"net.core.somaxconn":"600","net.ipv4.ip_forward":"1"},"MTU":1300,"promisc":false,"allmulti":true,"txqlen":7}}}"#,
        )
        .unwrap();
        assert_eq!(
            c.sysctl,
            [
                ("net.core.somaxconn".to_string(), "600".to_string()),
                ("net.ipv4.conf.IFNAME.arp_filter".into(), "1".into()),
                ("net.ipv4.ip_forward".into(), "1".into()),
            ]
        );
        assert_eq!(c.mtu, Some(1300));
        assert!(!c.promisc);
        assert_eq!(c.allmulti, Some(true));
        assert_eq!(c.tx_qlen, Some(7));
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert!(c.changes_link());
    }

    #[test]
    fn null_sysctl_with_args_sysctl_does_not_panic() {
        let c = parse(
            r#"{"name":"n","sysctl":null,"args":{"cni":{"sysctl":{"net.core.somaxconn":"9"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            c.sysctl,
            [("net.core.somaxconn".to_string(), "9".to_string())]
        );
    }

    #[test]
    fn mac_precedence_is_gos() {
        let mac = |json: &str, env: &str| parse_with(json, env).unwrap().mac.map(|m| m.to_string());
        let base = r#"{"name":"n","mac":"02:00:00:00:00:01"}"#;
        assert_eq!(mac(base, "").as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(
            mac(base, "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:00:02").as_deref(),
            Some("02:00:00:00:00:02")
        );
        let rc =
            r#"{"name":"n","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}}"#;
        assert_eq!(
            mac(rc, "MAC=02:00:00:00:00:02").as_deref(),
            Some("02:00:00:00:00:03")
        );
        let all = r#"{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:03"},"args":{"cni":{"mac":"02:00:00:00:00:04"}}}"#;
        assert_eq!(
            mac(all, "MAC=02:00:00:00:00:02").as_deref(),
            Some("02:00:00:00:00:04")
        );
        // An empty args.cni.mac wins too: no change.
        let empty = r#"{"name":"n","mac":"02:00:00:00:00:01","args":{"cni":{"mac":""}}}"#;
        assert_eq!(mac(empty, ""), None);
        assert_eq!(
            mac(r#"{"name":"n","mac":"02:AA:00:00:00:01"}"#, "").as_deref(),
            Some("02:aa:00:00:00:01")
        );
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            r#"{"name":"n","mac":"zz"}"#,
            r#"{"name":"n","mtu":-1}"#,
            r#"{"name":"n","mtu":1.5}"#,
            r#"{"name":"n","txQLen":-5}"#,
            r#"{"name":"n","promisc":"true"}"#,
            r#"{"name":"n","sysctl":{"net.core.somaxconn":500}}"#,
            r#"{"name":"n","sysctl":["net.core.somaxconn"]}"#,
            r#"{"name":"n","args":{"cni":{"mtu":"9000"}}}"#,
            r#"{"name":"n","runtimeConfig":{"mac":5}}"#,
            r#"{"name":"n","sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}}"#,
            r#"{"name":"n","sysctl":{"a":"1"},"Sysctl":{"a":"2"}}"#,
        ] {
            assert_eq!(parse(bad).unwrap_err().code, 7, "{bad}");
        }
        let e = parse_with(r#"{"name":"n"}"#, "FOO=bar").unwrap_err();
        assert_eq!(e.code, 4);
    }

    #[test]
    fn data_dir_for_del_never_fails() {
        let conf = |j: &str| NetConf::parse(j.as_bytes()).unwrap();
        assert_eq!(
            data_dir(&conf(r#"{"name":"n","dataDir":"/a"}"#)),
            PathBuf::from("/a")
        );
        assert_eq!(
            data_dir(&conf(r#"{"name":"n","dataDir":5}"#)),
            PathBuf::from(DEFAULT_DATA_DIR)
        );
    }
}
