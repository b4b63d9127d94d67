//! ADD results in every wire layout, with conversions (SPEC.md, Section 5: Result Types; Go's
//! `pkg/types/{020,040,100}/types.go` and `pkg/types/internal/convert.go`).
//!
//! [`CniResult`] is the 1.1.0 model. Any layout parses into it and it renders into any layout.
//! Deliberate differences from the Go reference:
//! - fields a version does not define are dropped when rendering that version (1.1 interface
//!   and route fields are not written at 1.0.0 or 0.x);
//! - down-conversion to 0.2.0 takes each IP's family from its address, so IPs without a
//!   `version` key are not lost.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::version::{ResultLayout, SpecVersion};

/// Why a result could not be parsed or converted.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("unsupported CNI result version \"{0}\"")]
    UnsupportedVersion(String),
    #[error("invalid cniVersion in result: {0}")]
    BadVersion(#[from] crate::version::VersionParseError),
    #[error("failed to parse {version} result: {source}")]
    Decode {
        version: SpecVersion,
        #[source]
        source: serde_json::Error,
    },
    #[error("result must be a JSON object")]
    NotAnObject,
    #[error("cannot convert: no valid IP addresses")]
    NoAddressesForLegacy,
}

/// An interface the attachment created or touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    /// 1.1.0 only; 0 means unset.
    pub mtu: u32,
    /// The netns path for container interfaces, empty for host interfaces.
    pub sandbox: String,
    /// 1.1.0 only.
    pub socket_path: String,
    /// 1.1.0 only.
    pub pci_id: String,
}

/// One address of the attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Index into `interfaces`; `None` when unknown (IPAM results), `-1` is kept as given.
    pub interface: Option<i64>,
    /// Address with its prefix length, host bits kept (`198.18.1.5/16`).
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

impl IpConfig {
    pub fn is_ipv4(&self) -> bool {
        matches!(self.address, IpNet::V4(_))
    }
}

/// One route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    /// 1.1.0 fields: 0 means unset for `mtu`, `advmss`, `priority`.
    pub mtu: u32,
    pub advmss: u32,
    pub priority: u32,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

impl Route {
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            mtu: 0,
            advmss: 0,
            priority: 0,
            table: None,
            scope: None,
        }
    }
}

/// DNS settings, as in the config's `dns` key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dns {
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub nameservers: Vec<String>,
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub domain: String,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub search: Vec<String>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// A success result, held in the 1.1.0 model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniResult {
    /// The version the result was parsed from or produced for.
    pub cni_version: SpecVersion,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

impl CniResult {
    pub fn new(version: SpecVersion) -> Self {
        CniResult {
            cni_version: version,
            interfaces: Vec::new(),
            ips: Vec::new(),
            routes: Vec::new(),
            dns: Dns::default(),
        }
    }

    /// Parses a result in any layout. A missing or empty `cniVersion` takes `fallback`
    /// (libcni fills in the config's version, `fixupResultVersion` in `pkg/invoke/exec.go`).
    pub fn parse(value: &Value, fallback: SpecVersion) -> Result<CniResult, ResultError> {
        let obj = match value {
            Value::Object(o) => o,
            Value::Null => return Ok(CniResult::new(fallback)),
            _ => return Err(ResultError::NotAnObject),
        };
        let version = match obj.get("cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => SpecVersion::parse(s)?,
            _ => fallback,
        };
        let layout = version
            .result_layout()
            .ok_or_else(|| ResultError::UnsupportedVersion(version.to_string()))?;
        let decode = |source| ResultError::Decode { version, source };
        let mut result = match layout {
            ResultLayout::V02 => {
                let wire = WireV02::deserialize(value).map_err(decode)?;
                from_v02(wire)
            }
            ResultLayout::V04 | ResultLayout::V1 => {
                let wire = WireV1::deserialize(value).map_err(decode)?;
                from_v1(wire)
            }
        };
        result.cni_version = version;
        Ok(result)
    }

