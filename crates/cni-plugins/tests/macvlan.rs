//! Integration tests of rcni's macvlan plugin: the real `rcni-plugins` binary in throwaway
//! namespaces (cni-testkit), kernel state read back with `ip -j -d link`, real traffic
//! between two pods, fault injection with zero leftovers, CNI error codes, and the result
//! shape compared with Debian's Go macvlan. Needs root.

mod sublink;

use cni_testkit::{go_plugins_dir, ping, Netns};
use serde_json::{json, Value};
use sublink::*;

const NET: &str = "mvnet";
const SUBNET: &str = "198.18.51.0/24";
const MASTER: &str = "master0";

fn conf(env: &Env, extra: Value) -> Value {
    env.conf(
        json!({
            "cniVersion": "1.0.0", "name": NET, "type": "macvlan", "master": MASTER
        }),
        SUBNET,
        &extra,
    )
}

fn env_with_master() -> Env {
    let env = Env::new();
    env.add_master(MASTER);
    env
}

/// Nothing left by a failed ADD: no link but `lo` in the pod, no lease, host unchanged.
#[track_caller]
fn assert_no_leftovers(env: &Env, pod: &Netns, host_before: &[String]) {
    assert_eq!(link_names(&pod.name), Vec::<String>::new());
    assert_eq!(env.leases(NET), Vec::<String>::new());
    assert_eq!(link_names(env.host()), host_before);
}

#[test]
fn add_check_del() {
    let env = env_with_master();
    let pod = env.pod();
    let c = conf(
        &env,
        json!({"mtu": 1400, "mode": "vepa", "bcqueuelen": 100,
               "dns": {"nameservers": ["198.18.51.53"]}}),
    );
    let r = env.add(&pod, "c1", &c);

    // Result: one interface (the macvlan, in the sandbox), IPs on interface 0, config DNS.
    let ifaces = r["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 1, "{r}");
    assert_eq!(ifaces[0]["name"], "eth0");
    assert_eq!(ifaces[0]["sandbox"], pod.path.to_str().unwrap());
    assert_eq!(r["ips"][0]["interface"], 0);
    assert_eq!(r["ips"][0]["address"], "198.18.51.2/24");
    assert_eq!(r["dns"]["nameservers"], json!(["198.18.51.53"]));

    // Kernel: a vepa macvlan with MTU 1400, the result's MAC, up, with the address.
    let l = link(&pod.name, "eth0").expect("eth0 in the pod");
    assert_eq!(l["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "vepa");
    assert_eq!(l["linkinfo"]["info_data"]["bcqueuelen"], 100);
    assert_eq!(l["mtu"], 1400);
    assert_eq!(l["address"], ifaces[0]["mac"]);
    assert!(is_up(&pod.name, "eth0"));
    assert_eq!(addrs_of(&pod.name, "eth0"), ["198.18.51.2/24"]);
    // Nothing new on the host but the master pair; no temporary name left anywhere.
    assert_eq!(link_names(env.host()), ["master0", "master0p"]);
    assert_eq!(link_names(&pod.name), ["eth0"]);
    assert_eq!(env.leases(NET), ["198.18.51.2"]);
    // Attribution: the link carries its attachment's tag as alias, and one record (0600)
    // names the attachment's netns for GC.
    let tag = temp_tag("c1");
    assert!(
        l["ifalias"].as_str().is_some_and(|a| a.starts_with(&tag)),
        "alias {} is not the attachment's tag {tag}",
        l["ifalias"]
    );
    let record_file = env.records_dir().join(format!("{tag}.json"));
    let record: Value = serde_json::from_slice(&std::fs::read(&record_file).unwrap()).unwrap();
    assert_eq!(record["netns"], pod.path.to_str().unwrap());
    assert_eq!(record["containerID"], "c1");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&record_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));

    // CHECK notices a changed mode and a wrong MAC.
    let mut bad = with_prev(&conf(&env, json!({"mtu": 1400, "mode": "bridge"})), &r);
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &bad), 999);
    bad = with_prev(&c, &r);
    bad["prevResult"]["interfaces"][0]["mac"] = json!("02:00:00:00:00:99");
    assert_cni_error(&env.cmd("CHECK", &pod, "c1", &bad), 999);

    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link(&pod.name, "eth0").is_none());
    assert!(env.leases(NET).is_empty());
    assert!(!record_file.exists(), "DEL removes the record");
    // Idempotent: again, and with the namespace gone.
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    env.sb.remove_container(&pod).unwrap();
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

