//! The real `rcni-plugins` binary run as `static`, and compared with the Go static
//! plugin. Nothing is stored and no namespace is involved.

mod common;
mod ipam;

use cni_testkit::{assert_cni_error, assert_silent_success};
use cni_testkit::{PluginCall, PluginOutput};
use ipam::{go_plugin, run, Plugins};
use serde_json::{json, Value};

fn conf_with(version: &str, mut ipam: Value, top: Value) -> String {
    ipam["type"] = json!("static");
    let mut conf =
        json!({"cniVersion": version, "name": "st-net", "type": "macvlan", "ipam": ipam});
    if let Value::Object(extra) = top {
        conf.as_object_mut().unwrap().extend(extra);
    }
    conf.to_string()
}

fn conf(version: &str, ipam: Value) -> String {
    conf_with(version, ipam, json!({}))
}

fn full_ipam() -> Value {
    json!({
        "addresses": [
            {"address": "198.18.5.5/24", "gateway": "198.18.5.1"},
            {"address": "2001:2:0:5::5/64"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "198.18.5.1"},
            {"dst": "198.19.0.0/16", "mtu": 1400, "table": 10}
        ],
        "dns": {"nameservers": ["198.18.5.53"], "domain": "example.org",
                "search": ["example.org"], "options": ["ndots:3"]}
    })
}

fn call(plugins: &Plugins, command: &str, stdin: &str) -> PluginCall {
    plugins.call(command, "c1", "eth0", stdin)
}

fn run_static(plugins: &Plugins, call: &PluginCall) -> PluginOutput {
    run(&plugins.plugin("static"), call)
}

#[track_caller]
fn add(plugins: &Plugins, call: &PluginCall) -> Value {
    let out = run_static(plugins, call);
    out.assert_success();
    out.json().unwrap()
}

// Addresses (prefix and host bits kept), routes and dns, in each version's layout.
#[test]
fn add_returns_the_config() {
    let p = Plugins::new();
    let r = add(&p, &call(&p, "ADD", &conf("1.1.0", full_ipam())));
    assert_eq!(
        r["ips"],
        json!([
            {"address": "198.18.5.5/24", "gateway": "198.18.5.1"},
            {"address": "2001:2:0:5::5/64"}
        ])
    );
    assert_eq!(
        r["routes"],
        json!([
            {"dst": "0.0.0.0/0", "gw": "198.18.5.1"},
            {"dst": "198.19.0.0/16", "mtu": 1400, "table": 10}
        ])
    );
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["198.18.5.53"], "domain": "example.org",
               "search": ["example.org"], "options": ["ndots:3"]})
    );
    let r = add(&p, &call(&p, "ADD", &conf("1.0.0", full_ipam())));
    assert_eq!(r["routes"][1], json!({"dst": "198.19.0.0/16"}));
    let r = add(&p, &call(&p, "ADD", &conf("0.4.0", full_ipam())));
    assert_eq!(r["ips"][0]["version"], "4");
    assert_eq!(r["ips"][1]["version"], "6");
    assert!(r["ips"][0].get("interface").is_none());
    let r = add(&p, &call(&p, "ADD", &conf("0.2.0", full_ipam())));
    assert_eq!(r["ip4"]["ip"], "198.18.5.5/24");
    assert_eq!(r["ip4"]["gateway"], "198.18.5.1");
    assert_eq!(r["ip6"]["ip"], "2001:2:0:5::5/64");
    // No addresses: an empty list, not an error.
    let r = add(&p, &call(&p, "ADD", &conf("1.0.0", json!({}))));
    assert!(r["ips"].as_array().is_none_or(|a| a.is_empty()), "{r}");
}