    /// Parses result bytes; see [`CniResult::parse`].
    pub fn from_slice(bytes: &[u8], fallback: SpecVersion) -> Result<CniResult, ResultError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|source| ResultError::Decode {
            version: fallback,
            source,
        })?;
        CniResult::parse(&value, fallback)
    }

    /// Renders the result in `version`'s layout.
    pub fn to_value(&self, version: SpecVersion) -> Result<Value, ResultError> {
        let layout = version
            .result_layout()
            .ok_or_else(|| ResultError::UnsupportedVersion(version.to_string()))?;
        let rendered = match layout {
            ResultLayout::V02 => serde_json::to_value(to_v02(self, version)?),
            ResultLayout::V04 | ResultLayout::V1 => {
                serde_json::to_value(to_v1(self, version, layout))
            }
        };
        // Our wire structs contain only strings, numbers and lists: serializing cannot fail.
        Ok(rendered.unwrap_or(Value::Null))
    }

    /// A copy stamped with another version (content unchanged; the layout is chosen on render).
    pub fn with_version(&self, version: SpecVersion) -> CniResult {
        let mut r = self.clone();
        r.cni_version = version;
        r
    }

    /// Renders with Go's plugin formatting: 4-space indentation.
    pub fn to_json_pretty(&self, version: SpecVersion) -> Result<String, ResultError> {
        Ok(crate::pretty_json(&self.to_value(version)?))
    }
}

// ---- wire layouts -------------------------------------------------------------------------

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Go treats `""` as an unset IP.
fn optional_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("invalid IP address: {s}"))),
    }
}

fn cidr<'de, D: Deserializer<'de>>(d: D) -> Result<IpNet, D::Error> {
    let s = String::deserialize(d)?;
    parse_cidr(&s).ok_or_else(|| D::Error::custom(format!("invalid CIDR address: {s}")))
}

/// Parses `addr/prefix`, keeping host bits.
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse().ok()
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireInterface {
    #[serde(default, deserialize_with = "null_as_default")]
    name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    mac: String,
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "null_as_default"
    )]
    mtu: u32,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    sandbox: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    socket_path: String,
    #[serde(
        rename = "pciID",
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pci_id: String,
}

#[derive(Serialize, Deserialize)]
struct WireIp {
    /// Only in 0.3.x/0.4.0; ignored when parsing, derived from the address when rendering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interface: Option<i64>,
    #[serde(deserialize_with = "cidr", serialize_with = "ser_display")]
    address: IpNet,
    #[serde(
        default,
        deserialize_with = "optional_ip",
        skip_serializing_if = "Option::is_none"
    )]
    gateway: Option<IpAddr>,
}

#[derive(Serialize, Deserialize)]
struct WireRoute {
    #[serde(deserialize_with = "cidr", serialize_with = "ser_display")]
    dst: IpNet,
    #[serde(
        default,
        deserialize_with = "optional_ip",
        skip_serializing_if = "Option::is_none"
    )]
    gw: Option<IpAddr>,
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "null_as_default"
    )]
    mtu: u32,
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "null_as_default"
    )]
    advmss: u32,
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "null_as_default"
    )]
    priority: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<u32>,
}

fn ser_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// 0.3.0 – 1.1.0.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireV1 {
    #[serde(default)]
    cni_version: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    interfaces: Vec<WireInterface>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    ips: Vec<WireIp>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<WireRoute>,
    /// Always written for 0.x (Go writes `"dns":{}`), omitted when empty for 1.x.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "null_as_default"
    )]
    dns: Option<Dns>,
}

#[derive(Serialize, Deserialize)]
struct WireIpV02 {
    #[serde(deserialize_with = "cidr", serialize_with = "ser_display")]
    ip: IpNet,
    #[serde(
        default,
        deserialize_with = "optional_ip",
        skip_serializing_if = "Option::is_none"
    )]
    gateway: Option<IpAddr>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    routes: Vec<WireRouteV02>,
}

#[derive(Serialize, Deserialize)]
struct WireRouteV02 {
    #[serde(deserialize_with = "cidr", serialize_with = "ser_display")]
    dst: IpNet,
    #[serde(
        default,
        deserialize_with = "optional_ip",
        skip_serializing_if = "Option::is_none"
    )]
    gw: Option<IpAddr>,
}

/// 0.1.0 and 0.2.0.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireV02 {
    #[serde(default)]
    cni_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<WireIpV02>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<WireIpV02>,
    #[serde(default, deserialize_with = "null_as_default")]
    dns: Dns,
}