fn sha512_hex(s: &str) -> String {
    use sha2::{Digest, Sha512};
    Sha512::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The tag of attachment (`cid`, eth0) of [`NET`], computed independently:
/// `<hash16(net)>-<hash16(ifname:cid)>` with SHA-512.
fn temp_tag(cid: &str) -> String {
    format!(
        "{}-{}",
        &sha512_hex(NET)[..16],
        &sha512_hex(&format!("eth0:{cid}"))[..16]
    )
}

/// The temporary name of attachment (`cid`, eth0) of [`NET`]: `rcni` and 11 hex digits of
/// SHA-512 of its tag.
fn temp_name(cid: &str) -> String {
    format!("rcni{}", &sha512_hex(&temp_tag(cid))[..11])
}

/// What a kill between creating the macvlan and renaming it leaves: the link under the
/// attachment's temporary name in the pod.
fn leave_a_killed_adds_link(env: &Env, pod: &Netns, cid: &str) {
    let temp = temp_name(cid);
    let out = env
        .sb
        .exec_host([
            "ip", "link", "add", &temp, "link", MASTER, "type", "macvlan",
        ])
        .unwrap();
    out.assert_success();
    let out = env
        .sb
        .exec_host(["ip", "link", "set", &temp, "netns", &pod.name])
        .unwrap();
    out.assert_success();
}

#[test]
fn del_removes_a_macvlan_a_killed_add_left_under_its_temporary_name() {
    let env = env_with_master();
    let pod = env.pod();
    let c = conf(&env, json!({}));
    leave_a_killed_adds_link(&env, &pod, "c1");
    leave_a_killed_adds_link(&env, &pod, "c2");
    let mut before = vec![temp_name("c1"), temp_name("c2")];
    before.sort();
    assert_eq!(link_names(&pod.name), before);

    // A new ADD of the same attachment refuses, naming the leftover, and changes nothing.
    let out = env.cmd("ADD", &pod, "c1", &c);
    let err = assert_cni_error(&out, 999);
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.contains(&temp_name("c1")) && msg.contains("DEL it first"),
        "{msg}"
    );
    assert_eq!(link_names(&pod.name), before);
    assert!(env.leases(NET).is_empty());

    // DEL of the attachment removes its leftover, and only its own.
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert_eq!(link_names(&pod.name), [temp_name("c2")]);
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    let mut now = vec!["eth0".to_string(), temp_name("c2")];
    now.sort();
    assert_eq!(link_names(&pod.name), now);
    // (c2 names eth0 in the same pod too, so its DEL takes c1's eth0 as well.)
    assert_silent_success(&env.cmd("DEL", &pod, "c2", &c));
    assert_eq!(link_names(&pod.name), Vec::<String>::new());
}

#[test]
fn gc_releases_the_lease_of_a_dead_attachment() {
    let env = env_with_master();
    let c = conf(&env, json!({}));
    let live = env.pod();
    let dead = env.pod();
    env.add(&live, "live", &c);
    env.add(&dead, "dead", &c);
    assert_eq!(env.leases(NET), ["198.18.51.2", "198.18.51.3"]);
    // The dead pod's sandbox goes without a DEL; its macvlan goes with it (it never had a
    // host side), its lease stays until GC.
    env.sb.remove_container(&dead).unwrap();
    let mut gc = conf(&env, json!({"cniVersion": "1.1.0"}));
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "live", "ifname": "eth0"}]);
    let call = cni_testkit::PluginCall::new("GC")
        .path(&env.cni_dir)
        .stdin(gc.to_string());
    assert_silent_success(&env.run("macvlan", &call));
    assert_eq!(env.leases(NET), ["198.18.51.2"]);
    assert_eq!(link_names(&live.name), ["eth0"]);
}

#[test]
fn del_after_the_netns_is_gone_still_releases_the_lease() {
    let env = env_with_master();
    let pod = env.pod();
    let c = conf(&env, json!({}));
    env.add(&pod, "c1", &c);
    assert_eq!(env.leases(NET), ["198.18.51.2"]);
    env.sb.remove_container(&pod).unwrap();
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(env.leases(NET).is_empty());
    // And with CNI_NETNS empty.
    let pod = env.pod();
    env.add(&pod, "c2", &c);
    let call = env.call("DEL", &pod, "c2", &c).netns("");
    assert_silent_success(&env.run("macvlan", &call));
    assert!(env.leases(NET).is_empty());
}

#[test]
fn two_pods_on_one_master_ping_each_other() {
    let env = env_with_master();
    let (a, b) = (env.pod(), env.pod());
    let c = conf(&env, json!({}));
    let ra = env.add(&a, "a", &c);
    let rb = env.add(&b, "b", &c);
    let ip = |r: &Value| -> std::net::IpAddr {
        let s = r["ips"][0]["address"].as_str().unwrap();
        s.split('/').next().unwrap().parse().unwrap()
    };
    assert_ne!(ip(&ra), ip(&rb));
    assert!(ping(&a.name, ip(&rb)), "a cannot reach b");
    assert!(ping(&b.name, ip(&ra)), "b cannot reach a");
    for (pod, cid) in [(&a, "a"), (&b, "b")] {
        assert_silent_success(&env.cmd("DEL", pod, cid, &c));
    }
    assert!(env.leases(NET).is_empty());
}

