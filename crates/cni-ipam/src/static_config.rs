//! The static IPAM plugin's configuration: fixed addresses, routes and DNS, with the overrides
//! from CNI_ARGS `IP`/`GATEWAY`, `args.cni.ips` and `runtimeConfig.ips`. Nothing is stored.

use std::net::IpAddr;

use cni_types::go_object::{as_str, GoObject};
use ipnet::IpNet;

use crate::config::{parse_route, version_at_least, Route};
use crate::error::{ConfigError, IpamError};
use crate::ip::{canonical, parse_ip};
use crate::resolv::Dns;

/// One address to return. The prefix length and host bits are kept as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticAddress {
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

/// A validated static IPAM configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    pub name: String,
    pub cni_version: String,
    /// May be empty: the result then has no IPs, which is not an error.
    pub addresses: Vec<StaticAddress>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

impl StaticConfig {
    /// Parses the whole stdin config. `cni_args_ip` and `cni_args_gateway` are the values of the
    /// CNI_ARGS keys `IP` and `GATEWAY` (comma-separated lists), if present. Known keys are
    /// type-checked, unknown keys only checked for syntax (see [`crate::HostLocalConfig::parse`]).
    pub fn parse(
        stdin: &[u8],
        cni_args_ip: Option<&str>,
        cni_args_gateway: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let net = GoObject::document(stdin)?;
        let name = net.string("name")?.unwrap_or_default();
        let cni_version = net.string("cniVersion")?.unwrap_or_default();
        let runtime = net.object("runtimeConfig")?;
        let args_cni = net.object("args")?.object("cni")?;
        if net.get("ipam").is_none() {
            return Err(ConfigError::MissingIpam);
        }
        let ipam = net.object("ipam")?;
        ipam.string("type")?;

        let mut addresses = configured_addresses(&ipam)?;
        // 1. CNI_ARGS IP appends, 2. CNI_ARGS GATEWAY fills gateways of matching subnets.
        for item in split_arg(cni_args_ip) {
            addresses.push(StaticAddress {
                address: parse_cidr(item, "CNI_ARGS IP")?,
                gateway: None,
            });
        }
        for item in split_arg(cni_args_gateway) {
            let gateway = parse_ip(item).ok_or_else(|| ConfigError::InvalidGatewayArg {
                value: item.to_string(),
            })?;
            for address in addresses
                .iter_mut()
                .filter(|a| a.address.contains(&gateway))
            {
                address.gateway = Some(gateway);
            }
        }
        // 3. args.cni.ips replaces, 4. runtimeConfig.ips replaces again; gateways are dropped.
        for (obj, name) in [(&args_cni, "ips"), (&runtime, "ips")] {
            let items = obj.list(name)?;
            if !items.is_empty() {
                let field = obj.path_of(name);
                addresses = items
                    .iter()
                    .map(|item| {
                        Ok(StaticAddress {
                            address: parse_cidr(&as_str(item, &field)?, &field)?,
                            gateway: None,
                        })
                    })
                    .collect::<Result<_, ConfigError>>()?;
            }
        }

        let v4 = addresses
            .iter()
            .filter(|a| a.address.addr().is_ipv4())
            .count();
        let v6 = addresses.len() - v4;
        if (v4 > 1 || v6 > 1) && !version_at_least(&cni_version, (0, 3, 0)) {
            return Err(ConfigError::TooManyPerFamily {
                version: cni_version,
            });
        }

        let routes_field = ipam.path_of("routes");
        let routes = ipam
            .list("routes")?
            .iter()
            .enumerate()
            .map(|(index, route)| parse_route(route, index, &routes_field))
            .collect::<Result<Vec<_>, _>>()?;

        Ok(StaticConfig {
            name,
            cni_version,
            addresses,
            routes,
            dns: parse_dns(&ipam.object("dns")?)?,
        })
    }

    /// static's CHECK: fails only when a configured address appears in `ips` (address, gateway
    /// pairs from prevResult) with a different gateway while a gateway is configured. A configured
    /// address missing from `ips` is not detected, as in Go.
    pub fn check(&self, ips: &[(IpAddr, Option<IpAddr>)]) -> Result<(), IpamError> {
        for configured in &self.addresses {
            let ip = configured.address.addr();
            let Some((_, found_gateway)) = ips.iter().find(|(addr, _)| canonical(*addr) == ip)
            else {
                continue;
            };
            if let Some(gateway) = configured.gateway {
                if found_gateway.map(canonical) != Some(canonical(gateway)) {
                    return Err(IpamError::StaticMismatch { ip });
                }
            }
        }
        Ok(())
    }
}

/// `ipam.addresses`: `{address: CIDR, gateway: IP}` entries.
fn configured_addresses(ipam: &GoObject<'_>) -> Result<Vec<StaticAddress>, ConfigError> {
    let field = ipam.path_of("addresses");
    ipam.list("addresses")?
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let entry = GoObject::new(Some(entry), format!("{field}[{i}]"))?;
            let address = entry.string("address")?.unwrap_or_default();
            Ok(StaticAddress {
                address: parse_cidr(&address, &entry.path_of("address"))?,
                gateway: entry.ip("gateway")?,
            })
        })
        .collect()
}

/// A comma-separated CNI_ARGS value; items are trimmed, an absent or empty value has none.
fn split_arg(value: Option<&str>) -> impl Iterator<Item = &str> {
    value
        .filter(|v| !v.is_empty())
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// A CIDR whose address keeps its host bits, IPv4-mapped addresses turned into IPv4.
fn parse_cidr(text: &str, field: &str) -> Result<IpNet, ConfigError> {
    let invalid = || ConfigError::InvalidStaticAddress {
        field: field.to_string(),
        value: text.to_string(),
    };
    let net: IpNet = text.parse().map_err(|_| invalid())?;
    let addr = canonical(net.addr());
    if addr == net.addr() {
        return Ok(net);
    }
    // `::ffff:a.b.c.d/n` with n >= 96 is the IPv4 network a.b.c.d/(n-96), as Go reads it.
    net.prefix_len()
        .checked_sub(96)
        .and_then(|prefix| IpNet::new(addr, prefix).ok())
        .ok_or_else(invalid)
}

/// `ipam.dns`, shaped like a result's `dns`.
fn parse_dns(dns: &GoObject<'_>) -> Result<Dns, ConfigError> {
    let strings = |name: &str| -> Result<Vec<String>, ConfigError> {
        let field = dns.path_of(name);
        dns.list(name)?
            .iter()
            .map(|v| as_str(v, &field).map_err(ConfigError::from))
            .collect()
    };
    Ok(Dns {
        nameservers: strings("nameservers")?,
        domain: dns.string("domain")?.filter(|d| !d.is_empty()),
        search: strings("search")?,
        options: strings("options")?,
    })
}
