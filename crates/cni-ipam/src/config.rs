//! host-local's configuration: the `ipam` section plus the request-level inputs it reads
//! (`runtimeConfig.ipRanges`, `runtimeConfig.ips`, `args.cni.ips`, CNI_ARGS `IP`).

use std::net::IpAddr;
use std::path::PathBuf;

use cni_types::go_object::{as_list, as_str, is_null, GoObject};
use ipnet::IpNet;
use serde_json::value::RawValue;

use crate::error::ConfigError;
use crate::ident;
use crate::ip;
use crate::range::{RangeSet, RangeSpec};

/// A route from `ipam.routes`, copied into the result unchanged. Go omits zero `mtu`, `advmss` and
/// `priority` when printing, so zero is represented as `None` here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination; the address keeps any host bits as written.
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub mtu: Option<i64>,
    pub advmss: Option<i64>,
    pub priority: Option<i64>,
    pub table: Option<i64>,
    pub scope: Option<i64>,
}

/// A validated host-local configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLocalConfig {
    /// The network name (top-level `name`), which names the directory under `data_dir`.
    pub name: String,
    /// The config's `cniVersion` as written (may be empty).
    pub cni_version: String,
    /// Range sets in rangeID order: `runtimeConfig.ipRanges`, the legacy top-level range, `ranges`.
    pub range_sets: Vec<RangeSet>,
    pub routes: Vec<Route>,
    /// `dataDir`, defaulted.
    pub data_dir: PathBuf,
    /// `resolvConf`, if set to a non-empty path.
    pub resolv_conf: Option<PathBuf>,
    /// Requested addresses, canonical and without duplicates, in the order CNI_ARGS `IP`,
    /// `args.cni.ips`, `runtimeConfig.ips`.
    pub requested_ips: Vec<IpAddr>,
}

impl HostLocalConfig {
    /// Parses the whole stdin config of a host-local invocation. `cni_args_ip` is the value of the
    /// `IP` key of CNI_ARGS, if the caller found one (an empty value means none).
    ///
    /// Every known key is type-checked whether or not the configuration uses it (Go decodes
    /// into a struct, so a wrong-typed legacy `rangeStart` fails even when `ranges` is set);
    /// unknown keys are only checked for syntax and never copied.
    pub fn parse(stdin: &[u8], cni_args_ip: Option<&str>) -> Result<Self, ConfigError> {
        let net = GoObject::document(stdin)?;
        let name = net.string("name")?.unwrap_or_default();
        if !ident::is_valid_name(&name) {
            return Err(ConfigError::InvalidNetworkName { name });
        }
        let cni_version = net.string("cniVersion")?.unwrap_or_default();
        let runtime = net.object("runtimeConfig")?;
        let args_cni = net.object("args")?.object("cni")?;
        if net.get("ipam").is_none() {
            return Err(ConfigError::MissingIpam);
        }
        let ipam = net.object("ipam")?;
        // Read for its type check only, as Go does; the plugin dispatches on it.
        ipam.string("type")?;

        let requested_ips = requested_ips(cni_args_ip, &args_cni, &runtime)?;

        let mut specs = range_sets(&runtime, "ipRanges")?;
        // The legacy range's fields are read (and so type-checked) even without a subnet.
        let legacy = RangeSpec {
            subnet: ipam.cidr("subnet")?,
            range_start: ipam.ip("rangeStart")?,
            range_end: ipam.ip("rangeEnd")?,
            gateway: ipam.ip("gateway")?,
        };
        if legacy.subnet.is_some() {
            specs.push(vec![legacy]);
        }
        specs.extend(range_sets(&ipam, "ranges")?);
        let range_sets = validate_range_sets(&specs, &cni_version)?;

        let routes = ipam
            .list("routes")?
            .iter()
            .enumerate()
            .map(|(index, route)| parse_route(route, index, &ipam.path_of("routes")))
            .collect::<Result<Vec<_>, _>>()?;

        let data_dir = match ipam.string("dataDir")?.as_deref() {
            None | Some("") => PathBuf::from(cni_attribution::names::HOST_LOCAL_DATA_DIR),
            Some(dir) => PathBuf::from(dir),
        };
        let resolv_conf = ipam
            .string("resolvConf")?
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);

        Ok(HostLocalConfig {
            name,
            cni_version,
            range_sets,
            routes,
            data_dir,
            resolv_conf,
            requested_ips,
        })
    }
}