// CNI_ARGS IP appends, GATEWAY fills matching subnets, args.cni.ips replaces,
// runtimeConfig.ips replaces again (gateways dropped), in Go's order.
#[test]
fn overrides_in_go_order() {
    let p = Plugins::new();
    let base = json!({"addresses": [{"address": "198.18.5.5/24"}]});
    let c = conf("1.0.0", base.clone());
    let r = add(
        &p,
        &call(&p, "ADD", &c)
            .args("IP=198.18.6.6/24, 2001:2:0:6::6/64;GATEWAY=198.18.6.1,198.18.5.1"),
    );
    assert_eq!(
        r["ips"],
        json!([
            {"address": "198.18.5.5/24", "gateway": "198.18.5.1"},
            {"address": "198.18.6.6/24", "gateway": "198.18.6.1"},
            {"address": "2001:2:0:6::6/64"}
        ])
    );
    let c = conf_with(
        "1.0.0",
        base.clone(),
        json!({"args": {"cni": {"ips": ["198.18.7.7/16"]}}}),
    );
    let r = add(
        &p,
        &call(&p, "ADD", &c).args("IP=198.18.6.6/24;GATEWAY=198.18.6.1"),
    );
    assert_eq!(r["ips"], json!([{"address": "198.18.7.7/16"}]));
    let c = conf_with(
        "1.0.0",
        base,
        json!({"args": {"cni": {"ips": ["198.18.7.7/16"]}},
               "RuntimeConfig": {"ips": ["198.18.8.8/24", "2001:2:0:8::8/64"]}}),
    );
    let r = add(
        &p,
        &call(&p, "ADD", &c).args("IgnoreUnknown=1;K8S_POD_NAME=x"),
    );
    assert_eq!(
        r["ips"],
        json!([{"address": "198.18.8.8/24"}, {"address": "2001:2:0:8::8/64"}])
    );
}

// Every error path, with its code.
#[test]
fn errors() {
    let p = Plugins::new();
    let ok = conf("1.0.0", full_ipam());
    let cases: Vec<(PluginCall, u64, &str)> = vec![
        (
            call(&p, "ADD", &ok).args("ip=198.18.6.6/24"),
            4,
            "unknown args",
        ),
        (call(&p, "ADD", &ok).args("FOO"), 4, "invalid pair"),
        (
            call(&p, "ADD", &ok).args("IP=198.18.6.6"),
            7,
            "expected an address in CIDR notation",
        ),
        (
            call(&p, "ADD", &ok).args("GATEWAY=198.18.6.x"),
            7,
            "invalid gateway address",
        ),
        (
            call(
                &p,
                "ADD",
                &conf("1.0.0", json!({"addresses": [{"address": "198.18.5.5"}]})),
            ),
            7,
            "expected an address in CIDR notation",
        ),
        (
            call(
                &p,
                "ADD",
                &conf(
                    "1.0.0",
                    json!({"addresses": [{"address": "198.18.5.5/24", "gateway": "bad"}]}),
                ),
            ),
            7,
            "invalid IP address",
        ),
        (
            call(
                &p,
                "ADD",
                &conf_with(
                    "1.0.0",
                    json!({}),
                    json!({"runtimeConfig": {"ips": ["198.18.8.8"]}}),
                ),
            ),
            7,
            "expected an address in CIDR notation",
        ),
        (
            call(
                &p,
                "ADD",
                &conf(
                    "0.2.0",
                    json!({"addresses": [{"address": "198.18.5.5/24"}, {"address": "198.18.6.6/24"}]}),
                ),
            ),
            7,
            "does not support more than 1 address per family",
        ),
        (
            call(
                &p,
                "ADD",
                &conf("1.0.0", json!({"routes": [{"dst": "bogus"}]})),
            ),
            7,
            "invalid CIDR address",
        ),
        (
            call(
                &p,
                "ADD",
                &conf("1.0.0", json!({"dns": {"nameservers": "198.18.0.1"}})),
            ),
            7,
            "expected a list",
        ),
        (
            call(
                &p,
                "ADD",
                &json!({"cniVersion": "1.0.0", "name": "n", "type": "x"}).to_string(),
            ),
            7,
            "IPAM config missing 'ipam' key",
        ),
        (call(&p, "ADD", "{not json"), 6, ""),
        (call(&p, "ADD", &conf("0.9.0", full_ipam())), 1, ""),
        (p.call("ADD", "../c1", "eth0", &ok), 4, ""),
        (p.call("ADD", "c1", "eth/0", &ok), 4, ""),
    ];
    for (c, code, msg) in cases {
        let out = run_static(&p, &c);
        let e = assert_cni_error(&out, code);
        assert!(e["msg"].as_str().unwrap().contains(msg), "{c:?}: {e}");
    }
}

