//! The `ipam` keys of a dhcp network config and the lease parameters they resolve to.
//!
//! The plugin resolves everything here (option names, `fromArg` values from CNI_ARGS, the
//! parameter request list) so that a bad config is refused with code 7 before the daemon is
//! asked, and the daemon receives, persists and reuses one plain [`LeaseParams`] value.

use cni_types::{CniError, RawObject};
use serde::{Deserialize, Serialize};

/// Where the plugin looks for the daemon when the config does not say.
pub const DEFAULT_SOCKET: &str = "/run/cni/rcni-dhcp.sock";

/// Options requested when the config asks for nothing else: subnet mask and routers (as Go).
const DEFAULT_REQUEST: [u8; 2] = [1, 3];

/// The only `suppress` value (Go's `suppressGateway`).
const SUPPRESS_GATEWAY: &str = "gateway";

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    #[serde(default)]
    daemon_socket_path: String,
    #[serde(default)]
    provide: Vec<RawProvide>,
    #[serde(default)]
    request: Vec<RawRequest>,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    suppress: Vec<String>,
}

#[derive(Deserialize)]
struct RawProvide {
    option: String,
    #[serde(default)]
    value: String,
    #[serde(default, rename = "fromArg")]
    from_arg: String,
}

#[derive(Deserialize)]
struct RawRequest {
    option: String,
    #[serde(default, rename = "skipDefault")]
    skip_default: bool,
}

/// What a lease is acquired and renewed with; persisted with the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LeaseParams {
    /// Options sent to the server (`provide`), code and value, one entry per code.
    pub provide: Vec<(u8, Vec<u8>)>,
    /// The parameter request list (option 55).
    pub request: Vec<u8>,
    /// Metric of every route of the result.
    pub priority: u32,
    /// `suppress: ["gateway"]`: no gateway and no default route in the result.
    pub suppress_gateway: bool,
}

/// A parsed dhcp IPAM config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpConf {
    /// The daemon's socket.
    pub socket: String,
    pub params: LeaseParams,
}

impl DhcpConf {
    /// Parses the `ipam` member of the request config (other members are not decoded);
    /// `cni_args` is `CNI_ARGS` as received (for `fromArg`).
    pub fn parse(conf: &RawObject, cni_args: &str) -> Result<DhcpConf, CniError> {
        let raw: RawIpam = conf
            .decode("ipam")
            .map_err(|e| CniError::invalid_config(format!("dhcp: cannot decode ipam: {e}")))?
            .unwrap_or_default();
        let socket = if raw.daemon_socket_path.is_empty() {
            DEFAULT_SOCKET.to_string()
        } else {
            raw.daemon_socket_path
        };
        let priority = u32::try_from(raw.priority).map_err(|_| {
            CniError::invalid_config(format!(
                "ipam.priority: {} is not a route metric (0 to 4294967295)",
                raw.priority
            ))
        })?;
        let mut suppress_gateway = false;
        for item in &raw.suppress {
            if item != SUPPRESS_GATEWAY {
                return Err(CniError::invalid_config(format!(
                    "ipam.suppress: unknown value {item:?} (supported: {SUPPRESS_GATEWAY:?})"
                )));
            }
            suppress_gateway = true;
        }
        Ok(DhcpConf {
            socket,
            params: LeaseParams {
                provide: provide_options(&raw.provide, cni_args)?,
                request: request_list(&raw.request)?,
                priority,
                suppress_gateway,
            },
        })
    }
}

/// An option by dhcp-options(5) name (the six Go knows) or by number 0–255.
pub fn option_code(name: &str) -> Result<u8, CniError> {
    let code = match name {
        "dhcp-client-identifier" => 61,
        "subnet-mask" => 1,
        "routers" => 3,
        "host-name" => 12,
        "user-class" => 77,
        "vendor-class-identifier" => 60,
        _ => name.parse::<u8>().map_err(|_| {
            CniError::invalid_config(format!(
                "dhcp option {name:?} is neither a known name nor a number from 0 to 255"
            ))
        })?,
    };
    Ok(code)
}

/// CNI_ARGS split the way Go's dhcp plugin splits them: on `;`, then at the first `=`;
/// pairs without `=` are skipped and `IgnoreUnknown` plays no role.
fn plain_args(cni_args: &str) -> Vec<(&str, &str)> {
    cni_args
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .collect()
}

