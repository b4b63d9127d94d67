//! One process per bridge ADD: host-local found in CNI_PATH as a link to the
//! running rcni-plugins runs in-process; a wrapper script (or any other executable) is still
//! executed. Both paths give the same results, files and error codes. Needs root and strace.

mod attach;

use std::path::{Path, PathBuf};

use attach::*;
use cni_testkit::PluginCall;
use serde_json::{json, Value};

const NET: &str = "ipnet";
const BR: &str = "brip0";
const SUBNET: &str = "198.18.40.0/29";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ipam {
    /// `host-local -> rcni-plugins`: the same executable as bridge.
    Linked,
    /// `host-local` is a shell script that logs its run and executes rcni-plugins.
    Wrapper,
}

/// A sandbox whose host-local is `ipam`; returns it with the wrapper's log (empty for Linked).
fn setup(ipam: Ipam) -> (Env, PathBuf) {
    let env = Env::new();
    let log = env.sb.dir().join("wrapper.log");
    if ipam == Ipam::Wrapper {
        let real = env.sb.dir().join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(BIN, real.join("host-local")).unwrap();
        let script = env.cni_dir.join("host-local");
        std::fs::remove_file(&script).unwrap();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$CNI_COMMAND\" >> {}\nexec {} \"$@\"\n",
                log.display(),
                real.join("host-local").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (env, log)
}

fn wrapper_runs(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The result with what differs between any two attachments (MACs, veth names) masked.
fn masked(result: &Value) -> Value {
    let mut r = result.clone();
    for iface in r["interfaces"].as_array_mut().into_iter().flatten() {
        iface["mac"] = json!("<mac>");
        if iface["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("veth"))
        {
            iface["name"] = json!("<veth>");
        }
        if iface.get("sandbox").is_some() {
            iface["sandbox"] = json!("<netns>");
        }
    }
    r
}

/// Lease files of the network with their bytes.
fn lease_bytes(env: &Env) -> Vec<(String, String)> {
    env.leases(NET)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(env.data_dir.join(NET).join(&name)).unwrap();
            (name, String::from_utf8_lossy(&bytes).into_owned())
        })
        .collect()
}

/// ADD, CHECK, a failing ADD (requested address outside the range), a full range, DEL; every
/// observable outcome in order.
fn scenario(env: &Env) -> Vec<String> {
    let conf = bridge_conf(env, NET, BR, SUBNET, json!({"isGateway": true}));
    let mut seen = Vec::new();
    let mut pods = Vec::new();
    let outcome = |out: &cni_testkit::PluginOutput| match out.json() {
        Ok(v) if out.success() => masked(&v).to_string(),
        Ok(v) => format!("exit {} code {} msg {}", out.status, v["code"], v["msg"]),
        Err(_) => format!("exit {} stdout {:?}", out.status, out.stdout),
    };
    for n in 0..6 {
        let pod = env.pod();
        let out = env.run(
            "bridge",
            &env.call("ADD", &pod, &format!("c{n}"), &conf.to_string()),
        );
        seen.push(format!("ADD c{n}: {}", outcome(&out)));
        pods.push((pod, out));
    }
    seen.push(format!("leases: {:?}", lease_bytes(env)));
    let (pod0, first) = &pods[0];
    let check = Env::with_prev(&conf, &first.json().unwrap());
    let out = env.run("bridge", &env.call("CHECK", pod0, "c0", &check.to_string()));
    seen.push(format!("CHECK c0: {}", outcome(&out)));
    let pod = env.pod();
    let call: PluginCall = env
        .call("ADD", &pod, "bad", &conf.to_string())
        .args("IgnoreUnknown=1;IP=198.18.41.9");
    seen.push(format!("ADD bad: {}", outcome(&env.run("bridge", &call))));
    for (n, (pod, _)) in pods.iter().enumerate() {
        let out = env.run(
            "bridge",
            &env.call("DEL", pod, &format!("c{n}"), &conf.to_string()),
        );
        seen.push(format!("DEL c{n}: {}", outcome(&out)));
    }
    seen.push(format!("leases after DEL: {:?}", lease_bytes(env)));
    seen.push(format!("host ports: {:?}", host_ports(env)));
    seen
}

fn host_ports(env: &Env) -> Vec<String> {
    link_names(env.host())
        .into_iter()
        .filter(|n| n != "lo" && n != BR)
        .collect()
}

#[test]
fn linked_and_wrapper_ipam_answer_the_same() {
    let (linked, linked_log) = setup(Ipam::Linked);
    let (wrapped, wrapper_log) = setup(Ipam::Wrapper);
    let a = scenario(&linked);
    let b = scenario(&wrapped);
    assert_eq!(a, b);
    // The range holds five addresses: the sixth ADD fails, the bad request fails in host-local,
    // DEL frees all.
    assert!(a[5].contains("no IP addresses available"), "{a:#?}");
    assert!(a[8].contains("198.18.41.9"), "{a:#?}");
    assert!(a.last().unwrap().contains("[]"), "{a:#?}");
    assert!(wrapper_runs(&linked_log).is_empty());
    // The wrapper ran for every IPAM call: 6 ADD, 1 CHECK, the bad ADD, 6 DEL.
    let runs = wrapper_runs(&wrapper_log);
    assert!(runs.iter().filter(|c| *c == "ADD").count() >= 7, "{runs:?}");
    assert!(runs.iter().any(|c| c == "CHECK"), "{runs:?}");
    assert!(runs.iter().filter(|c| *c == "DEL").count() >= 6, "{runs:?}");
}

/// execve calls of one bridge ADD, traced with `strace -f`.
fn traced_execs(env: &Env, cid: &str) -> Vec<String> {
    let trace = env.sb.dir().join(format!("trace-{cid}"));
    let traced = env.sb.dir().join("traced-bridge");
    std::fs::write(
        &traced,
        format!(
            "#!/bin/sh\nexec strace -f -qq -e trace=execve -o {} {} \"$@\"\n",
            trace.display(),
            env.cni_dir.join("bridge").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&traced, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = bridge_conf(env, NET, BR, SUBNET, json!({"isGateway": true}));
    let pod = env.pod();
    let out = env
        .sb
        .run_plugin(&traced, &env.call("ADD", &pod, cid, &conf.to_string()))
        .unwrap();
    out.assert_success();
    std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("execve(") && !l.contains("resumed"))
        .map(String::from)
        .collect()
}

fn have_strace() -> bool {
    let found = std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: strace not installed");
    }
    found
}

#[test]
fn one_process_per_bridge_add_when_host_local_is_this_executable() {
    if !have_strace() {
        return;
    }
    let (linked, _) = setup(Ipam::Linked);
    let execs = traced_execs(&linked, "one");
    assert_eq!(execs.len(), 1, "{execs:#?}");
    assert!(execs[0].contains("/bridge\""), "{execs:#?}");

    let (wrapped, log) = setup(Ipam::Wrapper);
    let execs = traced_execs(&wrapped, "two");
    // bridge, the wrapper script, and the rcni-plugins it executes.
    assert!(
        execs.iter().any(|e| e.contains("/cni-bin/host-local\"")),
        "{execs:#?}"
    );
    assert!(
        execs.iter().any(|e| e.contains("/real/host-local\"")),
        "{execs:#?}"
    );
    assert_eq!(wrapper_runs(&log), ["ADD"]);
}

/// A panic inside host-local (debug-build hook) fails the bridge ADD with the same code either
/// way, and the bridge ADD's undo leaves nothing behind.
#[test]
fn panic_in_ipam_is_the_same_error_and_is_undone() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: RCNI_TEST_PANIC is only honoured by debug builds");
        return;
    }
    let mut answers = Vec::new();
    for ipam in [Ipam::Linked, Ipam::Wrapper] {
        let (env, _) = setup(ipam);
        let conf = bridge_conf(&env, NET, BR, SUBNET, json!({"isGateway": true}));
        let pod = env.pod();
        let call = env
            .call("ADD", &pod, "p", &conf.to_string())
            .env("RCNI_TEST_PANIC", "1")
            .env("RCNI_TEST_PANIC_ONLY", "host-local");
        let out = env.run("bridge", &call);
        assert_eq!(out.error_code(), Some(999), "{ipam:?}: {out}");
        assert!(
            host_ports(&env).is_empty(),
            "{ipam:?}: {:?}",
            host_ports(&env)
        );
        assert!(env.leases(NET).is_empty(), "{ipam:?}");
        assert!(link_names(&pod.name).iter().all(|n| n == "lo"), "{ipam:?}");
        // The same call without the hook succeeds afterwards.
        env.add("bridge", &pod, "p", &conf);
        answers.push(out.json().unwrap()["msg"].to_string());
    }
    assert_eq!(answers[0], answers[1]);
}