fn from_v1(w: WireV1) -> CniResult {
    CniResult {
        cni_version: SpecVersion::CURRENT,
        interfaces: w
            .interfaces
            .into_iter()
            .map(|i| Interface {
                name: i.name,
                mac: i.mac,
                mtu: i.mtu,
                sandbox: i.sandbox,
                socket_path: i.socket_path,
                pci_id: i.pci_id,
            })
            .collect(),
        ips: w
            .ips
            .into_iter()
            .map(|ip| IpConfig {
                interface: ip.interface,
                address: ip.address,
                gateway: ip.gateway,
            })
            .collect(),
        routes: w
            .routes
            .into_iter()
            .map(|r| Route {
                dst: r.dst,
                gw: r.gw,
                mtu: r.mtu,
                advmss: r.advmss,
                priority: r.priority,
                table: r.table,
                scope: r.scope,
            })
            .collect(),
        dns: w.dns.unwrap_or_default(),
    }
}

fn from_v02(w: WireV02) -> CniResult {
    let mut r = CniResult::new(SpecVersion::V0_2_0);
    for ip in [w.ip4, w.ip6].into_iter().flatten() {
        r.ips.push(IpConfig {
            interface: None,
            address: ip.ip,
            gateway: ip.gateway,
        });
        r.routes
            .extend(ip.routes.into_iter().map(|rt| Route::new(rt.dst, rt.gw)));
    }
    r.dns = w.dns;
    r
}

fn to_v1(r: &CniResult, version: SpecVersion, layout: ResultLayout) -> WireV1 {
    let v11 = version >= SpecVersion::V1_1_0;
    WireV1 {
        cni_version: version.to_string(),
        interfaces: r
            .interfaces
            .iter()
            .map(|i| WireInterface {
                name: i.name.clone(),
                mac: i.mac.clone(),
                mtu: if v11 { i.mtu } else { 0 },
                sandbox: i.sandbox.clone(),
                socket_path: if v11 {
                    i.socket_path.clone()
                } else {
                    String::new()
                },
                pci_id: if v11 { i.pci_id.clone() } else { String::new() },
            })
            .collect(),
        ips: r
            .ips
            .iter()
            .map(|ip| WireIp {
                version: (layout == ResultLayout::V04)
                    .then(|| if ip.is_ipv4() { "4" } else { "6" }.to_string()),
                interface: ip.interface,
                address: ip.address,
                gateway: ip.gateway,
            })
            .collect(),
        routes: r
            .routes
            .iter()
            .map(|rt| WireRoute {
                dst: rt.dst,
                gw: rt.gw,
                mtu: if v11 { rt.mtu } else { 0 },
                advmss: if v11 { rt.advmss } else { 0 },
                priority: if v11 { rt.priority } else { 0 },
                table: rt.table.filter(|_| v11),
                scope: rt.scope.filter(|_| v11),
            })
            .collect(),
        dns: match layout {
            ResultLayout::V04 => Some(r.dns.clone()),
            _ => (!r.dns.is_empty()).then(|| r.dns.clone()),
        },
    }
}

fn to_v02(r: &CniResult, version: SpecVersion) -> Result<WireV02, ResultError> {
    let first = |v4: bool| r.ips.iter().find(|ip| ip.is_ipv4() == v4);
    let (ip4, ip6) = (first(true), first(false));
    if ip4.is_none() && ip6.is_none() {
        return Err(ResultError::NoAddressesForLegacy);
    }
    let block = |ip: &IpConfig| WireIpV02 {
        ip: ip.address,
        gateway: ip.gateway,
        routes: r
            .routes
            .iter()
            .filter(|rt| matches!(rt.dst, IpNet::V4(_)) == ip.is_ipv4())
            .map(|rt| WireRouteV02 {
                dst: rt.dst,
                gw: rt.gw,
            })
            .collect(),
    };
    Ok(WireV02 {
        cni_version: version.to_string(),
        ip4: ip4.map(block),
        ip6: ip6.map(block),
        dns: r.dns.clone(),
    })
}

#[cfg(test)]
mod tests;
