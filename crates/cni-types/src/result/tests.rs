//! Golden conversion vectors across all result layouts (Go's `pkg/types/internal/convert.go`).

use super::*;
use serde_json::json;

fn full_v110() -> Value {
    json!({
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/run/netns/blue", "mtu": 1400,
             "socketPath": "/run/sock", "pciID": "0000:00:01.0"}
        ],
        "ips": [
            {"interface": 1, "address": "198.18.1.5/16", "gateway": "198.18.1.1"},
            {"interface": 1, "address": "2001:2::5/64", "gateway": "2001:2::1"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "table": 100, "priority": 10, "mtu": 1300, "advmss": 1200, "scope": 0},
            {"dst": "::/0", "gw": "2001:2::1"},
            {"dst": "198.19.0.0/16", "gw": "198.18.1.254"}
        ],
        "dns": {"nameservers": ["198.18.1.1"], "search": ["svc.local"]}
    })
}

fn parse(v: &Value) -> CniResult {
    CniResult::parse(v, SpecVersion::V1_1_0).unwrap()
}

// 1.1.0 round trip keeps every field, explicit table/scope 0 included.
#[test]
fn v110_round_trip_is_identity() {
    let v = full_v110();
    assert_eq!(parse(&v).to_value(SpecVersion::V1_1_0).unwrap(), v);
}

// 1.1.0 -> 0.4.0 adds versions, drops 1.1-only fields.
#[test]
fn v110_to_v040() {
    let out = parse(&full_v110()).to_value(SpecVersion::V0_4_0).unwrap();
    assert_eq!(
        out,
        json!({
            "cniVersion": "0.4.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/run/netns/blue"}
            ],
            "ips": [
                {"version": "4", "interface": 1, "address": "198.18.1.5/16", "gateway": "198.18.1.1"},
                {"version": "6", "interface": 1, "address": "2001:2::5/64", "gateway": "2001:2::1"}
            ],
            "routes": [
                {"dst": "0.0.0.0/0"},
                {"dst": "::/0", "gw": "2001:2::1"},
                {"dst": "198.19.0.0/16", "gw": "198.18.1.254"}
            ],
            "dns": {"nameservers": ["198.18.1.1"], "search": ["svc.local"]}
        })
    );
}

// 1.1.0 -> 1.0.0 changes the version (and, unlike Go, drops 1.1-only fields).
#[test]
fn v110_to_v100() {
    let out = parse(&full_v110()).to_value(SpecVersion::V1_0_0).unwrap();
    assert_eq!(out["cniVersion"], "1.0.0");
    assert!(out["ips"][0].get("version").is_none());
    assert!(out["interfaces"][1].get("mtu").is_none());
    assert_eq!(out["routes"][0], json!({"dst": "0.0.0.0/0"}));
}

// Down to 0.2.0 splits by family, keeps dst/gw only, drops interfaces.
#[test]
fn v110_to_v020() {
    let out = parse(&full_v110()).to_value(SpecVersion::V0_2_0).unwrap();
    assert_eq!(
        out,
        json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "198.18.1.5/16", "gateway": "198.18.1.1",
                    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "198.19.0.0/16", "gw": "198.18.1.254"}]},
            "ip6": {"ip": "2001:2::5/64", "gateway": "2001:2::1", "routes": [{"dst": "::/0", "gw": "2001:2::1"}]},
            "dns": {"nameservers": ["198.18.1.1"], "search": ["svc.local"]}
        })
    );
}

// No IPs cannot become 0.2.0.
#[test]
fn no_ips_to_v020_fails() {
    let r = CniResult::new(SpecVersion::V1_1_0);
    assert!(matches!(
        r.to_value(SpecVersion::V0_1_0),
        Err(ResultError::NoAddressesForLegacy)
    ));
}

// 0.2.0 -> 0.4.0 / 1.0.0.
#[test]
fn v020_up() {
    let v = json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "198.18.0.2/24", "gateway": "198.18.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
        "dns": {}
    });
    let r = CniResult::parse(&v, SpecVersion::V0_2_0).unwrap();
    assert_eq!(r.cni_version, SpecVersion::V0_2_0);
    assert_eq!(
        r.to_value(SpecVersion::V0_3_1).unwrap(),
        json!({
            "cniVersion": "0.3.1",
            "ips": [{"version": "4", "address": "198.18.0.2/24", "gateway": "198.18.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        })
    );
    assert_eq!(
        r.to_value(SpecVersion::V1_0_0).unwrap(),
        json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "198.18.0.2/24", "gateway": "198.18.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]
        })
    );
    // and back down again is stable
    assert_eq!(r.to_value(SpecVersion::V0_2_0).unwrap(), v);
}

// 0.4.0 with version keys parses into the model; rendering 1.0.0 drops them.
#[test]
fn legacy_040_to_100() {
    let v = json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "198.18.2.3/24"}]});
    let r = CniResult::parse(&v, SpecVersion::V1_0_0).unwrap();
    assert_eq!(
        r.to_value(SpecVersion::V1_0_0).unwrap(),
        json!({"cniVersion": "1.0.0", "ips": [{"address": "198.18.2.3/24"}]})
    );
}

