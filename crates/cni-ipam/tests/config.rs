//! host-local configuration: parsing with Go's JSON leniency, defaults, and every error.

use std::net::IpAddr;
use std::path::PathBuf;

use cni_ipam::{ConfigError, HostLocal, HostLocalConfig, IpamError, Route};
use serde_json::{json, Value};

/// Recognises the expected error variant.
type Expect = fn(&ConfigError) -> bool;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn parse(value: Value) -> Result<HostLocalConfig, ConfigError> {
    HostLocalConfig::parse(value.to_string().as_bytes(), None)
}

fn with_ipam(ipam: Value) -> Value {
    json!({"cniVersion": "1.0.0", "name": "net1", "ipam": ipam})
}

fn err(value: Value) -> ConfigError {
    parse(value).expect_err("config should be rejected")
}

fn ranges(subnet_specs: Value) -> Value {
    with_ipam(json!({"type": "host-local", "ranges": subnet_specs}))
}

#[test]
fn legacy_range_defaults() {
    let config = parse(with_ipam(
        json!({"type": "host-local", "subnet": "198.18.146.0/24"}),
    ))
    .unwrap();
    assert_eq!(config.name, "net1");
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/cni/networks"));
    assert_eq!(config.resolv_conf, None);
    let range = &config.range_sets[0].ranges()[0];
    assert_eq!(range.range_start, ip("198.18.146.1"));
    assert_eq!(range.range_end, ip("198.18.146.254"));
    assert_eq!(range.gateway, ip("198.18.146.1"));
    assert_eq!(
        config.range_sets[0].to_string(),
        "198.18.146.1-198.18.146.254"
    );
}

#[test]
fn ipv6_defaults_include_the_all_ones_address() {
    let config = parse(ranges(json!([[{"subnet": "fd00::/120"}]]))).unwrap();
    let range = &config.range_sets[0].ranges()[0];
    assert_eq!(range.range_start, ip("fd00::1"));
    assert_eq!(range.range_end, ip("fd00::ff"));
    assert_eq!(range.gateway, ip("fd00::1"));
}

#[test]
fn range_set_order_is_ip_ranges_then_legacy_then_ranges() {
    let value = json!({
        "cniVersion": "1.0.0",
        "name": "net1",
        "runtimeConfig": {"ipRanges": [[{"subnet": "198.19.16.0/24"}]]},
        "ipam": {
            "type": "host-local",
            "subnet": "198.18.144.0/24",
            "ranges": [[{"subnet": "198.18.160.0/24"}], [{"subnet": "fd00::/64"}]]
        }
    });
    let config = parse(value).unwrap();
    let subnets: Vec<String> = config
        .range_sets
        .iter()
        .map(|s| s.ranges()[0].subnet.to_string())
        .collect();
    assert_eq!(
        subnets,
        [
            "198.19.16.0/24",
            "198.18.144.0/24",
            "198.18.160.0/24",
            "fd00::/64"
        ]
    );
}

#[test]
fn go_json_leniency() {
    let value = json!({
        "cniVersion": "0.4.0",
        "Name": "net1",
        "RuntimeConfig": {"IPs": ["198.18.144.7/24"]},
        "IPAM": {
            "Type": "host-local",
            "Subnet": "198.18.144.0/24",
            "gateway": "",
            "rangeStart": "",
            "DataDir": "",
            "resolvConf": "",
            "unknownKey": {"anything": [1, 2]},
            "routes": [{"DST": "0.0.0.0/0", "gw": "", "mtu": 0, "table": 100, "scope": 0}]
        }
    });
    let config = parse(value).unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/cni/networks"));
    assert_eq!(config.resolv_conf, None);
    assert_eq!(config.requested_ips, [ip("198.18.144.7")]);
    assert_eq!(config.range_sets[0].ranges()[0].gateway, ip("198.18.144.1"));
    assert_eq!(
        config.routes,
        [Route {
            dst: "0.0.0.0/0".parse().unwrap(),
            gw: None,
            mtu: None,
            advmss: None,
            priority: None,
            table: Some(100),
            scope: Some(0),
        }]
    );
}