#[test]
fn l2_only_with_default_route_master_and_runtime_mac() {
    let env = env_with_master();
    env.default_route_via(MASTER);
    let pod = env.pod();
    let c = conf(
        &env,
        json!({"master": null, "ipam": null, "mode": "private", "mac": "02:00:00:00:00:01",
               "runtimeConfig": {"mac": "02:00:00:00:00:0a"}}),
    );
    let r = env.add(&pod, "c1", &c);
    assert!(r.get("ips").is_none(), "{r}");
    assert_eq!(r["interfaces"][0]["mac"], "02:00:00:00:00:0a");
    let l = link(&pod.name, "eth0").unwrap();
    assert_eq!(l["linkinfo"]["info_data"]["mode"], "private");
    assert_eq!(l["address"], "02:00:00:00:00:0a");
    assert!(is_up(&pod.name, "eth0"));
    assert!(addrs_of(&pod.name, "eth0").is_empty());
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert!(link_names(&pod.name).is_empty());
}

#[test]
fn master_in_the_container_with_link_in_container() {
    let env = Env::new();
    let pod = env.pod();
    env.ip_in(
        &pod.name,
        &[
            "link", "add", "inner0", "type", "veth", "peer", "name", "inner0p",
        ],
    );
    env.ip_in(&pod.name, &["link", "set", "inner0", "up"]);
    let c = conf(&env, json!({"master": "inner0", "linkInContainer": true}));
    let r = env.add(&pod, "c1", &c);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(
        link(&pod.name, "eth0").unwrap()["linkinfo"]["info_kind"],
        "macvlan"
    );
    assert_eq!(link_names(&pod.name), ["eth0", "inner0", "inner0p"]);
    assert!(link_names(env.host()).is_empty());
    assert_silent_success(&env.cmd("CHECK", &pod, "c1", &with_prev(&c, &r)));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
    assert_eq!(link_names(&pod.name), ["inner0", "inner0p"]);
    // Without linkInContainer the master is looked for on the host, where it is not.
    let out = env.cmd("ADD", &pod, "c1", &conf(&env, json!({"master": "inner0"})));
    assert_cni_error(&out, 999);
    assert_eq!(link_names(&pod.name), ["inner0", "inner0p"]);
    assert!(env.leases(NET).is_empty());
}

#[test]
fn cni_args_mac_and_status() {
    let env = env_with_master();
    let pod = env.pod();
    let c = conf(&env, json!({"mac": "02:00:00:00:00:01"}));
    let call = env
        .call("ADD", &pod, "c1", &c)
        .args("IgnoreUnknown=1;MAC=02:00:00:00:00:0b");
    let out = env.run("macvlan", &call);
    out.assert_success();
    assert_eq!(
        out.json().unwrap()["interfaces"][0]["mac"],
        "02:00:00:00:00:0b"
    );
    let mut s = c.clone();
    s["cniVersion"] = json!("1.1.0");
    assert_silent_success(&env.cmd("STATUS", &pod, "c1", &s));
    assert_silent_success(&env.cmd("DEL", &pod, "c1", &c));
}

#[test]
fn failures_leave_nothing_behind() {
    let env = env_with_master();
    let pod = env.pod();
    let host_before = link_names(env.host());

    // Missing master.
    let out = env.cmd("ADD", &pod, "c1", &conf(&env, json!({"master": "nosuch0"})));
    let e = assert_cni_error(&out, 999);
    assert!(e["msg"].as_str().unwrap().contains("nosuch0"), "{e}");
    assert_no_leftovers(&env, &pod, &host_before);

    // IPAM plugin that does not exist.
    let out = env.cmd(
        "ADD",
        &pod,
        "c1",
        &conf(&env, json!({"ipam": {"type": "nosuch-ipam"}})),
    );
    assert!(!out.success(), "{out}");
    assert_no_leftovers(&env, &pod, &host_before);

    // IPAM that fails (an unparsable range): the macvlan goes again.
    let bad_ipam =
        json!({"type": "host-local", "dataDir": env.data_dir, "ranges": [[{"subnet": "nope"}]]});
    let out = env.cmd("ADD", &pod, "c1", &conf(&env, json!({"ipam": bad_ipam})));
    assert!(!out.success(), "{out}");
    assert_no_leftovers(&env, &pod, &host_before);

    // Injected failures after each step (debug builds).
    for step in ["link", "ipam", "done"] {
        let call = env
            .call("ADD", &pod, "c1", &conf(&env, json!({})))
            .env("RCNI_TEST_FAIL_AT", format!("macvlan:{step}"));
        let out = env.run("macvlan", &call);
        assert_cni_error(&out, 999);
        assert_no_leftovers(&env, &pod, &host_before);
    }

    // The name is taken in the pod: the existing link stays, nothing else is left.
    env.ip_in(
        &pod.name,
        &[
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ],
    );
    let out = env.cmd("ADD", &pod, "c1", &conf(&env, json!({})));
    let e = assert_cni_error(&out, 999);
    assert!(e["msg"].as_str().unwrap().contains("rename"), "{e}");
    assert_eq!(link_names(&pod.name), ["eth0", "eth0p"]);
    assert_eq!(
        link(&pod.name, "eth0").unwrap()["linkinfo"]["info_kind"],
        "veth"
    );
    assert!(env.leases(NET).is_empty());
    assert_eq!(link_names(env.host()), host_before);
}

