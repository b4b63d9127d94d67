//! The real `rcni-plugins` binary run as `bandwidth` after rcni's bridge and
//! host-local in throwaway namespaces: qdiscs, filter and IFB read back with `tc -j`/`ip -j`,
//! CHECK catching drift, DEL removing the IFB, bad input refused with code 7, and the TBF
//! settings compared with Go's bandwidth plugin. Needs root.

mod attach;
mod common;

use std::path::Path;
use std::process::Command;

use attach::*;
use cni_plugins::bandwidth::conf::ifb_name;
use cni_testkit::{qdiscs, Netns, PluginOutput};
use serde_json::{json, Value};

const NET: &str = "bwnet";
const BR: &str = "bwbr0";
const SUBNET: &str = "198.18.47.0/24";

/// An [`Env`] with `bandwidth` linked next to bridge and host-local (`go`: Go's bandwidth).
fn env_with_bandwidth(go: Option<&Path>) -> Env {
    let env = Env::new();
    let target = match go {
        Some(dir) => dir.join("bandwidth"),
        None => BIN.into(),
    };
    std::os::unix::fs::symlink(target, env.cni_dir.join("bandwidth")).unwrap();
    env
}

/// Attaches `pod` with bridge + host-local and returns the bridge result.
fn attach_pod(env: &Env, pod: &Netns, cid: &str) -> Value {
    let conf = bridge_conf(env, NET, BR, SUBNET, json!({}));
    env.add("bridge", pod, cid, &conf)
}

/// A bandwidth config of `env`: its records go to the sandbox (`dataDir`), never to the
/// machine's default directory.
fn bw_conf(env: &Env, prev: Option<&Value>, keys: Value) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": NET, "type": "bandwidth",
                       "dataDir": records_dir(env)});
    if let Some(prev) = prev {
        c["prevResult"] = prev.clone();
    }
    merge(&mut c, keys);
    c
}

fn records_dir(env: &Env) -> std::path::PathBuf {
    env.data_dir.join("bandwidth-records")
}

fn run_bw(env: &Env, cmd: &str, pod: &Netns, cid: &str, conf: &Value) -> PluginOutput {
    let out = env.run("bandwidth", &env.call(cmd, pod, cid, &conf.to_string()));
    if cmd == "ADD" && out.success() {
        let net = conf["name"].as_str().unwrap();
        common::assert_no_record_in_default_dirs(net, cid, "eth0");
    }
    out
}

fn host_veth_name(prev: &Value) -> String {
    prev["interfaces"][1]["name"].as_str().unwrap().to_string()
}

/// The qdisc of `kind` on `dev` in `ns`, as `tc -j` shows it.
fn qdisc(ns: &str, dev: &str, kind: &str) -> Option<Value> {
    qdiscs(ns)
        .unwrap()
        .into_iter()
        .find(|q| q["dev"] == dev && q["kind"] == kind)
}

fn ingress_filters(ns: &str, dev: &str) -> Value {
    let out = Command::new("tc")
        .args(["-j", "-n", ns, "filter", "show", "dev", dev, "ingress"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(vec![]))
}

const LIMITS: &str = r#"{"ingressRate": 1000000, "ingressBurst": 8000000,
                         "egressRate": 2000000, "egressBurst": 16000000}"#;

fn limits() -> Value {
    serde_json::from_str(LIMITS).unwrap()
}

