//! Integration tests of rcni's dummy plugin with the real `rcni-plugins` binary in
//! cni-testkit sandboxes. Where the kernel lacks dummy (CONFIG_DUMMY) the kernel tests print
//! a SKIPPED line and instead check that ADD fails cleanly, naming the missing support, with
//! nothing left behind. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

const NET: &str = "dmnet";
const SUBNET: &str = "10.69.0.0/24";

fn conf(env: &Env, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": NET, "type": "dummy",
        "ipam": env.host_local(SUBNET), "dataDir": env.records_dir(),
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
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
    assert_eq!(addrs_of(&pod.name, "eth0"), ["10.69.0.2/24"]);
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
    let check_clean = || {
        assert!(link_names(&pod.name).is_empty());
        assert!(env.leases(NET).is_empty());
        assert!(link_names(env.host()).is_empty());
    };
    if !supported() {
        let e = assert_cni_error(&env.cmd("ADD", &pod, "c1", &conf(&env, json!({}))), 999);
        assert!(e["msg"].as_str().unwrap().contains("dummy"), "{e}");
        check_clean();
        return;
    }
    for step in ["link", "ipam", "done"] {
        let call = env
            .call("ADD", &pod, "c1", &conf(&env, json!({})))
            .env("RCNI_TEST_FAIL_AT", format!("dummy:{step}"));
        assert_cni_error(&env.run("dummy", &call), 999);
        check_clean();
    }
    let bad_ipam =
        json!({"type": "host-local", "dataDir": env.data_dir, "ranges": [[{"subnet": "nope"}]]});
    assert!(!env
        .cmd("ADD", &pod, "c1", &conf(&env, json!({"ipam": bad_ipam})))
        .success());
    check_clean();
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