#[test]
fn last_duplicate_key_wins() {
    let text = br#"{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"198.18.144.0/24","subnet":"198.18.160.0/24"}}"#;
    let config = HostLocalConfig::parse(text, None).unwrap();
    assert_eq!(
        config.range_sets[0].ranges()[0].subnet.to_string(),
        "198.18.160.0/24"
    );
}

#[test]
fn routes_keep_every_field_and_host_bits() {
    let config = parse(with_ipam(json!({
        "subnet": "198.18.144.0/24",
        "routes": [
            {"dst": "192.168.7.9/16", "gw": "198.18.144.254", "mtu": 1400, "advmss": 1360, "priority": 5, "table": 7, "scope": 253}
        ]
    })))
    .unwrap();
    let route = &config.routes[0];
    assert_eq!(route.dst.to_string(), "192.168.7.9/16");
    assert_eq!(route.gw, Some(ip("198.18.144.254")));
    assert_eq!(
        (route.mtu, route.advmss, route.priority),
        (Some(1400), Some(1360), Some(5))
    );
    assert_eq!((route.table, route.scope), (Some(7), Some(253)));
}

#[test]
fn data_dir_and_resolv_conf() {
    let config = parse(with_ipam(json!({
        "subnet": "198.18.144.0/24", "dataDir": "/tmp/x", "resolvConf": "/etc/resolv.conf"
    })))
    .unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(config.resolv_conf, Some(PathBuf::from("/etc/resolv.conf")));
}

#[test]
fn requested_ips_in_go_order_without_prefix_or_duplicates() {
    let value = json!({
        "cniVersion": "1.0.0", "name": "n",
        "args": {"cni": {"ips": ["198.18.144.8", "fd00::8/64"]}},
        "runtimeConfig": {"ips": ["198.18.144.8/24", "::ffff:198.18.144.9"]},
        "ipam": {"subnet": "198.18.144.0/24"}
    });
    let config =
        HostLocalConfig::parse(value.to_string().as_bytes(), Some("198.18.144.7/24")).unwrap();
    assert_eq!(
        config.requested_ips,
        [
            ip("198.18.144.7"),
            ip("198.18.144.8"),
            ip("fd00::8"),
            ip("198.18.144.9")
        ]
    );
    // An empty CNI_ARGS `IP=` requests nothing.
    let config = HostLocalConfig::parse(value.to_string().as_bytes(), Some("")).unwrap();
    assert_eq!(config.requested_ips.len(), 3);
}

#[test]
fn multiple_sets_per_family_need_cni_0_3_0() {
    let ipam =
        json!({"ranges": [[{"subnet": "198.18.144.0/24"}], [{"subnet": "198.18.160.0/24"}]]});
    for version in ["0.2.0", "0.1.0", "", "garbage"] {
        let value = json!({"cniVersion": version, "name": "n", "ipam": ipam});
        assert!(
            matches!(err(value), ConfigError::TooManyPerFamily { .. }),
            "{version}"
        );
    }
    for version in ["0.3.0", "0.3.1", "1.1.0"] {
        let value = json!({"cniVersion": version, "name": "n", "ipam": ipam});
        assert!(parse(value).is_ok(), "{version}");
    }
    // One set per family is fine at any version.
    let dual = json!({"cniVersion": "0.2.0", "name": "n",
        "ipam": {"ranges": [[{"subnet": "198.18.144.0/24"}], [{"subnet": "fd00::/64"}]]}});
    assert!(parse(dual).is_ok());
}