#[test]
fn add_shapes_both_directions_check_and_del() {
    let env = env_with_bandwidth(None);
    let pod = env.pod();
    let prev = attach_pod(&env, &pod, "c1");
    let veth = host_veth_name(&prev);
    let conf = bw_conf(&env, Some(&prev), limits());

    let out = run_bw(&env, "ADD", &pod, "c1", &conf);
    out.assert_success();
    let r = out.json().unwrap();
    let ifb = ifb_name(NET, "c1");
    let ifaces = r["interfaces"].as_array().unwrap();
    assert_eq!(ifaces.len(), 4, "{r}");
    assert_eq!(
        &ifaces[..3],
        prev["interfaces"].as_array().unwrap().as_slice()
    );
    assert_eq!(ifaces[3]["name"], ifb.as_str());
    assert_eq!(r["ips"], prev["ips"]);

    // Ingress: TBF on the host veth.
    let host = env.host();
    let tbf = qdisc(host, &veth, "tbf").expect("tbf on the host veth");
    assert_eq!(tbf["handle"], "1:");
    assert_eq!(tbf["options"]["rate"], 125_000);
    assert_eq!(tbf["options"]["burst"], 1_000_000);
    assert_eq!(tbf["options"]["lat"], 25_000);
    // Egress: ingress qdisc + redirect on the veth, TBF on the IFB.
    assert!(qdisc(host, &veth, "ingress").is_some());
    let ifb_tbf = qdisc(host, &ifb, "tbf").expect("tbf on the ifb");
    assert_eq!(ifb_tbf["options"]["rate"], 250_000);
    assert_eq!(ifb_tbf["options"]["burst"], 2_000_000);
    let ifb_link = link(host, &ifb);
    assert_eq!(ifb_link["linkinfo"]["info_kind"], "ifb");
    assert_eq!(ifb_link["mtu"], link(host, &veth)["mtu"]);
    assert!(ifb_link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "UP"));
    let filters = ingress_filters(host, &veth);
    let f = filters
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["options"]["actions"].is_array())
        .unwrap_or_else(|| panic!("no redirect filter: {filters}"));
    assert_eq!(f["kind"], "u32");
    assert_eq!(f["options"]["actions"][0]["to_dev"], ifb.as_str());
    assert_eq!(f["options"]["actions"][0]["mirred_action"], "redirect");

    // CHECK passes, and catches a different rate.
    let checked = with_prev_of(&conf, &r);
    let out = run_bw(&env, "CHECK", &pod, "c1", &checked);
    out.assert_success();
    let mut drift = checked.clone();
    drift["egressRate"] = json!(4_000_000);
    assert!(!run_bw(&env, "CHECK", &pod, "c1", &drift).success());

    // DEL removes the IFB; twice, and without a netns, is still fine.
    run_bw(&env, "DEL", &pod, "c1", &checked).assert_success();
    assert!(!has_link(host, &ifb));
    run_bw(&env, "DEL", &pod, "c1", &checked).assert_success();
    let no_ns = env.call("DEL", &pod, "c1", &checked.to_string()).netns("");
    env.run("bandwidth", &no_ns).assert_success();
}

fn with_prev_of(conf: &Value, result: &Value) -> Value {
    Env::with_prev(conf, result)
}

#[test]
fn runtime_config_applies_only_without_top_level_keys() {
    let env = env_with_bandwidth(None);
    let pod = env.pod();
    let prev = attach_pod(&env, &pod, "c2");
    let veth = host_veth_name(&prev);
    let rc =
        json!({"runtimeConfig": {"bandwidth": {"ingressRate": 800_000, "ingressBurst": 80_000}}});

    // Top-level keys present (egress only): runtimeConfig is ignored.
    let mut conf = bw_conf(
        &env,
        Some(&prev),
        json!({"egressRate": 8_000_000, "egressBurst": 800_000}),
    );
    merge(&mut conf, rc.clone());
    run_bw(&env, "ADD", &pod, "c2", &conf).assert_success();
    assert!(qdisc(env.host(), &veth, "tbf").is_none());
    assert!(has_link(env.host(), &ifb_name(NET, "c2")));
    run_bw(&env, "DEL", &pod, "c2", &conf).assert_success();

    // Only runtimeConfig: ingress shaping, no IFB.
    let pod2 = env.pod();
    let prev2 = attach_pod(&env, &pod2, "c3");
    let mut conf = bw_conf(&env, Some(&prev2), json!({}));
    merge(&mut conf, rc);
    let r = run_bw(&env, "ADD", &pod2, "c3", &conf);
    r.assert_success();
    let tbf = qdisc(env.host(), &host_veth_name(&prev2), "tbf").expect("tbf");
    assert_eq!(tbf["options"]["rate"], 100_000);
    assert!(!has_link(env.host(), &ifb_name(NET, "c3")));
    assert_eq!(r.json().unwrap()["interfaces"], prev2["interfaces"]);

    // No limits at all: prevResult passes through untouched.
    let pod3 = env.pod();
    let prev3 = attach_pod(&env, &pod3, "c4");
    let r = run_bw(
        &env,
        "ADD",
        &pod3,
        "c4",
        &bw_conf(&env, Some(&prev3), json!({})),
    );
    r.assert_success();
    assert_eq!(r.json().unwrap()["interfaces"], prev3["interfaces"]);
    assert!(qdisc(env.host(), &host_veth_name(&prev3), "tbf").is_none());
}

