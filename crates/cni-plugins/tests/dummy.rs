//! Integration tests of rcni's dummy plugin with the real `rcni-plugins` binary in
//! cni-testkit sandboxes. Where the kernel lacks dummy (CONFIG_DUMMY) the kernel tests print
//! a SKIPPED line and instead check that ADD fails cleanly, naming the missing support, with
//! nothing left behind. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

const NET: &str = "dmnet";
const SUBNET: &str = "198.18.54.0/24";

fn conf(env: &Env, extra: Value) -> Value {
    env.conf(
        json!({
            "cniVersion": "1.0.0", "name": NET, "type": "dummy"
        }),
        SUBNET,
        &extra,
    )
}

fn supported() -> bool {
    Env::kernel_supports(&["type", "dummy"], "the dummy module (CONFIG_DUMMY)")
}

#[test]
fn add_check_del() {
    if !supported() {
        return;
    }
    let env = Env::new();
    let pod = env.pod();
    let c = conf(&env, json!({}));
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 0);
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_kind"], "dummy");
    assert!(is_up(&pod.name, "eth0"));
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.54.2/24"]);
    // Nothing on the host.
    assert!(link_names(env.host()).is_empty());
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    env.ip_in(&pod.name, &["link", "set", "eth0", "down"]);
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)), 999);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn failures_leave_nothing_behind() {
    let env = Env::new();
    let pod = env.pod();
    let conf = |extra| conf(&env, extra);
    let kind = ("dummy", NET);
    if !assert_failed_adds_leave_nothing(&env, &pod, kind, supported(), None, conf) {
        return;
    }
    let bad_ipam =
        json!({"type": "host-local", "dataDir": env.data_dir, "ranges": [[{"subnet": "nope"}]]});
    assert!(!env
        .cmd("ADD", &pod, "c1", &conf(json!({"ipam": bad_ipam})))
        .success());
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
}

#[test]
fn bad_inputs_have_the_right_codes() {
    let env = Env::new();
    let pod = env.pod();
    assert_cni_error(
        &env.cmd("ADD", &pod, "c1", &conf(&env, json!({"ipam": null}))),
        7,
    );
    let mut status = conf(&env, json!({"ipam": null}));
    status["cniVersion"] = json!("1.1.0");
    assert_cni_error(&env.cmd("STATUS", &pod, "c1", &status), 7);
    assert!(link_names(&pod.name).is_empty());
    // DEL without a netns still succeeds.
    let call = env
        .call("DEL", &pod, "c1", &conf(&env, json!({})))
        .netns("");
    assert_silent_success(&env.run("dummy", &call));
}
