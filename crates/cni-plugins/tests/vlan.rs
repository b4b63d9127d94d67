//! Integration tests of rcni's vlan plugin with the real `rcni-plugins` binary in cni-testkit
//! sandboxes. Where the kernel lacks 802.1Q (CONFIG_VLAN_8021Q) the kernel tests print a
//! SKIPPED line and instead check that ADD fails cleanly, naming the missing support, with
//! nothing left behind. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

const NET: &str = "vlnet";
const SUBNET: &str = "198.18.53.0/24";
const MASTER: &str = "master0";

fn conf(env: &Env, extra: Value) -> Value {
    env.conf(
        json!({
            "cniVersion": "1.0.0", "name": NET, "type": "vlan", "master": MASTER, "vlanId": 42
        }),
        SUBNET,
        &extra,
    )
}

fn supported() -> bool {
    Env::kernel_supports(
        &["link", "probe0", "type", "vlan", "id", "5"],
        "802.1Q VLAN support (CONFIG_VLAN_8021Q)",
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
    let c = conf(
        &env,
        json!({"mtu": 1400, "dns": {"nameservers": ["198.18.53.53"]}}),
    );
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["interfaces"][0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 0);
    assert_eq!(r["dns"]["nameservers"], json!(["198.18.53.53"]));
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "vlan");
    assert_eq!(l["linkinfo"]["info_data"]["id"], 42);
    assert_eq!(l["mtu"], 1400);
    assert_eq!(l["address"], r["interfaces"][0]["mac"]);
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.53.2/24"]);
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    let wrong = with_prev(&conf(&env, json!({"mtu": 1400, "vlanId": 43})), &r);
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &wrong), 999);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    // The master gone: DEL still succeeds.
    env.ip_host(&["link", "del", MASTER]);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn failures_leave_nothing_behind() {
    let env = env_with_master();
    let pod = env.pod();
    let conf = |extra| conf(&env, extra);
    let kind = ("vlan", NET);
    assert_failed_adds_leave_nothing(&env, &pod, kind, supported(), Some("master"), conf);
}

#[test]
fn bad_inputs_have_the_right_codes() {
    let env = env_with_master();
    let pod = env.pod();
    for extra in [
        json!({"master": null}),
        json!({"vlanId": 4095}),
        json!({"vlanId": -1}),
        json!({"mtu": 9000}),
        json!({"ipam": null}),
    ] {
        let out = env.cmd("ADD", &pod, "c1", &conf(&env, extra.clone()));
        assert_cni_error(&out, 7);
    }
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    // DEL with the netns gone succeeds.
    env.sb.remove_container(&pod).unwrap();
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &conf(&env, json!({}))));
}