#[test]
fn bad_input_is_refused() {
    let env = env_with_bandwidth(None);
    let pod = env.pod();
    let prev = attach_pod(&env, &pod, "c5");
    for keys in [
        json!({"ingressRate": 1000}),
        json!({"egressBurst": 1000}),
        json!({"ingressRate": 1000, "ingressBurst": 40_000_000_000u64}),
        json!({"ingressRate": -5, "ingressBurst": 1000}),
        json!({"egressRate": "fast", "egressBurst": 1000}),
    ] {
        let out = run_bw(
            &env,
            "ADD",
            &pod,
            "c5",
            &bw_conf(&env, Some(&prev), keys.clone()),
        );
        let e = cni_error(&out, 7);
        assert!(e["msg"].is_string(), "{keys}: {out}");
    }
    // Chained only.
    let out = run_bw(&env, "ADD", &pod, "c5", &bw_conf(&env, None, limits()));
    cni_error(&out, 7);
    // Versions before 0.3.0 are not supported.
    let mut old = bw_conf(&env, Some(&prev), limits());
    old["cniVersion"] = json!("0.2.0");
    old.as_object_mut().unwrap().remove("prevResult");
    assert_eq!(run_bw(&env, "ADD", &pod, "c5", &old).error_code(), Some(1));
    // Nothing was left behind by the refused calls.
    assert!(!has_link(env.host(), &ifb_name(NET, "c5")));
    assert!(qdisc(env.host(), &host_veth_name(&prev), "tbf").is_none());
}

#[track_caller]
fn cni_error(out: &PluginOutput, code: u64) -> Value {
    assert!(!out.success(), "expected failure:\n{out}");
    let v = out.json().unwrap();
    assert_eq!(v["code"], code, "{out}");
    v
}

/// The TBF settings `tc` shows, without the per-device counters.
fn tbf_settings(ns: &str, dev: &str) -> Value {
    let q = qdisc(ns, dev, "tbf").unwrap_or_else(|| panic!("no tbf on {dev}"));
    json!({"handle": q["handle"], "root": q["root"], "options": q["options"]})
}

#[test]
fn interop_qdiscs_match_go_bandwidth() {
    let Some(go) = go_dir_or_skip("bandwidth interop") else {
        return;
    };
    if !go.join("bandwidth").is_file() {
        eprintln!("skipped bandwidth interop: Go bandwidth plugin not installed");
        return;
    }
    let rcni = env_with_bandwidth(None);
    let gobw = env_with_bandwidth(Some(&go));
    let (pr, pg) = (rcni.pod(), gobw.pod());
    let prev_r = attach_pod(&rcni, &pr, "cx");
    let prev_g = attach_pod(&gobw, &pg, "cx");
    let conf_r = bw_conf(&rcni, Some(&prev_r), limits());
    let conf_g = bw_conf(&gobw, Some(&prev_g), limits());
    let out_r = run_bw(&rcni, "ADD", &pr, "cx", &conf_r);
    out_r.assert_success();
    let out_g = run_bw(&gobw, "ADD", &pg, "cx", &conf_g);
    out_g.assert_success();

    // Same IFB name, same place in the result.
    let (r, g) = (out_r.json().unwrap(), out_g.json().unwrap());
    let ifb = ifb_name(NET, "cx");
    assert_eq!(r["interfaces"][3]["name"], ifb.as_str());
    assert_eq!(g["interfaces"][3]["name"], ifb.as_str(), "{g}");

    // Same TBF settings on the veth and on the IFB.
    assert_eq!(
        tbf_settings(rcni.host(), &host_veth_name(&prev_r)),
        tbf_settings(gobw.host(), &host_veth_name(&prev_g))
    );
    assert_eq!(
        tbf_settings(rcni.host(), &ifb),
        tbf_settings(gobw.host(), &ifb)
    );
    let (lr, lg) = (link(rcni.host(), &ifb), link(gobw.host(), &ifb));
    for key in ["mtu", "txqlen"] {
        assert_eq!(lr[key], lg[key], "{key}");
    }

    // Each CHECK accepts what the other built.
    let checked_g = Env::with_prev(&conf_g, &g);
    gobw.run(
        "bandwidth",
        &gobw.call("CHECK", &pg, "cx", &checked_g.to_string()),
    )
    .assert_success();
    std::fs::remove_file(gobw.cni_dir.join("bandwidth")).unwrap();
    std::os::unix::fs::symlink(BIN, gobw.cni_dir.join("bandwidth")).unwrap();
    run_bw(&gobw, "CHECK", &pg, "cx", &checked_g).assert_success();
    // rcni's DEL removes the IFB Go created.
    run_bw(&gobw, "DEL", &pg, "cx", &checked_g).assert_success();
    assert!(!has_link(gobw.host(), &ifb));
    run_bw(&rcni, "DEL", &pr, "cx", &Env::with_prev(&conf_r, &r)).assert_success();
    assert!(!has_link(rcni.host(), &ifb));
}

