//! Integration tests of rcni's host-device plugin with the real `rcni-plugins` binary in
//! cni-testkit sandboxes: a veth end made in the sandbox's host namespace is the device.
//! The differential test runs Debian's Go plugin (`/usr/lib/cni/host-device`) on the same
//! config. Needs root.

mod sublink;

use cni_testkit::PluginCall;
use serde_json::{json, Value};
use sublink::*;

const NET: &str = "hdnet";
const SUBNET: &str = "198.18.13.0/24";
const DEV: &str = "hd0";
const DEV_MAC: &str = "02:42:c6:12:0d:01";

/// A veth `hd0` (peer `hd0p`) in the host namespace with a known MAC and MTU 1400.
fn device(env: &Env) {
    env.add_master(DEV);
    env.ip_host(&["link", "set", DEV, "address", DEV_MAC, "mtu", "1400"]);
}

fn state_dir(env: &Env) -> std::path::PathBuf {
    env.sb.dir().join("hd-state")
}

fn conf(env: &Env, extra: Value) -> Value {
    let mut c = json!({
        "cniVersion": "1.0.0", "name": NET, "type": "host-device",
        "device": DEV, "dataDir": state_dir(env),
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

fn state_files(env: &Env) -> Vec<String> {
    std::fs::read_dir(state_dir(env))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The device is on the host as it was before ADD: name, MAC, MTU, no alias.
#[track_caller]
fn assert_back_on_host(env: &Env) {
    let l = link(env.host(), DEV).unwrap_or_else(|| panic!("{DEV} not back on the host"));
    assert_eq!(l["address"], DEV_MAC, "{l}");
    assert_eq!(l["mtu"], 1400, "{l}");
    assert!(l.get("ifalias").is_none(), "{l}");
    assert_eq!(link_names(env.host()), [DEV, "hd0p"]);
}

#[test]
fn by_name_moved_renamed_addressed_and_del_restores_name_and_mtu() {
    let env = Env::new();
    device(&env);
    let pod = env.pod();
    let c = conf(&env, json!({}));
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"][0]["name"], "eth0", "{r}");
    assert_eq!(r["interfaces"][0]["mac"], DEV_MAC, "{r}");
    assert_eq!(r["interfaces"][0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 0);
    assert_eq!(r["ips"][0]["address"], "198.18.13.2/24");
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["address"], DEV_MAC);
    assert_eq!(
        l["ifalias"], DEV,
        "the alias names the host device, as Go sets it"
    );
    assert!(is_up(&pod.name, "eth0"));
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.13.2/24"]);
    assert_eq!(link_names(env.host()), ["hd0p"]);
    assert_eq!(state_files(&env), ["c1_eth0.json"]);
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));

    // The container changes the MTU; DEL restores the host's.
    env.ip_in(&pod.name, &["link", "set", "eth0", "mtu", "1300"]);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert_back_on_host(&env);
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
    assert!(state_files(&env).is_empty());
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    // CHECK after DEL fails (host-local no longer holds the lease).
    assert!(!env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)).success());
}

#[test]
fn by_hwaddr_without_ipam() {
    let env = Env::new();
    device(&env);
    let pod = env.pod();
    let c = conf(
        &env,
        json!({"device": null, "hwaddr": DEV_MAC, "ipam": null}),
    );
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"][0]["mac"], DEV_MAC, "{r}");
    assert!(
        r.get("ips")
            .is_none_or(|ips| ips.as_array().unwrap().is_empty()),
        "{r}"
    );
    assert!(is_up(&pod.name, "eth0"));
    assert!(addrs_of(&pod.name, "eth0").is_empty());
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert_back_on_host(&env);
}

#[test]
fn name_taken_in_the_container_goes_through_the_temporary_name() {
    // The device's host name exists in the container; CNI_IFNAME does not.
    let env = Env::new();
    device(&env);
    let pod = env.pod();
    env.ip_in(
        &pod.name,
        &["link", "add", DEV, "type", "veth", "peer", "name", "x0"],
    );
    let r = env.add(&pod, "c1", &conf(&env, json!({})));
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(link(&pod.name, "eth0").unwrap()["address"], DEV_MAC);
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &conf(&env, json!({}))));
    assert_back_on_host(&env);
}