/// Collects requested IPs in Go's order. Each may carry a `/prefix`, which is dropped.
fn requested_ips(
    cni_args_ip: Option<&str>,
    args_cni: &GoObject<'_>,
    runtime: &GoObject<'_>,
) -> Result<Vec<IpAddr>, ConfigError> {
    let mut texts: Vec<String> = Vec::new();
    // An empty `IP=` means no address, as with Go's `ip.IP` text decoding.
    texts.extend(
        cni_args_ip
            .filter(|text| !text.is_empty())
            .map(str::to_string),
    );
    for (obj, name) in [(args_cni, "ips"), (runtime, "ips")] {
        let field = obj.path_of(name);
        for value in obj.list(name)? {
            // A `null` or `""` element decodes to no address, which Go then rejects.
            let text = if is_null(value) {
                String::new()
            } else {
                as_str(value, &field)?
            };
            texts.push(text);
        }
    }
    let mut ips: Vec<IpAddr> = Vec::with_capacity(texts.len());
    for text in texts {
        let parsed = ip::parse_ip_with_optional_prefix(&text)
            .ok_or(ConfigError::InvalidRequestedIp { value: text })?;
        if !ips.contains(&parsed) {
            ips.push(parsed);
        }
    }
    Ok(ips)
}

/// Reads a list of range sets (`ranges` or `ipRanges`).
fn range_sets(obj: &GoObject<'_>, name: &str) -> Result<Vec<Vec<RangeSpec>>, ConfigError> {
    let field = obj.path_of(name);
    obj.list(name)?
        .iter()
        .enumerate()
        .map(|(i, set)| {
            let set_field = format!("{field}[{i}]");
            as_list(set, &set_field)?
                .into_iter()
                .enumerate()
                .map(|(j, range)| {
                    let range = GoObject::new(Some(range), format!("{set_field}[{j}]"))?;
                    Ok(RangeSpec {
                        subnet: range.cidr("subnet")?,
                        range_start: range.ip("rangeStart")?,
                        range_end: range.ip("rangeEnd")?,
                        gateway: range.ip("gateway")?,
                    })
                })
                .collect()
        })
        .collect()
}

/// Canonicalises every set, then checks the family count and overlaps across sets.
fn validate_range_sets(
    specs: &[Vec<RangeSpec>],
    cni_version: &str,
) -> Result<Vec<RangeSet>, ConfigError> {
    if specs.is_empty() {
        return Err(ConfigError::NoRanges);
    }
    let sets = specs
        .iter()
        .enumerate()
        .map(|(index, spec)| RangeSet::canonicalize(index, spec))
        .collect::<Result<Vec<_>, _>>()?;

    let v4 = sets.iter().filter(|set| set.is_ipv4()).count();
    let v6 = sets.len() - v4;
    if (v4 > 1 || v6 > 1) && !version_at_least(cni_version, (0, 3, 0)) {
        return Err(ConfigError::TooManyPerFamily {
            version: cni_version.to_string(),
        });
    }
    for (first, a) in sets.iter().enumerate() {
        for (offset, b) in sets[first + 1..].iter().enumerate() {
            if a.overlaps(b) {
                return Err(ConfigError::RangeSetsOverlap {
                    first,
                    second: first + 1 + offset,
                });
            }
        }
    }
    Ok(sets)
}

/// `major.minor.patch` comparison; an unparsable version is never "at least" anything, which is
/// how Go's `version.GreaterThanOrEqualTo` answers it.
pub(crate) fn version_at_least(version: &str, minimum: (u64, u64, u64)) -> bool {
    let mut parts = version.split('.').map(|part| part.parse::<u64>().ok());
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(major)), Some(Some(minor)), Some(Some(patch)), None) => {
            (major, minor, patch) >= minimum
        }
        _ => false,
    }
}

/// Parses one entry of a `routes` list (shared with the static IPAM config).
pub(crate) fn parse_route(
    value: &RawValue,
    index: usize,
    list_field: &str,
) -> Result<Route, ConfigError> {
    let route = GoObject::new(Some(value), format!("{list_field}[{index}]"))?;
    let nonzero = |name: &str| -> Result<Option<i64>, ConfigError> {
        Ok(route.int(name)?.filter(|value| *value != 0))
    };
    Ok(Route {
        dst: route
            .cidr("dst")?
            .ok_or(ConfigError::MissingRouteDst { index })?,
        gw: route.ip("gw")?,
        mtu: nonzero("mtu")?,
        advmss: nonzero("advmss")?,
        priority: nonzero("priority")?,
        table: route.int("table")?,
        scope: route.int("scope")?,
    })
}