/// Real traffic: with egress capped at 4 Mbit/s (500 kB/s) and a 10 kB bucket, sending 1 MB
/// from the pod to the host takes about 2 s; unshaped it takes milliseconds. Only a generous
/// lower bound is asserted.
#[test]
fn egress_limit_slows_real_traffic() {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    const BYTES: usize = 1_000_000;
    let env = env_with_bandwidth(None);
    let pod = env.pod();
    let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
    let prev = env.add("bridge", &pod, "c7", &conf);
    let keys = json!({"egressRate": 4_000_000, "egressBurst": 80_000});
    run_bw(&env, "ADD", &pod, "c7", &bw_conf(&env, Some(&prev), keys)).assert_success();

    let host_ns = cni_linux::NetNs::open(&env.sb.host().path).unwrap();
    let pod_ns = cni_linux::NetNs::open(&pod.path).unwrap();
    let gateway: SocketAddr = "198.18.47.1:0".parse().unwrap();
    let listener = host_ns
        .run(move || TcpListener::bind(gateway))
        .unwrap()
        .unwrap();
    let server = listener.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got.len()
    });
    let started = Instant::now();
    let mut sender = pod_ns
        .run(move || TcpStream::connect_timeout(&server, Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    sender.write_all(&vec![0x5a; BYTES]).unwrap();
    sender.shutdown(std::net::Shutdown::Write).unwrap();
    let received = receiver.join().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(received, BYTES);
    assert!(
        elapsed > Duration::from_millis(1000),
        "1 MB at 4 Mbit/s took only {elapsed:?}"
    );
    run_bw(
        &env,
        "DEL",
        &pod,
        "c7",
        &bw_conf(&env, Some(&prev), json!({})),
    )
    .assert_success();
}

/// A failure at any step of ADD leaves no IFB and no qdisc behind.
#[test]
fn failed_add_leaves_nothing_behind() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: fault injection exists only in debug builds");
        return;
    }
    let env = env_with_bandwidth(None);
    for (n, step) in ["ingress", "ifb", "filter", "done"].into_iter().enumerate() {
        let pod = env.pod();
        let cid = format!("f{n}");
        let prev = attach_pod(&env, &pod, &cid);
        let veth = host_veth_name(&prev);
        let conf = bw_conf(&env, Some(&prev), limits());
        let call = env
            .call("ADD", &pod, &cid, &conf.to_string())
            .env("RCNI_TEST_FAIL_AT", format!("bandwidth:{step}"));
        let out = env.run("bandwidth", &call);
        assert!(
            out.stdout
                .contains(&format!("injected failure at bandwidth:{step}")),
            "{out}"
        );
        cni_error(&out, 999);
        assert!(!has_link(env.host(), &ifb_name(NET, &cid)), "{step}");
        for kind in ["tbf", "ingress"] {
            assert!(qdisc(env.host(), &veth, kind).is_none(), "{step}: {kind}");
        }
    }
}

