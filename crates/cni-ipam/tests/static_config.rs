//! The static IPAM configuration: addresses, overrides in Go's order, routes, DNS and CHECK.

use std::net::IpAddr;

use cni_ipam::{ConfigError, StaticAddress, StaticConfig};
use serde_json::{json, Value};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn parse(
    value: &Value,
    ip_arg: Option<&str>,
    gw_arg: Option<&str>,
) -> Result<StaticConfig, ConfigError> {
    StaticConfig::parse(value.to_string().as_bytes(), ip_arg, gw_arg)
}

fn base() -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "static-net",
        "ipam": {
            "type": "static",
            "addresses": [
                {"address": "198.19.32.5/24", "gateway": "198.19.32.1"},
                {"address": "fd00::5/64"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["198.19.32.1"], "domain": "example.com", "search": ["example.com"], "options": ["ndots:2"]}
        }
    })
}

fn address(cidr: &str, gateway: Option<&str>) -> StaticAddress {
    StaticAddress {
        address: cidr.parse().unwrap(),
        gateway: gateway.map(ip),
    }
}

#[test]
fn configured_addresses_routes_and_dns() {
    let config = parse(&base(), None, None).unwrap();
    assert_eq!(config.name, "static-net");
    assert_eq!(
        config.addresses,
        [
            address("198.19.32.5/24", Some("198.19.32.1")),
            address("fd00::5/64", None)
        ]
    );
    assert_eq!(config.routes[0].dst.to_string(), "0.0.0.0/0");
    assert_eq!(config.dns.nameservers, ["198.19.32.1"]);
    assert_eq!(config.dns.domain.as_deref(), Some("example.com"));
    assert_eq!(config.dns.search, ["example.com"]);
    assert_eq!(config.dns.options, ["ndots:2"]);
}

#[test]
fn empty_address_list_is_not_an_error() {
    let config = parse(
        &json!({"name": "n", "ipam": {"type": "static"}}),
        None,
        None,
    )
    .unwrap();
    assert!(config.addresses.is_empty());
}

#[test]
fn cni_args_append_and_fill_gateways() {
    let config = parse(
        &base(),
        Some("198.19.64.7/20, 198.19.80.7/24"),
        Some("198.19.64.1,198.19.32.254"),
    )
    .unwrap();
    assert_eq!(
        config.addresses,
        [
            address("198.19.32.5/24", Some("198.19.32.254")),
            address("fd00::5/64", None),
            address("198.19.64.7/20", Some("198.19.64.1")),
            address("198.19.80.7/24", None),
        ]
    );
}

#[test]
fn args_then_runtime_config_replace_addresses() {
    let mut value = base();
    value["args"] = json!({"cni": {"ips": ["198.19.96.4/24"]}});
    let config = parse(&value, Some("198.19.64.7/20"), None).unwrap();
    assert_eq!(config.addresses, [address("198.19.96.4/24", None)]);
    value["RuntimeConfig"] = json!({"ips": ["198.19.112.5/24", "fd00::50/64"]});
    let config = parse(&value, None, None).unwrap();
    assert_eq!(
        config.addresses,
        [
            address("198.19.112.5/24", None),
            address("fd00::50/64", None)
        ]
    );
}

#[test]
fn errors() {
    let mut bad_address = base();
    bad_address["ipam"]["addresses"][0]["address"] = json!("198.19.32.5");
    let mut missing_address = base();
    missing_address["ipam"]["addresses"][0] = json!({"gateway": "198.19.32.1"});
    let mut bad_runtime = base();
    bad_runtime["runtimeConfig"] = json!({"ips": ["198.18.145.1"]});
    let mut two_v4_old = base();
    two_v4_old["cniVersion"] = json!("0.2.0");
    two_v4_old["ipam"]["addresses"][1]["address"] = json!("198.19.48.5/24");
    let mut bad_dns = base();
    bad_dns["ipam"]["dns"]["nameservers"] = json!("198.18.128.1");
    let no_ipam = json!({"name": "n"});

    let cases: Vec<(Value, Option<&str>, Option<&str>)> = vec![
        (bad_address, None, None),
        (missing_address, None, None),
        (bad_runtime, None, None),
        (two_v4_old, None, None),
        (bad_dns, None, None),
        (no_ipam, None, None),
        (base(), Some("198.18.128.1"), None),
        (base(), None, Some("not-an-ip")),
    ];
    for (value, ip_arg, gw_arg) in cases {
        let error = parse(&value, ip_arg, gw_arg).expect_err(&value.to_string());
        assert_eq!(error.cni_code(), 7, "{error}");
    }
}

#[test]
fn check_compares_gateways_of_configured_addresses_only() {
    let config = parse(&base(), None, None).unwrap();
    config
        .check(&[
            (ip("198.19.32.5"), Some(ip("198.19.32.1"))),
            (ip("fd00::5"), None),
        ])
        .unwrap();
    // Missing addresses are not detected, as in Go.
    config.check(&[]).unwrap();
    // No configured gateway: any gateway matches.
    config
        .check(&[(ip("fd00::5"), Some(ip("fd00::1")))])
        .unwrap();
    let error = config
        .check(&[(ip("198.19.32.5"), Some(ip("198.19.32.9")))])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "static: Failed to match addr 198.19.32.5"
    );
    assert!(config.check(&[(ip("198.19.32.5"), None)]).is_err());
}
