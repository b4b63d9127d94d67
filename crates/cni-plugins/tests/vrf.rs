//! Integration tests of rcni's vrf plugin in cni-testkit sandboxes, chained after a veth the
//! test makes in the pod. Where the kernel lacks VRF (CONFIG_NET_VRF, as on this project's
//! CI machine) the kernel tests print a SKIPPED line and instead check that ADD fails
//! cleanly, naming the missing support, with nothing left behind. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

fn supported() -> bool {
    Env::kernel_supports(&["type", "vrf", "table", "10"], "VRF (CONFIG_NET_VRF)")
}

/// A pod with `eth0` (a veth, addressed, with a route) and the prevResult naming it.
fn pod_with_eth0(env: &Env) -> (cni_testkit::Netns, Value) {
    let pod = env.pod();
    env.ip_in(
        &pod.name,
        &["link", "add", "eth0", "type", "veth", "peer", "name", "p0"],
    );
    env.ip_in(&pod.name, &["addr", "add", "198.18.17.2/24", "dev", "eth0"]);
    env.ip_in(&pod.name, &["link", "set", "eth0", "up"]);
    env.ip_in(&pod.name, &["link", "set", "p0", "up"]);
    env.ip_in(
        &pod.name,
        &["route", "add", "198.18.18.0/24", "via", "198.18.17.1"],
    );
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path}],
        "ips": [{"address": "198.18.17.2/24", "interface": 0}]});
    (pod, prev)
}

fn conf(prev: &Value, extra: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "vrfnet", "type": "vrf",
        "vrfname": "red", "prevResult": prev});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

#[test]
fn enslaves_keeps_routes_and_deletes_the_last_vrf() {
    if !supported() {
        return;
    }
    let env = Env::new();
    let (pod, prev) = pod_with_eth0(&env);
    let c = conf(&prev, json!({"table": 1001}));
    env.add(&pod, "c1", &c);
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["master"], "red", "{l}");
    assert_eq!(
        link(&pod.name, "red").unwrap()["linkinfo"]["info_data"]["table"],
        1001
    );
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.17.2/24"]);
    let out = env
        .sb
        .exec_in(&pod.name, ["ip", "route", "show", "table", "1001"])
        .unwrap();
    assert!(
        out.stdout.contains("198.18.18.0/24 via 198.18.17.1"),
        "{out}"
    );
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &c));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link(&pod.name, "red").is_none());
    assert!(link(&pod.name, "eth0").unwrap().get("master").is_none());
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn without_vrf_support_add_fails_cleanly_naming_it() {
    let env = Env::new();
    let (pod, prev) = pod_with_eth0(&env);
    if supported() {
        for step in ["vrf", "enslaved", "done"] {
            let call = env
                .call("ADD", &pod, "c1", &conf(&prev, json!({})))
                .env("RCNI_TEST_FAIL_AT", format!("vrf:{step}"));
            assert_cni_error(&env.run("vrf", &call), 999);
            assert!(link(&pod.name, "red").is_none(), "{step}");
            assert!(link(&pod.name, "eth0").unwrap().get("master").is_none());
        }
        return;
    }
    let e = assert_cni_error(&env.cmd("ADD", &pod, "c1", &conf(&prev, json!({}))), 999);
    assert!(e["msg"].as_str().unwrap().contains("CONFIG_NET_VRF"), "{e}");
    assert!(link(&pod.name, "red").is_none());
    assert!(link(&pod.name, "eth0").unwrap().get("master").is_none());
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.17.2/24"]);
    // DEL with no VRF, and bad configs.
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &conf(&prev, json!({}))));
    assert_cni_error(
        &env.cmd("ADD", &pod, "c1", &conf(&prev, json!({"vrfname": ""}))),
        7,
    );
}