/// What `tc -j` and `ip -j` show of an attachment's shaping: the root qdiscs of the host veth
/// and the IFB (settings only), the veth's ingress qdisc and redirect filter, and the IFB link.
fn shaping_state(ns: &str, veth: &str, ifb: &str) -> Value {
    let settings = |dev: &str| {
        qdiscs(ns)
            .unwrap()
            .into_iter()
            .filter(|q| q["dev"] == dev && q["kind"] != "noqueue")
            .map(|q| json!({"kind": q["kind"], "handle": q["handle"], "options": q["options"]}))
            .collect::<Vec<_>>()
    };
    let ifb_link = cni_testkit::link(ns, ifb).unwrap();
    json!({
        "veth": settings(veth),
        "ifb": settings(ifb),
        "filters": ingress_filters(ns, veth),
        "ifb_index": ifb_link.as_ref().map(|l| l["ifindex"].clone()),
    })
}

/// A second ADD of the same attachment fails (the IFB exists) and its undo takes away only
/// what that call made: the first ADD's qdiscs, filter and IFB stay, and CHECK still passes.
#[test]
fn second_add_keeps_the_first_attachments_shaping() {
    let env = env_with_bandwidth(None);
    let pod = env.pod();
    let prev = attach_pod(&env, &pod, "c8");
    let veth = host_veth_name(&prev);
    let ifb = ifb_name(NET, "c8");
    let conf = bw_conf(&env, Some(&prev), limits());
    let first = run_bw(&env, "ADD", &pod, "c8", &conf);
    first.assert_success();
    let before = shaping_state(env.host(), &veth, &ifb);
    assert_eq!(before["veth"].as_array().unwrap().len(), 2, "{before}");
    assert_eq!(before["ifb"].as_array().unwrap().len(), 1, "{before}");
    assert!(before["ifb_index"].is_number(), "{before}");

    let second = run_bw(&env, "ADD", &pod, "c8", &conf);
    assert!(!second.success(), "a repeated ADD must fail: {second}");
    assert_eq!(shaping_state(env.host(), &veth, &ifb), before);
    let msg = second.json().unwrap()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("already"), "{msg}");
    let checked = Env::with_prev(&conf, &first.json().unwrap());
    run_bw(&env, "CHECK", &pod, "c8", &checked).assert_success();

    // Ingress only: the repeated ADD finds the root qdisc and leaves it too.
    let pod2 = env.pod();
    let prev2 = attach_pod(&env, &pod2, "c9");
    let veth2 = host_veth_name(&prev2);
    let ingress = bw_conf(
        &env,
        Some(&prev2),
        json!({"ingressRate": 1_000_000, "ingressBurst": 8_000_000}),
    );
    run_bw(&env, "ADD", &pod2, "c9", &ingress).assert_success();
    let before = shaping_state(env.host(), &veth2, &ifb_name(NET, "c9"));
    let mut other_rate = ingress.clone();
    other_rate["ingressRate"] = json!(3_000_000);
    assert!(!run_bw(&env, "ADD", &pod2, "c9", &other_rate).success());
    assert_eq!(
        shaping_state(env.host(), &veth2, &ifb_name(NET, "c9")),
        before
    );

    // The HTB layout (shapedSubnets) likewise.
    let pod3 = env.pod();
    let prev3 = attach_pod(&env, &pod3, "c10");
    let veth3 = host_veth_name(&prev3);
    let mut keys = limits();
    keys["shapedSubnets"] = json!(["198.18.5.0/24"]);
    let htb = bw_conf(&env, Some(&prev3), keys);
    let first = run_bw(&env, "ADD", &pod3, "c10", &htb);
    first.assert_success();
    let before = shaping_state(env.host(), &veth3, &ifb_name(NET, "c10"));
    assert!(qdisc(env.host(), &veth3, "htb").is_some(), "{before}");
    assert!(!run_bw(&env, "ADD", &pod3, "c10", &htb).success());
    assert_eq!(
        shaping_state(env.host(), &veth3, &ifb_name(NET, "c10")),
        before
    );
    let checked = Env::with_prev(&htb, &first.json().unwrap());
    run_bw(&env, "CHECK", &pod3, "c10", &checked).assert_success();
}