/// Every error, its variant and its CNI code.
#[test]
fn every_config_error() {
    let cases: Vec<(Value, Expect)> = vec![
        (json!({"name": "n"}), |e| {
            matches!(e, ConfigError::MissingIpam)
        }),
        (json!({"name": "n", "ipam": null}), |e| {
            matches!(e, ConfigError::MissingIpam)
        }),
        (json!({"name": "n", "ipam": "x"}), |e| {
            matches!(e, ConfigError::WrongType { .. })
        }),
        (
            json!({"name": "n", "ipam": {"type": 5, "subnet": "198.18.0.0/15"}}),
            |e| matches!(e, ConfigError::WrongType { .. }),
        ),
        (json!({"ipam": {"subnet": "198.18.0.0/15"}}), |e| {
            matches!(e, ConfigError::InvalidNetworkName { .. })
        }),
        (
            json!({"name": "../etc", "ipam": {"subnet": "198.18.0.0/15"}}),
            |e| matches!(e, ConfigError::InvalidNetworkName { .. }),
        ),
        (
            json!({"name": "a/b", "ipam": {"subnet": "198.18.0.0/15"}}),
            |e| matches!(e, ConfigError::InvalidNetworkName { .. }),
        ),
        (with_ipam(json!({"type": "host-local"})), |e| {
            matches!(e, ConfigError::NoRanges)
        }),
        (with_ipam(json!({"rangeStart": "198.18.128.5"})), |e| {
            matches!(e, ConfigError::NoRanges)
        }),
        (with_ipam(json!({"subnet": ""})), |e| {
            matches!(e, ConfigError::InvalidCidr { .. })
        }),
        (with_ipam(json!({"subnet": "198.18.128.0"})), |e| {
            matches!(e, ConfigError::InvalidCidr { .. })
        }),
        (with_ipam(json!({"subnet": "198.18.128.0/33"})), |e| {
            matches!(e, ConfigError::InvalidCidr { .. })
        }),
        (with_ipam(json!({"subnet": 10})), |e| {
            matches!(e, ConfigError::WrongType { .. })
        }),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "gateway": "198.18.128"})),
            |e| matches!(e, ConfigError::InvalidIp { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeStart": "x"})),
            |e| matches!(e, ConfigError::InvalidIp { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeEnd": "198.18.128.256"})),
            |e| matches!(e, ConfigError::InvalidIp { .. }),
        ),
        (ranges(json!([[]])), |e| {
            matches!(e, ConfigError::EmptyRangeSet { set: 0 })
        }),
        (ranges(json!([null])), |e| {
            matches!(e, ConfigError::EmptyRangeSet { set: 0 })
        }),
        (ranges(json!("x")), |e| {
            matches!(e, ConfigError::WrongType { .. })
        }),
        (ranges(json!([[{"rangeStart": "198.18.128.1"}]])), |e| {
            matches!(e, ConfigError::MissingSubnet { set: 0, range: 0 })
        }),
        (
            ranges(json!([[{"subnet": "198.18.128.0/24"}, {"gateway": "198.18.144.1"}]])),
            |e| matches!(e, ConfigError::MissingSubnet { set: 0, range: 1 }),
        ),
        (
            ranges(json!([[{"subnet": "198.18.128.0/24"}, {"subnet": "fd00::/64"}]])),
            |e| matches!(e, ConfigError::MixedFamilies { set: 0 }),
        ),
        (with_ipam(json!({"subnet": "198.18.128.0/31"})), |e| {
            matches!(e, ConfigError::SubnetTooSmall { .. })
        }),
        (with_ipam(json!({"subnet": "198.18.128.0/32"})), |e| {
            matches!(e, ConfigError::SubnetTooSmall { .. })
        }),
        (with_ipam(json!({"subnet": "fd00::/127"})), |e| {
            matches!(e, ConfigError::SubnetTooSmall { .. })
        }),
        (with_ipam(json!({"subnet": "fd00::/128"})), |e| {
            matches!(e, ConfigError::SubnetTooSmall { .. })
        }),
        (
            with_ipam(json!({"subnet": "::ffff:198.18.128.0/120"})),
            |e| matches!(e, ConfigError::SubnetFamilyMismatch { .. }),
        ),
        (with_ipam(json!({"subnet": "198.18.128.1/24"})), |e| {
            matches!(e, ConfigError::HostBitsSet { .. })
        }),
        (with_ipam(json!({"subnet": "fd00::1/64"})), |e| {
            matches!(e, ConfigError::HostBitsSet { .. })
        }),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeStart": "198.18.129.5"})),
            |e| matches!(e, ConfigError::RangeStartOutside { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeStart": "fd00::5"})),
            |e| matches!(e, ConfigError::RangeStartOutside { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeEnd": "198.18.129.5"})),
            |e| matches!(e, ConfigError::RangeEndOutside { .. }),
        ),
        (
            with_ipam(
                json!({"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.50", "rangeEnd": "198.18.128.40"}),
            ),
            |e| matches!(e, ConfigError::RangeStartAfterEnd { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.255"})),
            |e| matches!(e, ConfigError::RangeStartAfterEnd { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "gateway": "fd00::1"})),
            |e| matches!(e, ConfigError::GatewayFamilyMismatch { .. }),
        ),
        (
            ranges(json!([[
                {"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.10", "rangeEnd": "198.18.128.20"},
                {"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.20", "rangeEnd": "198.18.128.30"}
            ]])),
            |e| matches!(e, ConfigError::RangesOverlap { set: 0, .. }),
        ),
        (
            ranges(json!([[{"subnet": "198.18.128.0/20"}, {"subnet": "198.18.133.0/24"}]])),
            |e| matches!(e, ConfigError::RangesOverlap { set: 0, .. }),
        ),
        (
            ranges(
                json!([[{"subnet": "198.18.128.0/24"}], [{"subnet": "fd00::/64"}], [{"subnet": "198.18.128.0/25"}]]),
            ),
            |e| {
                matches!(
                    e,
                    ConfigError::RangeSetsOverlap {
                        first: 0,
                        second: 2
                    }
                )
            },
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n",
                   "runtimeConfig": {"ipRanges": [[{"subnet": "198.18.128.0/24"}]]},
                   "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| {
                matches!(
                    e,
                    ConfigError::RangeSetsOverlap {
                        first: 0,
                        second: 1
                    }
                )
            },
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "routes": [{"gw": "198.18.128.1"}]})),
            |e| matches!(e, ConfigError::MissingRouteDst { index: 0 }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "routes": [{"dst": ""}]})),
            |e| matches!(e, ConfigError::InvalidCidr { .. }),
        ),
        (
            with_ipam(
                json!({"subnet": "198.18.128.0/24", "routes": [{"dst": "0.0.0.0/0", "mtu": 1.5}]}),
            ),
            |e| matches!(e, ConfigError::InvalidInteger { .. }),
        ),
        (
            with_ipam(
                json!({"subnet": "198.18.128.0/24", "routes": [{"dst": "0.0.0.0/0", "table": "7"}]}),
            ),
            |e| matches!(e, ConfigError::WrongType { .. }),
        ),
        (
            with_ipam(json!({"subnet": "198.18.128.0/24", "routes": {"dst": "0.0.0.0/0"}})),
            |e| matches!(e, ConfigError::WrongType { .. }),
        ),
        (
            json!({"name": "n", "runtimeConfig": {"ips": ["nope"]}, "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| matches!(e, ConfigError::InvalidRequestedIp { .. }),
        ),
        (
            json!({"name": "n", "args": {"cni": {"ips": [""]}}, "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| matches!(e, ConfigError::InvalidRequestedIp { .. }),
        ),
        (
            json!({"name": "n", "args": {"cni": {"ips": [null]}}, "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| matches!(e, ConfigError::InvalidRequestedIp { .. }),
        ),
        (
            json!({"name": "n", "runtimeConfig": {"ips": [7]}, "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| matches!(e, ConfigError::WrongType { .. }),
        ),
        (
            json!({"name": "n", "runtimeConfig": 3, "ipam": {"subnet": "198.18.128.0/24"}}),
            |e| matches!(e, ConfigError::WrongType { .. }),
        ),
    ];
    for (index, (value, check)) in cases.into_iter().enumerate() {
        let error = err(value.clone());
        assert!(check(&error), "case {index}: {value} gave {error:?}");
        assert_eq!(error.cni_code(), 7, "case {index}: {error}");
        assert!(!error.to_string().is_empty());
    }
}

// Go assigns every key matching a field in turn: the last spelling wins, even when an earlier
// spelling is repeated after a different one.
#[test]
fn last_matching_key_wins_across_spellings() {
    let text = br#"{"cniVersion":"1.0.0","name":"n","ipam":{"Subnet":"198.18.240.0/24","subnet":"198.19.0.0/24","Subnet":"198.19.16.0/24"}}"#;
    let config = HostLocalConfig::parse(text, None).unwrap();
    assert_eq!(
        config.range_sets[0].ranges()[0].subnet.to_string(),
        "198.19.16.0/24"
    );
}

/// A `ranges` config with `extra` spliced into the top level, `ipam`, a range and a route.
fn spliced(top: &str, ipam: &str, range: &str, route: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","name":"n"{top},"ipam":{{"type":"host-local"{ipam},"ranges":[[{{"subnet":"198.18.144.0/24"{range}}}]],"routes":[{{"dst":"0.0.0.0/0"{route}}}]}}}}"#
    )
}

// Unknown keys are only checked for syntax, wherever they are (Go skips them).
#[test]
fn unknown_keys_with_huge_numbers_or_deep_nesting_are_ignored() {
    let deep = format!("{}{}", "[".repeat(9_000), "]".repeat(9_000));
    for value in ["1e400", "-1e400", "123456789012345678901234567890", &deep] {
        let member = format!(r#","junk":{value}"#);
        for (place, text) in [
            ("top", spliced(&member, "", "", "")),
            ("ipam", spliced("", &member, "", "")),
            ("range", spliced("", "", &member, "")),
            ("route", spliced("", "", "", &member)),
            (
                "runtimeConfig",
                spliced(
                    &format!(r#","runtimeConfig":{{"junk":{value}}}"#),
                    "",
                    "",
                    "",
                ),
            ),
            (
                "args",
                spliced(
                    &format!(r#","args":{{"cni":{{"junk":{value}}}}}"#),
                    "",
                    "",
                    "",
                ),
            ),
        ] {
            let config = HostLocalConfig::parse(text.as_bytes(), None)
                .unwrap_or_else(|e| panic!("{place} {}: {e}", &value[..value.len().min(8)]));
            assert_eq!(config.routes.len(), 1);
            let config = cni_ipam::StaticConfig::parse(text.as_bytes(), None, None)
                .unwrap_or_else(|e| panic!("static {place}: {e}"));
            assert_eq!(config.routes.len(), 1);
        }
    }
}

// Go's scanner limit: 10000 levels, counting the outer object.
#[test]
fn nesting_deeper_than_go_allows_is_a_decoding_error() {
    let deep = |n: usize| format!(r#","junk":{}{}"#, "[".repeat(n), "]".repeat(n));
    HostLocalConfig::parse(spliced(&deep(9_999), "", "", "").as_bytes(), None).unwrap();
    for text in [
        spliced(&deep(10_000), "", "", ""),
        spliced("", &deep(9_999), "", ""),
    ] {
        let error = HostLocalConfig::parse(text.as_bytes(), None).unwrap_err();
        assert!(matches!(error, ConfigError::Json(_)), "{error}");
        assert_eq!(error.cni_code(), 6);
        let error = cni_ipam::StaticConfig::parse(text.as_bytes(), None, None).unwrap_err();
        assert_eq!(error.cni_code(), 6);
    }
}

// Every known key is type-checked, used or not: the legacy range fields with `ranges` set too.
#[test]
fn known_keys_of_the_wrong_type_are_refused_even_when_unused() {
    for member in [
        r#","rangeStart":5"#,
        r#","rangeEnd":[]"#,
        r#","gateway":true"#,
        r#","subnet":{}"#,
        r#","dataDir":1"#,
        r#","resolvConf":false"#,
    ] {
        let error =
            HostLocalConfig::parse(spliced("", member, "", "").as_bytes(), None).expect_err(member);
        assert!(
            matches!(error, ConfigError::WrongType { .. }),
            "{member}: {error}"
        );
        assert_eq!(error.cni_code(), 7);
    }
    // A string that is no address is refused too, as Go's net.IP decoding refuses it.
    let error =
        HostLocalConfig::parse(spliced("", r#","rangeStart":"x""#, "", "").as_bytes(), None)
            .unwrap_err();
    assert!(matches!(error, ConfigError::InvalidIp { .. }), "{error}");
}

#[test]
fn malformed_json_is_a_decoding_error() {
    let error = HostLocalConfig::parse(b"{\"name\": ", None).unwrap_err();
    assert!(matches!(error, ConfigError::Json(_)));
    assert_eq!(error.cni_code(), 6);
}

#[test]
fn invalid_cni_args_ip() {
    let value = with_ipam(json!({"subnet": "198.18.128.0/24"}));
    let error =
        HostLocalConfig::parse(value.to_string().as_bytes(), Some("198.18.128.x")).unwrap_err();
    assert!(matches!(error, ConfigError::InvalidRequestedIp { .. }));
}

#[test]
fn go_error_messages_are_kept_where_go_has_them() {
    let e = err(with_ipam(json!({"subnet": "198.18.128.0/32"})));
    assert_eq!(
        e.to_string(),
        "invalid range set 0: Network 198.18.128.0/32 too small to allocate from"
    );
    let e = err(with_ipam(json!({"subnet": "198.18.128.1/24"})));
    assert_eq!(
        e.to_string(),
        "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 198.18.128.0"
    );
    let e = err(with_ipam(json!({"type": "host-local"})));
    assert_eq!(e.to_string(), "no IP ranges specified");
}

/// Requested-IP problems are found at ADD time, so that DEL with the same inputs still works.
#[test]
fn requested_ip_errors_surface_at_add() {
    let dir = tempfile::tempdir().unwrap();
    let base = json!({"cniVersion": "1.0.0", "name": "n", "ipam": {
        "dataDir": dir.path(),
        "ranges": [[{"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.10", "rangeEnd": "198.18.128.255"}],
                   [{"subnet": "fd00::/120"}]]}});
    let cases: Vec<(Vec<&str>, Expect)> = vec![
        (vec!["198.18.128.5"], |e| {
            matches!(e, ConfigError::RequestedIpNotInRange { .. })
        }),
        (vec!["198.19.16.5"], |e| {
            matches!(e, ConfigError::RequestedIpNotInRange { .. })
        }),
        (vec!["198.18.128.20", "198.18.128.21"], |e| {
            matches!(e, ConfigError::RequestedIpsShareRangeSet { set: 0, .. })
        }),
        (vec!["fd00::1"], |e| {
            matches!(e, ConfigError::RequestedIpIsGateway { .. })
        }),
        (vec!["198.18.128.255"], |e| {
            matches!(e, ConfigError::RequestedIpReserved { .. })
        }),
    ];
    for (requested, check) in cases {
        let mut value = base.clone();
        value["runtimeConfig"] = json!({"ips": requested});
        let config = parse(value).unwrap();
        let ipam = HostLocal::new(&config).unwrap();
        let error = ipam
            .allocate("ctr", "eth0", &config.requested_ips)
            .unwrap_err();
        match &error {
            IpamError::Config(inner) => assert!(check(inner), "{requested:?}: {inner:?}"),
            other => panic!("{requested:?}: unexpected {other:?}"),
        }
        assert_eq!(error.cni_code(), 7);
        ipam.release("ctr", "eth0").unwrap();
    }
}

mod never_panics {
    use cni_ipam::{HostLocalConfig, StaticConfig};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// JSON values built from the keys the parsers look at, with values of every type.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            prop_oneof![
                Just("198.18.128.0/24".to_string()),
                Just("fd00::/64".to_string()),
                Just("198.18.128.5".to_string()),
                Just(String::new()),
                "[0-9a-f:./]{0,20}",
            ]
            .prop_map(Value::from),
        ];
        let keys = prop_oneof![
            Just("subnet"),
            Just("rangeStart"),
            Just("rangeEnd"),
            Just("gateway"),
            Just("ranges"),
            Just("routes"),
            Just("dst"),
            Just("gw"),
            Just("mtu"),
            Just("ips"),
            Just("ipRanges"),
            Just("dataDir"),
            Just("resolvConf"),
            Just("addresses"),
            Just("address"),
            Just("dns"),
            Just("cni"),
            Just("table"),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((keys.clone(), inner), 0..5).prop_map(|pairs| {
                    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn parsers_return_errors_instead_of_panicking(
            ipam in value(), runtime in value(), args in value(), bytes in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            let doc = json!({"cniVersion": "1.0.0", "name": "n", "ipam": ipam,
                             "runtimeConfig": runtime, "args": args});
            let text = doc.to_string();
            let _ = HostLocalConfig::parse(text.as_bytes(), Some("198.18.128.9"));
            let _ = StaticConfig::parse(text.as_bytes(), Some("198.18.128.9/24"), Some("198.18.128.1"));
            let _ = HostLocalConfig::parse(&bytes, None);
            let _ = StaticConfig::parse(&bytes, None, None);
        }
    }
}
