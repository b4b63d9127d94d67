//! Integration tests of rcni's sbr plugin, chained after a second attachment: a pod with a
//! bridge attachment (`eth0`, the default route) and a ptp attachment (`eth1`) that sbr
//! gives its own table. The kernel is read back with `ip -j rule` and `ip -j route`, and
//! traffic is sent from the second address. The differential test runs Debian's Go plugin
//! (`/usr/lib/cni/sbr`) on the same setup. Needs root.

mod sublink;

use cni_testkit::{Netns, PluginCall};
use serde_json::{json, Value};
use sublink::*;

const BR_SUBNET: &str = "198.18.15.0/24";
const PTP_SUBNET: &str = "198.18.16.0/24";
const PTP_ADDR: &str = "198.18.16.2";
const FAR: &str = "198.18.99.1";

/// The pod's two attachments; returns the ptp result (sbr's prevResult).
fn attach(env: &Env, pod: &Netns) -> Value {
    let br = json!({"cniVersion": "1.0.0", "name": "sbrbr", "type": "bridge",
        "bridge": "sbrbr0", "isDefaultGateway": true, "ipam": env.host_local(BR_SUBNET)});
    env.add(pod, "c1", &br);
    let ptp = json!({"cniVersion": "1.0.0", "name": "sbrptp", "type": "ptp",
        "ipam": env.host_local(PTP_SUBNET)});
    let out = env.run("ptp", &env.call("ADD", pod, "c1", &ptp).ifname("eth1"));
    out.assert_success();
    out.json().unwrap()
}

fn sbr_conf(prev: &Value, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "sbrptp", "type": "sbr", "prevResult": prev});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn sbr_call(env: &Env, command: &str, pod: &Netns, c: &Value) -> PluginCall {
    env.call(command, pod, "c1", c).ifname("eth1")
}

fn ip_json(env: &Env, ns: &str, args: &[&str]) -> Vec<Value> {
    let mut argv = vec!["ip", "-j"];
    argv.extend_from_slice(args);
    let out = env.sb.exec_in(ns, argv).unwrap();
    out.assert_success();
    serde_json::from_str(out.stdout.trim()).unwrap_or_default()
}

/// `(src, table)` of the rules that have a source.
fn source_rules(env: &Env, ns: &str) -> Vec<(String, String)> {
    ip_json(env, ns, &["rule"])
        .iter()
        .filter(|r| r.get("src").is_some() && r["src"] != "all")
        .map(|r| {
            (
                r["src"].as_str().unwrap().to_string(),
                r["table"].to_string().trim_matches('"').to_string(),
            )
        })
        .collect()
}

/// Source rules, table 100 and the main table of a pod.
type State = (
    Vec<(String, String)>,
    Vec<(String, String, String)>,
    Vec<(String, String, String)>,
);

/// `(dst, gateway, dev)` of a table's routes, sorted.
fn table(env: &Env, ns: &str, t: &str) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = ip_json(env, ns, &["route", "show", "table", t])
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (s("dst"), s("gateway"), s("dev"))
        })
        .collect();
    v.sort();
    v
}

fn tx_packets(env: &Env, ns: &str, dev: &str) -> u64 {
    ip_json(env, ns, &["-s", "link", "show", dev])[0]["stats64"]["tx"]["packets"]
        .as_u64()
        .unwrap()
}

#[test]
fn second_attachment_gets_its_table_and_rule_and_its_traffic() {
    let env = Env::new();
    let pod = env.pod();
    let prev = attach(&env, &pod);
    // Something beyond both gateways to send to: an address on the host.
    env.ip_host(&["link", "set", "lo", "up"]);
    env.ip_host(&["addr", "add", &format!("{FAR}/32"), "dev", "lo"]);

    let c = sbr_conf(&prev, json!({}));
    let out = env.run("sbr", &sbr_call(&env, "ADD", &pod, &c));
    out.assert_success();
    let r: Value = out.json().unwrap();
    assert_eq!(r["ips"], prev["ips"], "prevResult passed through");

    assert_eq!(
        source_rules(&env, &pod.name),
        [(PTP_ADDR.to_string(), "100".to_string())]
    );
    let t100 = table(&env, &pod.name, "100");
    assert!(
        t100.contains(&("default".into(), "198.18.16.1".into(), "eth1".into())),
        "{t100:?}"
    );
    assert!(t100.iter().all(|(_, _, dev)| dev == "eth1"), "{t100:?}");
    let main = table(&env, &pod.name, "main");
    assert!(
        main.iter().all(|(_, _, dev)| dev != "eth1"),
        "eth1 routes left main: {main:?}"
    );
    assert!(
        main.contains(&("default".into(), "198.18.15.1".into(), "eth0".into())),
        "{main:?}"
    );
    assert_silent_success(&env.run("sbr", &sbr_call(&env, "CHECK", &pod, &c)));

    // Traffic from the second address leaves through eth1, other traffic through eth0.
    let (eth0, eth1) = (
        tx_packets(&env, &pod.name, "eth0"),
        tx_packets(&env, &pod.name, "eth1"),
    );
    let send = format!(
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.bind(('{PTP_ADDR}', 0))\nfor _ in range(5): s.sendto(b'sbr', ('{FAR}', 9))\n"
    );
    env.sb
        .exec_in(&pod.name, ["python3", "-c", &send])
        .unwrap()
        .assert_success();
    let via = ip_json(&env, &pod.name, &["route", "get", FAR, "from", PTP_ADDR]);
    assert_eq!(via[0]["dev"], "eth1", "{via:?}");
    let via = ip_json(&env, &pod.name, &["route", "get", FAR]);
    assert_eq!(via[0]["dev"], "eth0", "{via:?}");
    assert!(tx_packets(&env, &pod.name, "eth1") >= eth1 + 5);
    assert!(tx_packets(&env, &pod.name, "eth0") < eth0 + 3);

    assert_silent_success(&env.run("sbr", &sbr_call(&env, "DEL", &pod, &c)));
    assert!(source_rules(&env, &pod.name).is_empty());
    assert!(table(&env, &pod.name, "100").is_empty());
    assert_cni_error(&env.run("sbr", &sbr_call(&env, "CHECK", &pod, &c)), 999);
    assert_silent_success(&env.run("sbr", &sbr_call(&env, "DEL", &pod, &c)));
}