/// Moves `BYTES` between `pod` and a listener at `addr` in the host namespace; `upload` sends
/// from the pod, otherwise the host sends. Returns the time the transfer took.
fn transfer(env: &Env, pod: &Netns, addr: &str, upload: bool) -> std::time::Duration {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    const BYTES: usize = 1_000_000;
    let host_ns = cni_linux::NetNs::open(&env.sb.host().path).unwrap();
    let pod_ns = cni_linux::NetNs::open(&pod.path).unwrap();
    let bind: SocketAddr = format!("{addr}:0").parse().unwrap();
    let listener = host_ns
        .run(move || TcpListener::bind(bind))
        .unwrap()
        .unwrap();
    let server = listener.local_addr().unwrap();
    let move_bytes = move |mut conn: TcpStream, send: bool| -> usize {
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        if send {
            conn.write_all(&vec![0x5a; BYTES]).unwrap();
            conn.shutdown(std::net::Shutdown::Write).unwrap();
            BYTES
        } else {
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            got.len()
        }
    };
    let host_side = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        move_bytes(conn, !upload)
    });
    let started = Instant::now();
    let conn = pod_ns
        .run(move || TcpStream::connect_timeout(&server, Duration::from_secs(5)))
        .unwrap();
    let conn = conn.unwrap_or_else(|e| {
        let host = &env.sb.host().name;
        let tc = |args: &[&str]| {
            let out = Command::new("tc")
                .args(["-s", "-n", host])
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let routes = Command::new("ip")
            .args(["-n", &pod.name, "route"])
            .output()
            .unwrap();
        panic!(
            "connect to {server}: {e}\nclasses:\n{}\nfilters:\n{}\npod routes:\n{}",
            tc(&["class", "show"]),
            tc(&["qdisc", "show"]),
            String::from_utf8_lossy(&routes.stdout)
        )
    });
    let pod_moved = move_bytes(conn, upload);
    let host_moved = host_side.join().unwrap();
    let elapsed = started.elapsed();
    assert_eq!((pod_moved, host_moved), (BYTES, BYTES));
    eprintln!(
        "{} {addr}: {BYTES} bytes in {elapsed:?} ({:.2} Mbit/s)",
        if upload { "upload to" } else { "download from" },
        BYTES as f64 * 8.0 / elapsed.as_secs_f64() / 1e6
    );
    elapsed
}

