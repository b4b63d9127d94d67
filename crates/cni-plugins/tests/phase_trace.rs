//! `RCNI_TRACE_PHASES` on the real bridge plugin: the phase lines go to the named file (the
//! delegated host-local adds its own), stdout still carries only the result, and without the
//! variable nothing is written anywhere. Needs root.

mod attach;

use attach::*;
use serde_json::{json, Value};

const PHASES: [&str; 12] = [
    "main",
    "conf",
    "netns",
    "bridge",
    "veth",
    "container netns",
    "port",
    "ipam",
    "container",
    "gateway",
    "wait",
    "done",
];

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

#[test]
fn bridge_add_and_del_write_their_phases_to_the_trace_file_only() {
    let env = Env::new();
    let pod = env.pod();
    let conf = bridge_conf(
        &env,
        "trnet",
        "trbr0",
        "198.18.61.0/24",
        json!({"isGateway": true}),
    );
    let trace = env.data_dir.parent().unwrap().join("phases.jsonl");

    let add = env
        .call("ADD", &pod, "c1", &conf.to_string())
        .env("RCNI_TRACE_PHASES", &trace);
    let out = env.run("bridge", &add);
    out.assert_success();
    let result: Value = out.json().expect("stdout is exactly the result");
    assert_eq!(result["ips"][0]["address"], "198.18.61.2/24");

    let marks = lines(&trace);
    let bridge_pid = marks[0]["pid"].clone();
    let ours: Vec<&Value> = marks.iter().filter(|m| m["pid"] == bridge_pid).collect();
    let phases: Vec<&str> = ours.iter().map(|m| m["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, PHASES);
    assert!(ours
        .iter()
        .all(|m| m["plugin"] == "bridge" && m["command"] == "ADD"));
    let times: Vec<i64> = ours.iter().map(|m| m["t_ns"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Kernel work is counted: the veth pair needs more netlink exchanges than the bridge
    // look-up, and entering the container one namespace thread.
    let at = |phase: &str, key: &str| {
        ours.iter().find(|m| m["phase"] == phase).unwrap()[key]
            .as_u64()
            .unwrap()
    };
    assert!(at("veth", "netlink") > at("bridge", "netlink"));
    assert!(at("container netns", "ns_thread") > at("veth", "ns_thread"));
    // host-local is a link to the same executable, so the delegation ran it in-process
    // (in-process IPAM): one process wrote every line, and the IPAM phase holds its work.
    assert!(marks.iter().all(|m| m["pid"] == bridge_pid), "{marks:?}");

    std::fs::remove_file(&trace).unwrap();
    let del_conf = Env::with_prev(&conf, &result);
    let del = env
        .call("DEL", &pod, "c1", &del_conf.to_string())
        .env("RCNI_TRACE_PHASES", &trace);
    let out = env.run("bridge", &del);
    out.assert_success();
    assert!(out.stdout.is_empty(), "DEL prints nothing");
    let del_phases: Vec<String> = lines(&trace)
        .iter()
        .filter(|m| m["plugin"] == "bridge")
        .map(|m| m["phase"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(del_phases, ["main", "conf", "masq", "links and lease"]);

    // Unset: a second attachment writes no trace.
    std::fs::remove_file(&trace).unwrap();
    let pod2 = env.pod();
    env.add("bridge", &pod2, "c2", &conf);
    assert!(!trace.exists());
}