#[test]
fn del_after_the_netns_vanished_still_releases_the_lease() {
    let env = Env::new();
    device(&env);
    let pod = env.pod();
    let c = conf(&env, json!({}));
    env.add(&pod, "c1", &c);
    assert_eq!(env.leases(NET).len(), 1);
    env.sb.remove_container(&pod).unwrap();
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(env.leases(NET).is_empty(), "lease leaked");
    assert!(state_files(&env).is_empty());
    // A veth end is destroyed with its namespace: nothing comes back (and nothing is made up).
    assert!(link(env.host(), DEV).is_none());
}

#[test]
fn failures_leave_nothing_behind() {
    let env = Env::new();
    device(&env);
    let pod = env.pod();
    for step in ["state", "moved", "ipam", "done"] {
        let call = env
            .call("ADD", &pod, "c1", &conf(&env, json!({})))
            .env("RCNI_TEST_FAIL_AT", format!("host-device:{step}"));
        let e = assert_cni_error(&env.run("host-device", &call), 999);
        assert!(e["msg"].as_str().unwrap().contains(step), "{e}");
        assert_back_on_host(&env);
        assert!(link_names(&pod.name).is_empty(), "{step}");
        assert!(env.leases(NET).is_empty(), "{step}");
        assert!(state_files(&env).is_empty(), "{step}");
    }
    // A device that does not exist, and bad configs.
    assert_cni_error(
        &env.cmd("ADD", &pod, "c1", &conf(&env, json!({"device": "nope0"}))),
        999,
    );
    for bad in [
        json!({"device": null}),
        json!({"device": 1}),
        json!({"DPDKMode": true}),
    ] {
        assert_cni_error(&env.cmd("ADD", &pod, "c1", &conf(&env, bad)), 7);
    }
    assert_back_on_host(&env);
    assert!(env.leases(NET).is_empty());
}

/// Container kernel state that both plugins must produce alike.
fn container_state(ns: &str) -> Value {
    let l = link(ns, "eth0").unwrap();
    json!({
        "names": link_names(ns),
        "mac": l["address"], "mtu": l["mtu"], "alias": l["ifalias"],
        "up": is_up(ns, "eth0"), "addrs": addrs_of(ns, "eth0").len(),
    })
}

/// The result with what differs by design blanked: the sandbox path, the address (host-local
/// hands out the next one) and libcni's empty `"dns":{}` (before v1.2; we omit it).
fn shape(r: &Value) -> Value {
    let mut r = r.clone();
    r["interfaces"][0]["sandbox"] = json!("");
    r["ips"][0]["address"] = json!("");
    if r["dns"] == json!({}) {
        r.as_object_mut().unwrap().remove("dns");
    }
    r
}

#[test]
fn differential_against_the_go_plugin() {
    let Some(go_dir) = cni_testkit::go_plugins_dir() else {
        eprintln!("SKIPPED: Go reference plugins not installed in /usr/lib/cni");
        return;
    };
    let env = Env::new();
    device(&env);
    let go = |command: &str, pod: &cni_testkit::Netns, c: &Value| {
        let call: PluginCall = env.call(command, pod, "c1", c).path(&go_dir);
        env.sb
            .run_plugin(go_dir.join("host-device"), &call)
            .unwrap()
    };
    let c = conf(&env, json!({}));

    let pod = env.pod();
    let out = go("ADD", &pod, &c);
    out.assert_success();
    let go_result: Value = out.json().unwrap();
    let go_state = container_state(&pod.name);
    let out = go("DEL", &pod, &c);
    out.assert_success();
    // Go leaves the device down and its MTU as the container left it; name and MAC agree.
    assert_eq!(link(env.host(), DEV).unwrap()["address"], DEV_MAC);

    let pod2 = env.pod();
    let ours = env.add(&pod2, "c1", &c);
    assert_eq!(shape(&ours), shape(&go_result));
    assert_eq!(container_state(&pod2.name), go_state);

    // Either plugin's DEL brings the other's device back (the alias is the same record).
    let out = go("DEL", &pod2, &c);
    out.assert_success();
    assert_eq!(link(env.host(), DEV).unwrap()["address"], DEV_MAC);
    assert!(env.leases(NET).is_empty());
}
