//! Integration tests of rcni's ipvlan plugin with the real `rcni-plugins` binary in
//! cni-testkit sandboxes. Where the kernel lacks ipvlan (CONFIG_IPVLAN) the kernel tests
//! print a SKIPPED line and instead check that ADD fails cleanly, naming the missing
//! support, with nothing left behind. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

const NET: &str = "ipvnet";
const SUBNET: &str = "198.18.52.0/24";
const MASTER: &str = "master0";

fn conf(env: &Env, extra: Value) -> Value {
    env.conf(
        json!({
            "cniVersion": "1.0.0", "name": NET, "type": "ipvlan", "master": MASTER
        }),
        SUBNET,
        &extra,
    )
}

fn supported() -> bool {
    Env::kernel_supports(
        &["link", "probe0", "type", "ipvlan", "mode", "l2"],
        "the ipvlan module (CONFIG_IPVLAN)",
    )
}

fn env_with_master() -> Env {
    let env = Env::new();
    env.add_master(MASTER);
    env
}

#[test]
fn add_check_del() {
    if !supported() {
        return;
    }
    let env = env_with_master();
    let pod = env.pod();
    let c = conf(&env, json!({"mode": "l3", "mtu": 1400}));
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 0);
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "ipvlan");
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "l3");
    assert_eq!(l["mtu"], 1400);
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.52.2/24"]);
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    let wrong = with_prev(&conf(&env, json!({"mode": "l2"})), &r);
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &wrong), 999);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn chained_without_ipam_uses_prev_result() {
    if !supported() {
        return;
    }
    let env = env_with_master();
    let pod = env.pod();
    let prev = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": MASTER}],
        "ips": [{"address": "198.18.52.9/24", "interface": 0}]});
    let c = with_prev(&conf(&env, json!({"master": null, "ipam": null})), &prev);
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["ips"][0]["address"], "198.18.52.9/24");
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.52.9/24"]);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
}

#[test]
fn failures_leave_nothing_behind() {
    let env = env_with_master();
    let pod = env.pod();
    let conf = |extra| conf(&env, extra);
    let kind = ("ipvlan", NET);
    assert_failed_adds_leave_nothing(&env, &pod, kind, supported(), Some("master"), conf);
}

#[test]
fn bad_inputs_have_the_right_codes() {
    let env = env_with_master();
    let pod = env.pod();
    for extra in [
        json!({"mode": "bridge"}),
        json!({"mtu": -1}),
        json!({"ipam": null}),
        json!({"linkInContainer": 1}),
    ] {
        assert_cni_error(&env.cmd("ADD", &pod, "c1", &conf(&env, extra)), 7);
    }
    // Chained, but prevResult has two interfaces and no master is configured.
    let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                      "ips": [{"address": "198.18.52.9/24", "interface": 0}]});
    let c = with_prev(&conf(&env, json!({"master": null, "ipam": null})), &prev);
    assert_cni_error(&env.cmd("ADD", &pod, "c1", &c), 7);
    // DEL without a netns still succeeds and releases nothing it does not hold.
    let call = env
        .call("DEL", &pod, "c1", &conf(&env, json!({})))
        .netns("");
    assert_silent_success(&env.run("ipvlan", &call));
    assert!(link_names(&pod.name).is_empty());
}