/// Real traffic with `shapedSubnets` / `unshapedSubnets` (HTB layout): at 4 Mbit/s each way,
/// 1 MB with a shaped peer takes about 2 s, with an unshaped peer milliseconds. The shaped
/// peer is 198.18.5.1 (on the host namespace's `lo`), the unshaped one the bridge gateway.
/// Asserted: shaped transfers take over 1 s and at least 4 times as long as unshaped ones.
#[test]
fn shaped_subnets_limit_only_their_peers() {
    use std::time::Duration;
    const PEER: &str = "198.18.5.1";
    const GW: &str = "198.18.47.1";
    let env = env_with_bandwidth(None);
    let host = env.host().to_string();
    for argv in [
        vec!["ip", "-n", &host, "link", "set", "lo", "up"],
        vec![
            "ip",
            "-n",
            &host,
            "addr",
            "add",
            "198.18.5.1/32",
            "dev",
            "lo",
        ],
    ] {
        let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
        assert!(out.status.success(), "{argv:?}: {out:?}");
    }
    let limits = json!({"ingressRate": 4_000_000, "ingressBurst": 80_000,
                        "egressRate": 4_000_000, "egressBurst": 80_000});
    let slow = |d: Duration, fast: Duration, what: &str| {
        assert!(
            d > Duration::from_millis(1000),
            "{what}: shaped took only {d:?}"
        );
        assert!(d > fast * 4, "{what}: shaped {d:?} vs unshaped {fast:?}");
    };
    for (n, (key, shaped_peer, free_peer)) in
        [("shapedSubnets", PEER, GW), ("unshapedSubnets", GW, PEER)]
            .into_iter()
            .enumerate()
    {
        let pod = env.pod();
        let cid = format!("s{n}");
        let br = bridge_conf(&env, NET, BR, SUBNET, json!({"isDefaultGateway": true}));
        let prev = env.add("bridge", &pod, &cid, &br);
        let mut keys = limits.clone();
        keys[key] = json!(["198.18.5.0/24"]);
        let conf = bw_conf(&env, Some(&prev), keys);
        let out = run_bw(&env, "ADD", &pod, &cid, &conf);
        out.assert_success();
        let veth = host_veth_name(&prev);
        let ifb = ifb_name(NET, &cid);
        for dev in [&veth, &ifb] {
            let q = qdisc(&host, dev, "htb").unwrap_or_else(|| panic!("no htb on {dev}"));
            assert_eq!(q["handle"], "1:");
        }
        let checked = Env::with_prev(&conf, &out.json().unwrap());
        run_bw(&env, "CHECK", &pod, &cid, &checked).assert_success();
        let mut drift = checked.clone();
        let other = if n == 0 {
            "unshapedSubnets"
        } else {
            "shapedSubnets"
        };
        drift.as_object_mut().unwrap().remove(key);
        drift[other] = json!(["198.18.5.0/24"]);
        assert!(
            !run_bw(&env, "CHECK", &pod, &cid, &drift).success(),
            "{key}"
        );

        let fast_up = transfer(&env, &pod, free_peer, true);
        let slow_up = transfer(&env, &pod, shaped_peer, true);
        slow(slow_up, fast_up, &format!("{key}: egress"));
        let fast_down = transfer(&env, &pod, free_peer, false);
        let slow_down = transfer(&env, &pod, shaped_peer, false);
        slow(slow_down, fast_down, &format!("{key}: ingress"));
        run_bw(&env, "DEL", &pod, &cid, &checked).assert_success();
        assert!(!has_link(&host, &ifb));
    }

    // Both lists: refused before anything is made.
    let pod = env.pod();
    let prev = attach_pod(&env, &pod, "s9");
    let mut keys = limits;
    keys["shapedSubnets"] = json!(["198.18.5.0/24"]);
    keys["unshapedSubnets"] = json!(["198.18.6.0/24"]);
    let out = run_bw(&env, "ADD", &pod, "s9", &bw_conf(&env, Some(&prev), keys));
    let e = cni_error(&out, 7);
    assert!(e["msg"].as_str().unwrap().contains("cannot be both"), "{e}");
    assert!(!has_link(&host, &ifb_name(NET, "s9")));
    assert!(qdisc(&host, &host_veth_name(&prev), "htb").is_none());
}

/// The IFB carries its attachment as its interface alias, so GC of the network removes the
/// IFB of an attachment missing from the valid list (an ADD whose runtime died, or one killed
/// after the IFB was made) and keeps the others, and GC of another network touches nothing.
#[test]
fn gc_removes_an_ifb_of_a_dead_attachment() {
    let env = env_with_bandwidth(None);
    let egress = json!({"egressRate": 2_000_000, "egressBurst": 16_000_000});
    let (live, dead) = (env.pod(), env.pod());
    for (pod, cid) in [(&live, "g1"), (&dead, "g2")] {
        let prev = attach_pod(&env, pod, cid);
        run_bw(
            &env,
            "ADD",
            pod,
            cid,
            &bw_conf(&env, Some(&prev), egress.clone()),
        )
        .assert_success();
    }
    let (live_ifb, dead_ifb) = (ifb_name(NET, "g1"), ifb_name(NET, "g2"));
    let alias = link(env.host(), &dead_ifb)["ifalias"].clone();
    assert!(
        alias.as_str().is_some_and(|a| a.contains("id: g2")),
        "{alias}"
    );
    let gc = |net: &str| {
        let mut c = json!({"cniVersion": "1.1.0", "name": net, "type": "bandwidth",
                           "dataDir": records_dir(&env)});
        c["cni.dev/valid-attachments"] = json!([{"containerID": "g1", "ifname": "eth0"}]);
        let call = env.call("GC", &live, "", &c.to_string()).netns("");
        env.run("bandwidth", &call)
    };
    gc("othernet").assert_success();
    assert!(has_link(env.host(), &dead_ifb));
    gc(NET).assert_success();
    assert!(
        !has_link(env.host(), &dead_ifb),
        "GC left the dead attachment's IFB"
    );
    assert!(
        has_link(env.host(), &live_ifb),
        "GC removed a valid attachment's IFB"
    );
}