// DEL is a no-op (twice, without netns); STATUS and GC at 1.1.0 do nothing.
#[test]
fn del_status_gc_succeed() {
    let p = Plugins::new();
    let c = conf("1.1.0", full_ipam());
    for _ in 0..2 {
        assert_silent_success(&run_static(&p, &call(&p, "DEL", &c)));
    }
    let no_netns = PluginCall::new("DEL")
        .container_id("c1")
        .ifname("eth0")
        .path(p.dir())
        .stdin(&c);
    assert_silent_success(&run_static(&p, &no_netns));
    assert_silent_success(&run_static(&p, &p.bare_call("STATUS", &c)));
    let mut gc: Value = serde_json::from_str(&c).unwrap();
    gc["cni.dev/valid-attachments"] = json!([]);
    assert_silent_success(&run_static(&p, &p.bare_call("GC", &gc.to_string())));
    assert_cni_error(
        &run_static(&p, &p.bare_call("STATUS", &conf("1.0.0", json!({})))),
        1,
    );
}

// Go's weak CHECK: a configured address found with another gateway fails, a missing
// one is not detected, no prevResult is an error.
#[test]
fn check() {
    let p = Plugins::new();
    let with_prev = |prev: Value| {
        let mut v: Value = serde_json::from_str(&conf("1.0.0", full_ipam())).unwrap();
        v["prevResult"] = prev;
        v.to_string()
    };
    let result = add(&p, &call(&p, "ADD", &conf("1.0.0", full_ipam())));
    assert_silent_success(&run_static(
        &p,
        &call(&p, "CHECK", &with_prev(result.clone())),
    ));
    let mut wrong_gw = result.clone();
    wrong_gw["ips"][0]["gateway"] = json!("198.18.5.254");
    let out = run_static(&p, &call(&p, "CHECK", &with_prev(wrong_gw)));
    assert_eq!(
        assert_cni_error(&out, 999)["msg"],
        "static: Failed to match addr 198.18.5.5"
    );
    let mut missing = result;
    missing["ips"].as_array_mut().unwrap().remove(0);
    assert_silent_success(&run_static(&p, &call(&p, "CHECK", &with_prev(missing))));
    let out = run_static(&p, &call(&p, "CHECK", &conf("1.0.0", full_ipam())));
    assert_eq!(
        assert_cni_error(&out, 7)["msg"],
        "Required prevResult missing"
    );
    // CHECK reads CNI_ARGS like ADD.
    let out = run_static(
        &p,
        &call(&p, "CHECK", &conf("1.0.0", full_ipam())).args("X=1"),
    );
    assert_cni_error(&out, 4);
}

// Interop: the same requests through the Go static plugin give the same ips and routes.
#[test]
fn interop_results_match_go() {
    let Some(go) = go_plugin("static") else {
        return;
    };
    let p = Plugins::new();
    let requests = [
        (conf("1.0.0", full_ipam()), ""),
        (
            conf("0.4.0", full_ipam()),
            "IP=198.18.6.6/24,2001:2:0:6::6/64;GATEWAY=198.18.6.1",
        ),
        (conf("0.2.0", full_ipam()), ""),
        (
            conf_with(
                "1.0.0",
                full_ipam(),
                json!({"runtimeConfig": {"ips": ["198.18.8.8/24"]}}),
            ),
            "",
        ),
    ];
    for (stdin, args) in requests {
        let c = call(&p, "ADD", &stdin).args(args);
        let ours = add(&p, &c);
        let out = run(&go, &c);
        out.assert_success();
        let theirs = out.json().unwrap();
        for key in ["ips", "ip4", "ip6", "routes", "cniVersion"] {
            assert_eq!(ours.get(key), theirs.get(key), "{key} for {stdin} {args}");
        }
    }
}
