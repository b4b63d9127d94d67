//! Integration tests of rcni's tap plugin with the real `rcni-plugins` binary in cni-testkit
//! sandboxes; the kernel is read back with `ip -j -d link`. Debian ships no Go tap plugin
//! (`/usr/lib/cni/tap` is absent), so there is no differential test. Needs root.

mod sublink;

use serde_json::{json, Value};
use sublink::*;

const NET: &str = "tapnet";
const SUBNET: &str = "198.18.14.0/24";
const MAC: &str = "02:42:c6:12:0e:07";

fn conf(env: &Env, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": NET, "type": "tap",
        "ipam": env.host_local(SUBNET),
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

fn tun_info(ns: &str, name: &str) -> Value {
    let l = link(ns, name).unwrap_or_else(|| panic!("{name} missing in {ns}"));
    assert_eq!(l["linkinfo"]["info_kind"], "tun", "{l}");
    l["linkinfo"]["info_data"].clone()
}

#[test]
fn tap_with_flags_owner_group_mtu_and_mac() {
    let env = Env::new();
    let pod = env.pod();
    let c = conf(
        &env,
        json!({"mac": MAC, "mtu": 1400, "multiQueue": true, "owner": 4242, "group": 4343,
               "dns": {"nameservers": ["198.18.14.53"]}}),
    );
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"][0]["name"], "eth0", "{r}");
    assert_eq!(r["interfaces"][0]["mac"], MAC);
    assert_eq!(r["interfaces"][0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["address"], "198.18.14.2/24");
    assert_eq!(r["ips"][0]["interface"], 0);
    assert_eq!(r["dns"]["nameservers"], json!(["198.18.14.53"]));
    let info = tun_info(&pod.name, "eth0");
    assert_eq!(info["type"], "tap", "{info}");
    assert_eq!(info["persist"], true);
    assert_eq!(info["multi_queue"], true);
    assert_eq!(info["vnet_hdr"], true);
    assert_eq!(info["pi"], false);
    assert_eq!(info["user"].to_string().trim_matches('"'), "4242", "{info}");
    assert_eq!(
        info["group"].to_string().trim_matches('"'),
        "4343",
        "{info}"
    );
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(
        (l["mtu"].as_u64(), l["address"].as_str()),
        (Some(1400), Some(MAC))
    );
    assert!(is_up(&pod.name, "eth0"));
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.14.2/24"]);
    assert!(link_names(env.host()).is_empty(), "nothing on the host");
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));

    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn single_queue_without_ids_and_without_ipam() {
    let env = Env::new();
    let pod = env.pod();
    let c = conf(&env, json!({"ipam": null}));
    let r = env.add(&pod, "c1", &c);
    assert!(
        r.get("ips")
            .is_none_or(|v| v.as_array().unwrap().is_empty()),
        "{r}"
    );
    let info = tun_info(&pod.name, "eth0");
    assert_eq!(info["multi_queue"], false, "{info}");
    assert_eq!(info["vnet_hdr"], false, "{info}");
    assert!(
        info.get("user").is_none() && info.get("group").is_none(),
        "{info}"
    );
    assert!(is_up(&pod.name, "eth0"));
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
}

#[test]
fn tap_is_attached_to_the_bridge_in_the_container() {
    let env = Env::new();
    let pod = env.pod();
    env.ip_in(&pod.name, &["link", "add", "br0", "type", "bridge"]);
    let c = conf(&env, json!({"bridge": "br0", "ipam": null}));
    let r = env.add(&pod, "c1", &c);
    assert_eq!(link(&pod.name, "eth0").unwrap()["master"], "br0");
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    env.ip_in(&pod.name, &["link", "set", "eth0", "nomaster"]);
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)), 999);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert_eq!(link_names(&pod.name), ["br0"]);
}

#[test]
fn failures_leave_nothing_behind() {
    let env = Env::new();
    let pod = env.pod();
    let clean = |what: &str| {
        assert!(link_names(&pod.name).is_empty(), "{what}");
        assert!(env.leases(NET).is_empty(), "{what}");
    };
    for step in ["link", "configured", "ipam", "done"] {
        let call = env
            .call("ADD", &pod, "c1", &conf(&env, json!({"mtu": 1400})))
            .env("RCNI_TEST_FAIL_AT", format!("tap:{step}"));
        let e = assert_cni_error(&env.run("tap", &call), 999);
        assert!(e["msg"].as_str().unwrap().contains(step), "{e}");
        clean(step);
    }
    let e = assert_cni_error(
        &env.cmd("ADD", &pod, "c1", &conf(&env, json!({"bridge": "nobr0"}))),
        999,
    );
    assert!(e["msg"].as_str().unwrap().contains("nobr0"), "{e}");
    clean("missing bridge");
    for bad in [
        json!({"selinuxcontext": "system_u:system_r:container_t:s0"}),
        json!({"owner": -1}),
        json!({"mac": "zz"}),
    ] {
        assert_cni_error(&env.cmd("ADD", &pod, "c1", &conf(&env, bad)), 7);
    }
    clean("bad config");
}
