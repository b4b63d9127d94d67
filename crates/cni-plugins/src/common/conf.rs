//! Plugin-specific config keys as CNI errors (code 7): read by the one Go-style decoder of
//! `cni_types` (`RawObject` for the top level, `GoObject` for sections and list entries:
//! keys matched as Go folds them, the last matching key wins, `null` is unset, repeated
//! sections merge, unknown keys ignored, booleans reject strings and integers reject
//! fractions), plus the key rules several plugins share (`mtu`, the `mac` capability).

use cni_linux::MacAddr;
use cni_types::{CniArgs, CniError, NetConf, RawObject};
use serde::de::DeserializeOwned;

/// `key` of the top-level config, decoded; a value of the wrong type is code 7.
pub fn field<T: DeserializeOwned>(raw: &RawObject, key: &str) -> Result<Option<T>, CniError> {
    raw.decode::<T>(key)
        .map_err(|e| CniError::invalid_config(format!("failed to load netconf: {key}: {e}")))
}

/// A boolean key; absent or `null` is false.
pub fn flag(raw: &RawObject, key: &str) -> Result<bool, CniError> {
    Ok(field::<bool>(raw, key)?.unwrap_or(false))
}

/// A string at `path` below a top-level key (e.g. `args` → `cni` → `mac`), each step matched
/// as Go matches struct fields; `null`, a missing step or a step that is not an object is
/// `None`, a non-string value is code 7. Nothing beside the path is decoded.
pub fn nested_string(
    raw: &RawObject,
    top: &str,
    path: &[&str],
) -> Result<Option<String>, CniError> {
    let mut full = Vec::with_capacity(path.len() + 1);
    full.push(top);
    full.extend_from_slice(path);
    raw.decode_path::<String>(&full).map_err(|e| {
        CniError::invalid_config(format!(
            "failed to load netconf: {top}.{}: expected a string: {e}",
            path.join(".")
        ))
    })
}

/// The container MAC of the `mac` capability: CNI_ARGS `MAC`, then `args.cni.mac`,
/// then `runtimeConfig.mac`, the later source winning. CNI_ARGS other than `MAC` are an error
/// unless `IgnoreUnknown` is set, as Go's `LoadArgs` does.
pub fn container_mac(conf: &NetConf, cni_args: &CniArgs) -> Result<Option<MacAddr>, CniError> {
    cni_args
        .check_known(&["MAC"])
        .map_err(|e| e.to_cni_error())?;
    let mut mac = cni_args
        .get("MAC")
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    if let Some(m) = nested_string(&conf.raw, "args", &["cni", "mac"])?.filter(|m| !m.is_empty()) {
        mac = Some(m);
    }
    if let Some(m) = nested_string(&conf.raw, "runtimeConfig", &["mac"])?.filter(|m| !m.is_empty())
    {
        mac = Some(m);
    }
    mac.map(|m| {
        m.parse::<MacAddr>()
            .map_err(|_| CniError::invalid_config(format!("invalid MAC address {m:?}")))
    })
    .transpose()
}

/// The one answer to an option a plugin accepts (configs written for the Go plugins keep
/// working) but serves another way: one warning line on stderr, never stdout (which carries
/// only the result), naming the option and what rcni does instead.
pub fn warn_not_honoured(plugin: &str, option: &str, instead: &str) {
    log::warn!("{plugin}: {option} is not honoured: {instead}");
}

/// The `mtu` key of bridge and ptp: a positive MTU, or `None` for the kernel default (absent,
/// 0 or negative; Go's netlink sets only a positive MTU, so it ignores a negative one silently,
/// rcni says so).
pub fn mtu(plugin: &str, raw: &RawObject) -> Result<Option<u32>, CniError> {
    let mtu = field::<i64>(raw, "mtu")?.unwrap_or(0);
    if mtu < 0 {
        warn_not_honoured(
            plugin,
            &format!("mtu {mtu}"),
            "a negative MTU is ignored and the kernel default MTU is used, as by the Go plugin",
        );
    }
    if mtu <= 0 {
        return Ok(None);
    }
    u32::try_from(mtu)
        .map(Some)
        .map_err(|_| CniError::invalid_config(format!("invalid MTU {mtu}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> NetConf {
        NetConf::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn keys_are_case_insensitive_and_typed() {
        let c = conf(r#"{"name":"n","IsGateway":true,"hairpinMode":null,"mtu":1400}"#);
        assert!(flag(&c.raw, "isGateway").unwrap());
        assert!(!flag(&c.raw, "hairpinMode").unwrap());
        assert!(!flag(&c.raw, "promiscMode").unwrap());
        assert_eq!(mtu("t", &c.raw).unwrap(), Some(1400));

        let c = conf(r#"{"name":"n","isGateway":"true","mtu":1.5}"#);
        assert_eq!(flag(&c.raw, "isGateway").unwrap_err().code, 7);
        assert_eq!(mtu("t", &c.raw).unwrap_err().code, 7);
        assert_eq!(
            mtu("t", &conf(r#"{"name":"n","mtu":-1}"#).raw).unwrap(),
            None
        );
    }

    #[test]
    fn mac_sources_later_wins() {
        let none = CniArgs::default();
        let c = conf(r#"{"name":"n"}"#);
        assert_eq!(container_mac(&c, &none).unwrap(), None);

        let env = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:00:01").unwrap();
        assert_eq!(
            container_mac(&c, &env).unwrap().unwrap().to_string(),
            "02:00:00:00:00:01"
        );
        let c = conf(r#"{"name":"n","Args":{"CNI":{"Mac":"02:00:00:00:00:02"}}}"#);
        assert_eq!(
            container_mac(&c, &env).unwrap().unwrap().to_string(),
            "02:00:00:00:00:02"
        );
        let c = conf(
            r#"{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:02"}},"RuntimeConfig":{"mac":"02:00:00:00:00:03"}}"#,
        );
        assert_eq!(
            container_mac(&c, &env).unwrap().unwrap().to_string(),
            "02:00:00:00:00:03"
        );
    }

    #[test]
    fn mac_errors() {
        let c = conf(r#"{"name":"n"}"#);
        let unknown = CniArgs::parse("FOO=bar").unwrap();
        assert_eq!(container_mac(&c, &unknown).unwrap_err().code, 4);
        let bad = conf(r#"{"name":"n","runtimeConfig":{"mac":"zz"}}"#);
        assert_eq!(
            container_mac(&bad, &CniArgs::default()).unwrap_err().code,
            7
        );
        let wrong_type = conf(r#"{"name":"n","runtimeConfig":{"mac":5}}"#);
        assert_eq!(
            container_mac(&wrong_type, &CniArgs::default())
                .unwrap_err()
                .code,
            7
        );
    }
}
