//! What the host-local and static IPAM plugins share: turning `cni-ipam`'s errors, routes and
//! DNS settings into their `cni-types` forms, and the address part of an IPAM result.

use std::net::IpAddr;

use cni_ipam::{ConfigError, IpamError};
use cni_plugin::CmdArgs;
use cni_types::{CniArgs, CniError, Dns, IpConfig, Route};
use ipnet::IpNet;

/// A `cni-ipam` error as a CNI error, keeping the code the library chose for it.
pub fn ipam_error(e: IpamError) -> CniError {
    CniError::new(e.cni_code(), e.to_string())
}

/// A configuration error as a CNI error (code 6 for bad JSON, 7 otherwise).
pub fn config_error(e: ConfigError) -> CniError {
    CniError::new(e.cni_code(), e.to_string())
}

/// CNI_ARGS, rejecting keys outside `known` unless `IgnoreUnknown` is set. Go answers 999 for
/// an unknown key; an environment variable the plugin cannot accept is code 4 here.
pub fn checked_cni_args(args: &CmdArgs, known: &[&str]) -> Result<CniArgs, CniError> {
    let parsed = args.cni_args()?;
    parsed.check_known(known).map_err(|e| e.to_cni_error())?;
    Ok(parsed)
}

/// One `ips` entry of an IPAM result: no interface index, the calling plugin sets it.
pub fn ip_config(address: IpNet, gateway: Option<IpAddr>) -> IpConfig {
    IpConfig {
        interface: None,
        address,
        gateway,
    }
}

/// The configured routes in result form. A value the result cannot carry (negative, or beyond
/// 32 bits) is a configuration error rather than a silently different route.
pub fn routes(routes: &[cni_ipam::Route]) -> Result<Vec<Route>, CniError> {
    routes
        .iter()
        .enumerate()
        .map(|(index, route)| {
            let field = |name: &str, value: Option<i64>| -> Result<Option<u32>, CniError> {
                value
                    .map(|v| {
                        u32::try_from(v).map_err(|_| {
                            CniError::invalid_config(format!(
                                "ipam.routes[{index}].{name}: {v} is out of range"
                            ))
                        })
                    })
                    .transpose()
            };
            Ok(Route {
                dst: route.dst,
                gw: route.gw,
                mtu: field("mtu", route.mtu)?.unwrap_or(0),
                advmss: field("advmss", route.advmss)?.unwrap_or(0),
                priority: field("priority", route.priority)?.unwrap_or(0),
                table: field("table", route.table)?,
                scope: field("scope", route.scope)?,
            })
        })
        .collect()
}

/// DNS settings in result form.
pub fn dns(dns: cni_ipam::Dns) -> Dns {
    Dns {
        nameservers: dns.nameservers,
        domain: dns.domain.unwrap_or_default(),
        search: dns.search,
        options: dns.options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(mtu: Option<i64>, table: Option<i64>) -> cni_ipam::Route {
        cni_ipam::Route {
            dst: "198.18.0.0/15".parse().unwrap(),
            gw: Some("198.18.0.1".parse().unwrap()),
            mtu,
            advmss: Some(1400),
            priority: None,
            table,
            scope: Some(0),
        }
    }

    #[test]
    fn routes_keep_every_field() {
        let got = routes(&[route(Some(1500), Some(100))]).unwrap();
        assert_eq!(got[0].mtu, 1500);
        assert_eq!(got[0].advmss, 1400);
        assert_eq!(got[0].priority, 0);
        assert_eq!(got[0].table, Some(100));
        assert_eq!(got[0].scope, Some(0));
        assert_eq!(got[0].gw, Some("198.18.0.1".parse().unwrap()));
    }

    #[test]
    fn out_of_range_route_values_are_config_errors() {
        let e = routes(&[route(Some(1500), None), route(Some(-1), None)]).unwrap_err();
        assert_eq!(e.code, 7);
        assert_eq!(e.msg, "ipam.routes[1].mtu: -1 is out of range");
        let e = routes(&[route(None, Some(1 << 40))]).unwrap_err();
        assert_eq!(e.code, 7);
    }

    #[test]
    fn dns_domain_unset_is_empty() {
        let d = dns(cni_ipam::Dns {
            nameservers: vec!["198.18.0.53".into()],
            domain: None,
            search: vec!["a".into()],
            options: vec![],
        });
        assert_eq!(d.domain, "");
        assert_eq!(d.nameservers, ["198.18.0.53"]);
        assert_eq!(d.search, ["a"]);
    }

    #[test]
    fn errors_keep_library_codes() {
        let e = ipam_error(IpamError::InvalidContainerId { id: "../x".into() });
        assert_eq!(e.code, 4);
        assert_eq!(config_error(ConfigError::NoRanges).code, 7);
        assert_eq!(
            config_error(ConfigError::NoRanges).msg,
            "no IP ranges specified"
        );
    }
}