#[test]
fn bad_inputs_have_the_right_codes() {
    let env = env_with_master();
    let pod = env.pod();
    for (extra, code) in [
        (json!({"mode": "nope"}), 7),
        (json!({"mtu": 9000}), 7),
        (json!({"mtu": -1}), 7),
        (json!({"mac": "zz:zz"}), 7),
        (json!({"linkInContainer": "yes"}), 7),
    ] {
        let out = env.cmd("ADD", &pod, "c1", &conf(&env, extra.clone()));
        assert_cni_error(&out, code);
    }
    // Unknown CNI_ARGS without IgnoreUnknown.
    let call = env
        .call("ADD", &pod, "c1", &conf(&env, json!({})))
        .args("FOO=bar");
    assert_cni_error(&env.run("macvlan", &call), 4);
    // A namespace that does not exist.
    let gone = Netns {
        name: "gone".into(),
        path: env.sb.dir().join("no-such-netns"),
    };
    assert_cni_error(&env.cmd("ADD", &gone, "c1", &conf(&env, json!({}))), 3);
    // CHECK without prevResult (L2, so IPAM CHECK does not answer first).
    let e = assert_cni_error(
        &env.cmd("CHECK", &pod, "c1", &conf(&env, json!({"ipam": null}))),
        999,
    );
    assert!(e["msg"].as_str().unwrap().contains("prevResult"), "{e}");
    assert!(link_names(&pod.name).is_empty());
    assert!(env.leases(NET).is_empty());
}

/// The same config through Go's and rcni's macvlan (each in its own pod, Go's host-local
/// for both): the results have the same shape.
#[test]
fn result_shape_matches_go() {
    let Some(go) = go_plugins_dir().filter(|d| d.join("macvlan").exists()) else {
        eprintln!("SKIPPED: Go macvlan not installed in /usr/lib/cni");
        return;
    };
    let env = env_with_master();
    let go_dir = env.sb.dir().join("go-bin");
    std::fs::create_dir_all(&go_dir).unwrap();
    for name in ["macvlan", "host-local"] {
        std::os::unix::fs::symlink(go.join(name), go_dir.join(name)).unwrap();
    }
    let c = conf(
        &env,
        json!({"mtu": 1400, "dns": {"nameservers": ["198.18.51.53"]}}),
    );
    let (p1, p2) = (env.pod(), env.pod());
    let go_out = env
        .sb
        .run_plugin(
            go_dir.join("macvlan"),
            &env.call("ADD", &p1, "g", &c).path(&go_dir),
        )
        .unwrap();
    go_out.assert_success();
    let rs_out = env.cmd("ADD", &p2, "r", &c);
    rs_out.assert_success();
    let shape = |mut v: Value, pod: &Netns| {
        let iface = &mut v["interfaces"][0];
        assert_eq!(iface["sandbox"], pod.path.to_str().unwrap());
        iface["mac"] = json!("MAC");
        iface["sandbox"] = json!("NS");
        v["ips"][0]["address"] = json!("ADDR");
        v
    };
    assert_eq!(
        shape(rs_out.json().unwrap(), &p2),
        shape(go_out.json().unwrap(), &p1)
    );
    // rcni CHECKs and DELs what Go made, and the other way round.
    let go_r = go_out.json().unwrap();
    assert_silent_success(&env.cmd("CHECK", &p1, "g", &with_prev(&c, &go_r)));
    let del = env.call("DEL", &p2, "r", &c).path(&go_dir);
    assert_silent_success(&env.sb.run_plugin(go_dir.join("macvlan"), &del).unwrap());
    assert_silent_success(&env.cmd("DEL", &p1, "g", &c));
    assert!(link_names(&p1.name).is_empty() && link_names(&p2.name).is_empty());
    assert!(env.leases(NET).is_empty());
}
