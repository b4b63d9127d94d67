//! Loading host-local's configuration for one request: the `ipam` section through `cni-ipam`,
//! plus CNI_ARGS `IP` under the conventions' precedence rule.

use cni_ipam::{ConfigError, HostLocalConfig};
use cni_plugin::CmdArgs;
use cni_types::CniError;

use crate::ipam_shared::{checked_cni_args, config_error};

/// The CNI_ARGS keys host-local understands.
const KNOWN_ARGS: &[&str] = &["IP"];

/// How a command treats CNI_ARGS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsUse {
    /// Validated (unknown keys are code 4 unless `IgnoreUnknown`), `IP` requests an address.
    Honour,
    /// Not read at all: DEL, STATUS and GC need no requested address, and a cleanup must not
    /// fail over an argument only ADD could use.
    Ignore,
}

/// The configuration of this request.
///
/// CNI_ARGS `IP` is used only when neither `args.cni.ips` nor `runtimeConfig.ips` requests an
/// address (CONVENTIONS.md, "CNI_ARGS": a plugin that understands `args` ignores the CNI_ARGS
/// form). Go would request all of them at once.
pub fn load(args: &CmdArgs, args_use: ArgsUse) -> Result<HostLocalConfig, CniError> {
    let cni_args = match args_use {
        ArgsUse::Honour => Some(checked_cni_args(args, KNOWN_ARGS)?),
        ArgsUse::Ignore => None,
    };
    // Go decodes each `IP=` in turn: an empty value leaves the address as it was, so the last
    // non-empty one counts; every non-empty one must be an address (checked when used).
    let ip_values: Vec<&str> = cni_args
        .as_ref()
        .map(|a| a.values("IP").filter(|ip| !ip.is_empty()).collect())
        .unwrap_or_default();
    let ip_arg = ip_values.last().copied();

    // Parsing borrows from stdin and copies no unknown value, so a second pass costs little.
    let config = HostLocalConfig::parse(&args.stdin, None).map_err(config_error)?;
    match ip_arg {
        Some(ip) if config.requested_ips.is_empty() => {
            if let Some(bad) = ip_values
                .iter()
                .find(|v| cni_ipam::parse_requested_ip(v).is_none())
            {
                return Err(config_error(ConfigError::InvalidRequestedIp {
                    value: bad.to_string(),
                }));
            }
            HostLocalConfig::parse(&args.stdin, Some(ip)).map_err(config_error)
        }
        Some(ip) => {
            log::info!(
                "CNI_ARGS IP={ip} ignored: the config's args or runtimeConfig request addresses"
            );
            Ok(config)
        }
        None => Ok(config),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_plugin::Command;

    fn args(stdin: &str, cni_args: &str) -> CmdArgs {
        let mut a = CmdArgs::new(Command::Add, stdin.as_bytes()).unwrap();
        a.args = cni_args.into();
        a
    }

    const PLAIN: &str = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local","subnet":"198.18.144.0/24"}}"#;

    #[test]
    fn cni_args_ip_is_requested_when_nothing_else_is() {
        let c = load(&args(PLAIN, "IP=198.18.144.9"), ArgsUse::Honour).unwrap();
        assert_eq!(
            c.requested_ips,
            ["198.18.144.9".parse::<std::net::IpAddr>().unwrap()]
        );
        let c = load(&args(PLAIN, "IP="), ArgsUse::Honour).unwrap();
        assert!(c.requested_ips.is_empty());
    }

    #[test]
    fn config_ips_win_over_cni_args_ip() {
        for stdin in [
            r#"{"cniVersion":"1.0.0","name":"n","args":{"cni":{"ips":["198.18.144.7"]}},"ipam":{"type":"host-local","subnet":"198.18.144.0/24"}}"#,
            r#"{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"ips":["198.18.144.7/24"]},"ipam":{"type":"host-local","subnet":"198.18.144.0/24"}}"#,
        ] {
            // Even a malformed IP= is ignored then.
            for arg in ["IP=198.18.144.9", "IP=bogus"] {
                let c = load(&args(stdin, arg), ArgsUse::Honour).unwrap();
                assert_eq!(
                    c.requested_ips,
                    ["198.18.144.7".parse::<std::net::IpAddr>().unwrap()]
                );
            }
        }
    }

    #[test]
    fn unknown_keys_are_code_4_unless_ignored() {
        let e = load(&args(PLAIN, "ip=198.18.144.9"), ArgsUse::Honour).unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("ip=198.18.144.9"), "{}", e.msg);
        load(
            &args(PLAIN, "IgnoreUnknown=1;K8S_POD_NAME=p"),
            ArgsUse::Honour,
        )
        .unwrap();
        // Not read at all when ignored.
        load(&args(PLAIN, "ip=x;bad"), ArgsUse::Ignore).unwrap();
    }

    // As Go's LoadArgs: the last non-empty `IP` wins, and a bad earlier one fails the ADD.
    #[test]
    fn repeated_ip_arg_last_non_empty_wins_and_each_is_checked() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        for (cni_args, want) in [
            ("IP=198.18.144.9;IP=198.18.144.10", "198.18.144.10"),
            ("IP=198.18.144.11;IP=", "198.18.144.11"),
            ("IP=;IP=198.18.144.12", "198.18.144.12"),
        ] {
            let c = load(&args(PLAIN, cni_args), ArgsUse::Honour).unwrap();
            assert_eq!(c.requested_ips, [ip(want)], "{cni_args}");
        }
        let e = load(&args(PLAIN, "IP=bogus;IP=198.18.144.9"), ArgsUse::Honour).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("bogus"), "{}", e.msg);
    }

    #[test]
    fn bad_requested_ip_is_a_config_error() {
        let e = load(&args(PLAIN, "IP=198.18.144.300"), ArgsUse::Honour).unwrap_err();
        assert_eq!(e.code, 7);
    }
}