// A missing version takes the fallback; unknown versions fail.
#[test]
fn version_handling() {
    let r = CniResult::parse(
        &json!({"ips": [{"address": "198.18.0.1/8"}]}),
        SpecVersion::V1_0_0,
    )
    .unwrap();
    assert_eq!(r.cni_version, SpecVersion::V1_0_0);
    let err = CniResult::parse(&json!({"cniVersion": "7.0.0"}), SpecVersion::V1_0_0).unwrap_err();
    assert_eq!(err.to_string(), "unsupported CNI result version \"7.0.0\"");
    assert!(CniResult::parse(&json!([1]), SpecVersion::V1_0_0).is_err());
    assert!(CniResult::parse(
        &json!({"cniVersion": "1.0.0", "ips": [{"address": "nope"}]}),
        SpecVersion::V1_0_0
    )
    .is_err());
    assert_eq!(
        CniResult::parse(&Value::Null, SpecVersion::V1_1_0).unwrap(),
        CniResult::new(SpecVersion::V1_1_0)
    );
}

// Interface index -1 and "" gateways are tolerated.
#[test]
fn odd_but_real_inputs() {
    let v = json!({"cniVersion": "1.0.0", "ips": [{"interface": -1, "address": "198.18.0.2/24", "gateway": ""}],
                   "dns": null, "routes": null, "interfaces": null});
    let r = CniResult::parse(&v, SpecVersion::V1_0_0).unwrap();
    assert_eq!(r.ips[0].interface, Some(-1));
    assert_eq!(r.ips[0].gateway, None);
}

// 1.x drops empty dns, 0.x always writes it.
#[test]
fn empty_dns_rules() {
    let mut r = CniResult::new(SpecVersion::V1_1_0);
    r.ips.push(IpConfig {
        interface: None,
        address: "198.18.0.2/24".parse().unwrap(),
        gateway: None,
    });
    assert!(r
        .to_value(SpecVersion::V1_1_0)
        .unwrap()
        .get("dns")
        .is_none());
    assert_eq!(r.to_value(SpecVersion::V0_4_0).unwrap()["dns"], json!({}));
    assert_eq!(r.to_value(SpecVersion::V0_1_0).unwrap()["dns"], json!({}));
}

#[test]
fn pretty_uses_four_spaces() {
    let r = CniResult::new(SpecVersion::V1_1_0);
    assert_eq!(
        r.to_json_pretty(SpecVersion::V1_1_0).unwrap(),
        "{\n    \"cniVersion\": \"1.1.0\"\n}"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_ip() -> impl Strategy<Value = IpConfig> {
        (
            any::<bool>(),
            any::<[u8; 16]>(),
            0u8..=32,
            proptest::option::of(0i64..4),
        )
            .prop_map(|(v4, bytes, p, idx)| {
                let address = if v4 {
                    IpNet::new(IpAddr::from([bytes[0], bytes[1], bytes[2], bytes[3]]), p).unwrap()
                } else {
                    IpNet::new(IpAddr::from(bytes), p * 4).unwrap()
                };
                IpConfig {
                    interface: idx,
                    address,
                    gateway: None,
                }
            })
    }

    proptest! {
        // Any result survives a trip through every layout of the 0.3+ families unchanged.
        #[test]
        fn v1_and_v04_round_trip(ips in proptest::collection::vec(arb_ip(), 0..5)) {
            let mut r = CniResult::new(SpecVersion::V1_1_0);
            r.ips = ips;
            for v in [SpecVersion::V0_3_0, SpecVersion::V0_3_1, SpecVersion::V0_4_0, SpecVersion::V1_0_0, SpecVersion::V1_1_0] {
                let back = CniResult::parse(&r.to_value(v).unwrap(), SpecVersion::V1_1_0).unwrap();
                prop_assert_eq!(&back.ips, &r.ips);
                prop_assert_eq!(back.cni_version, v);
            }
        }
    }
}