fn provide_options(list: &[RawProvide], cni_args: &str) -> Result<Vec<(u8, Vec<u8>)>, CniError> {
    let args = plain_args(cni_args);
    let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut set = |code: u8, value: &str, origin: &str| -> Result<(), CniError> {
        if value.len() > 255 {
            return Err(CniError::invalid_config(format!(
                "dhcp option {code}: the value {origin} is {} bytes, more than 255",
                value.len()
            )));
        }
        out.retain(|(c, _)| *c != code);
        out.push((code, value.as_bytes().to_vec()));
        Ok(())
    };
    for p in list {
        let code = option_code(&p.option)?;
        if !p.value.is_empty() {
            set(code, &p.value, "in the config")?;
        }
        // A later CNI_ARGS value wins over the literal one, as in Go (last pair wins too).
        if let Some((_, v)) = args.iter().rev().find(|(k, _)| *k == p.from_arg) {
            set(code, v, &format!("from CNI_ARGS {:?}", p.from_arg))?;
        }
    }
    Ok(out)
}

fn request_list(list: &[RawRequest]) -> Result<Vec<u8>, CniError> {
    let mut out = Vec::new();
    for r in list {
        let code = option_code(&r.option)?;
        if !out.contains(&code) {
            out.push(code);
        }
    }
    if !list.iter().any(|r| r.skip_default) {
        for code in DEFAULT_REQUEST {
            if !out.contains(&code) {
                out.push(code);
            }
        }
    }
    Ok(out)
}

/// The client identifier of an attachment: `<containerID>/<network>/<ifname>` cut to 254
/// bytes, as Go builds it (and keys its leases by it).
pub fn client_id(container_id: &str, network: &str, ifname: &str) -> Vec<u8> {
    let mut id = format!("{container_id}/{network}/{ifname}").into_bytes();
    id.truncate(254);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ipam: &str, args: &str) -> Result<DhcpConf, CniError> {
        let conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{{"type":"dhcp"{ipam}}}}}"#
        );
        DhcpConf::parse(&RawObject::parse(conf.as_bytes()).unwrap(), args)
    }

    #[test]
    fn defaults_request_mask_and_routers_on_the_default_socket() {
        let c = parse("", "").unwrap();
        assert_eq!(c.socket, DEFAULT_SOCKET);
        assert_eq!(c.params.request, vec![1, 3]);
        assert!(c.params.provide.is_empty());
        assert_eq!(c.params.priority, 0);
    }

    #[test]
    fn request_and_provide_resolve_names_numbers_and_cni_args() {
        let c = parse(
            r#","daemonSocketPath":"/tmp/x.sock","priority":7,
               "request":[{"option":"121"},{"option":"routers"}],
               "provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},
                          {"option":"60","value":"rcni"}]"#,
            "IgnoreUnknown=1;K8S_POD_NAME=web-0;bogus",
        )
        .unwrap();
        assert_eq!(c.socket, "/tmp/x.sock");
        assert_eq!(c.params.request, vec![121, 3, 1]);
        assert_eq!(
            c.params.provide,
            vec![(12, b"web-0".to_vec()), (60, b"rcni".to_vec())]
        );
        assert_eq!(c.params.priority, 7);
    }

    #[test]
    fn skip_default_drops_the_default_request_list() {
        let c = parse(r#","request":[{"option":"121","skipDefault":true}]"#, "").unwrap();
        assert_eq!(c.params.request, vec![121]);
    }

    #[test]
    fn bad_values_are_config_errors() {
        for ipam in [
            r#","request":[{"option":"256"}]"#,
            r#","provide":[{"option":"no-such-option","value":"x"}]"#,
            r#","priority":-1"#,
            r#","suppress":["dns"]"#,
            r#","provide":"x""#,
        ] {
            let e = parse(ipam, "").unwrap_err();
            assert_eq!(e.code, 7, "{ipam}: {e:?}");
        }
        let long = "a".repeat(256);
        let e = parse(
            &format!(r#","provide":[{{"option":"12","value":"{long}"}}]"#),
            "",
        );
        assert_eq!(e.unwrap_err().code, 7);
    }

    #[test]
    fn suppress_gateway_is_recorded() {
        assert!(
            parse(r#","suppress":["gateway"]"#, "")
                .unwrap()
                .params
                .suppress_gateway
        );
    }

    #[test]
    fn client_id_is_cut_to_254_bytes() {
        assert_eq!(client_id("c", "n", "eth0"), b"c/n/eth0");
        assert_eq!(client_id(&"x".repeat(300), "n", "eth0").len(), 254);
    }
}