#[test]
fn fixed_table_adds_rules_only_and_failures_roll_back() {
    let env = Env::new();
    let pod = env.pod();
    let prev = attach(&env, &pod);
    let main_before = table(&env, &pod.name, "main");
    for step in ["tables", "done"] {
        let call = sbr_call(&env, "ADD", &pod, &sbr_conf(&prev, json!({})))
            .env("RCNI_TEST_FAIL_AT", format!("sbr:{step}"));
        assert_cni_error(&env.run("sbr", &call), 999);
        assert!(source_rules(&env, &pod.name).is_empty(), "{step}");
        assert!(table(&env, &pod.name, "100").is_empty(), "{step}");
        assert_eq!(table(&env, &pod.name, "main"), main_before, "{step}");
    }
    let c = sbr_conf(&prev, json!({"table": 700}));
    env.run("sbr", &sbr_call(&env, "ADD", &pod, &c))
        .assert_success();
    assert_eq!(
        source_rules(&env, &pod.name),
        [(PTP_ADDR.to_string(), "700".to_string())]
    );
    assert_eq!(table(&env, &pod.name, "main"), main_before, "rules only");
    assert_silent_success(&env.run("sbr", &sbr_call(&env, "DEL", &pod, &c)));
    assert!(source_rules(&env, &pod.name).is_empty());
    for bad in [json!({"addSourceHints": true}), json!({"vrfname": "red"})] {
        assert_cni_error(
            &env.run("sbr", &sbr_call(&env, "ADD", &pod, &sbr_conf(&prev, bad))),
            7,
        );
    }
    // DEL without a netns, or after it vanished, is success.
    let c = sbr_conf(&prev, json!({}));
    env.sb.remove_container(&pod).unwrap();
    assert_silent_success(&env.run("sbr", &sbr_call(&env, "DEL", &pod, &c)));
}

#[test]
fn differential_against_the_go_plugin() {
    let Some(go_dir) = cni_testkit::go_plugins_dir() else {
        eprintln!("SKIPPED: Go reference plugins not installed in /usr/lib/cni");
        return;
    };
    let env = Env::new();
    let state = |pod: &Netns| {
        (
            source_rules(&env, &pod.name),
            table(&env, &pod.name, "100"),
            table(&env, &pod.name, "main"),
        )
    };
    let go_pod = env.pod();
    let prev = attach(&env, &go_pod);
    let c = sbr_conf(&prev, json!({}));
    let out = env
        .sb
        .run_plugin(
            go_dir.join("sbr"),
            &sbr_call(&env, "ADD", &go_pod, &c).path(&go_dir),
        )
        .unwrap();
    out.assert_success();
    let go_result: Value = out.json().unwrap();
    let go_state = state(&go_pod);

    let pod = env.pod();
    // Same addresses in the second pod: release the first pod's leases by its own DELs.
    let ours_prev = attach(&env, &pod);
    let ours = env.run(
        "sbr",
        &sbr_call(&env, "ADD", &pod, &sbr_conf(&ours_prev, json!({}))),
    );
    ours.assert_success();
    let ours: Value = ours.json().unwrap();
    let mut normalized = go_result.clone();
    if normalized["dns"] == json!({}) {
        normalized.as_object_mut().unwrap().remove("dns");
    }
    assert_eq!(
        ours.as_object().unwrap().keys().collect::<Vec<_>>(),
        normalized.as_object().unwrap().keys().collect::<Vec<_>>()
    );
    // Addresses differ (host-local hands out the next ones): compare with them masked.
    let mask = |s: State| {
        let m = |x: &str| {
            x.rsplit_once('.')
                .map_or(x.to_string(), |(a, _)| a.to_string())
        };
        (
            s.0.iter()
                .map(|(a, t)| (m(a), t.clone()))
                .collect::<Vec<_>>(),
            s.1.iter()
                .map(|(d, g, v)| (m(d), m(g), v.clone()))
                .collect::<Vec<_>>(),
            s.2.iter()
                .map(|(d, g, v)| (m(d), m(g), v.clone()))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(mask(state(&pod)), mask(go_state));
}
