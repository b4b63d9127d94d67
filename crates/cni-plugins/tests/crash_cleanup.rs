//! A call that dies half-way leaves nothing that DEL or GC cannot find: a panic unwinds
//! through the undo stack, and what a SIGKILL leaves is tagged with its attachment so DEL
//! without a netns and GC with an empty valid list remove it.

mod attach;

use attach::*;
use serde_json::{json, Value};

const NET: &str = "crashnet";
const BR: &str = "rcnicrash0";
const SUBNET: &str = "198.18.40.0/24";

/// Host links other than the bridge (the host ends of veth pairs).
fn host_ports(env: &Env) -> Vec<String> {
    link_names(env.host())
        .into_iter()
        .filter(|n| n != "lo" && n != BR)
        .collect()
}

/// ipMasq rules in the host's `inet cni_plugins_masquerade` table carrying `id`.
fn masq_rules_of(env: &Env, id: &str) -> usize {
    nft_rule_comments(env.host(), "cni_plugins_masquerade")
        .iter()
        .filter(|c| c.ends_with(&format!("id: {id}")))
        .count()
}

/// macspoofchk chains of `id` in the host's `bridge nat` table.
fn spoofcheck_chains_of(env: &Env, id: &str) -> Vec<String> {
    nft_chain_names(env.host(), "nat")
        .into_iter()
        .filter(|c| c.starts_with(&format!("cni-br-iface-{id}")))
        .collect()
}

#[track_caller]
fn assert_nothing_left(env: &Env, pod: &cni_testkit::Netns, id: &str, what: &str) {
    assert!(!has_link(&pod.name, "eth0"), "{what}: container eth0 left");
    assert!(
        eventually(|| host_ports(env).is_empty()),
        "{what}: host veths left: {:?}",
        host_ports(env)
    );
    assert!(
        env.leases(NET).is_empty(),
        "{what}: leases left: {:?}",
        env.leases(NET)
    );
    assert_eq!(masq_rules_of(env, id), 0, "{what}: masquerade rules left");
    assert!(
        spoofcheck_chains_of(env, id).is_empty(),
        "{what}: spoof check chains left: {:?}",
        spoofcheck_chains_of(env, id)
    );
}

fn conf(env: &Env) -> Value {
    bridge_conf(
        env,
        NET,
        BR,
        SUBNET,
        json!({"isGateway": true, "ipMasq": true, "macspoofchk": true}),
    )
}

/// A panic at each step of a bridge+host-local ADD (debug-build hook `RCNI_TEST_PANIC_AT`)
/// answers with a code-999 error naming the location, exits non-zero, prints no panic text
/// on stdout, and leaves no veth, lease, masquerade rule or spoof-check chain.
#[test]
fn a_panic_mid_add_runs_the_undo_stack() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: RCNI_TEST_PANIC_AT is only honoured by debug builds");
        return;
    }
    let env = Env::new();
    let conf = conf(&env);
    for step in ["veth", "port", "ipam", "container", "gateway", "done"] {
        let pod = env.pod();
        let call = env
            .call("ADD", &pod, "c1", &conf.to_string())
            .env("RCNI_TEST_PANIC_AT", format!("bridge:{step}"));
        let out = env.run("bridge", &call);
        assert_ne!(out.status, 0, "{step}: {out}");
        let err: Value = out.json().unwrap_or_else(|e| panic!("{step}: {e}: {out}"));
        assert_eq!(err["code"], 999, "{step}: {out}");
        assert_eq!(err["cniVersion"], "1.0.0", "{step}: {out}");
        let msg = err["msg"].as_str().unwrap();
        assert!(msg.contains("src/bridge/add.rs:"), "{step}: {msg}");
        for bad in ["panicked at", "stack backtrace", "injected panic"] {
            assert!(
                !out.stdout.contains(bad),
                "{step}: stdout has {bad:?}: {out}"
            );
        }
        assert!(
            out.stderr
                .contains(&format!("injected panic at bridge:{step}")),
            "{step}: the message is logged: {out}"
        );
        assert_nothing_left(&env, &pod, "c1", &format!("panic at {step}"));
    }
}

/// Runs a bridge ADD that aborts at `step` (debug-build hook `RCNI_TEST_ABORT_AT`: no undo
/// runs, as with a SIGKILL there) and checks the kill left the pair behind.
fn killed_add(env: &Env, pod: &cni_testkit::Netns, cid: &str, conf: &Value, step: &str) {
    let call = env
        .call("ADD", pod, cid, &conf.to_string())
        .env("RCNI_TEST_ABORT_AT", format!("bridge:{step}"));
    let out = env.run("bridge", &call);
    assert_eq!(out.status, 128 + 6, "{step}: killed by SIGABRT: {out}");
    assert_eq!(out.stdout, "", "{step}: {out}");
    assert!(
        has_link(&pod.name, "eth0"),
        "{step}: the killed ADD left the container end"
    );
    assert_eq!(host_ports(env).len(), 1, "{step}: and the host end");
}

const KILL_STEPS: [&str; 5] = ["veth", "port", "ipam", "container", "done"];

/// GC with an empty valid list after an ADD killed at each step removes the host veth (found
/// by its alias), with it the container's eth0, the lease and the masquerade rule.
#[test]
fn gc_removes_a_killed_adds_veth() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: RCNI_TEST_ABORT_AT is only honoured by debug builds");
        return;
    }
    let env = Env::new();
    let mut conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"isGateway": true, "ipMasq": true}),
    );
    conf["cniVersion"] = json!("1.1.0");
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    for step in KILL_STEPS {
        let pod = env.pod();
        let cid = format!("c-{step}");
        killed_add(&env, &pod, &cid, &conf, step);
        let call = cni_testkit::PluginCall::new("GC")
            .path(&env.cni_dir)
            .stdin(gc.to_string());
        let out = env.run("bridge", &call);
        out.assert_success();
        assert_nothing_left(&env, &pod, &cid, &format!("GC after a kill at {step}"));
    }
}

/// DEL with an empty CNI_NETNS after an ADD killed at each step removes the host veth by its
/// alias (the container end goes with it), the lease and the masquerade rule.
#[test]
fn del_without_netns_removes_the_tagged_host_veth() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: RCNI_TEST_ABORT_AT is only honoured by debug builds");
        return;
    }
    let env = Env::new();
    let conf = bridge_conf(
        &env,
        NET,
        BR,
        SUBNET,
        json!({"isGateway": true, "ipMasq": true}),
    );
    for step in KILL_STEPS {
        let pod = env.pod();
        let cid = format!("c-{step}");
        killed_add(&env, &pod, &cid, &conf, step);
        let del = env.call("DEL", &pod, &cid, &conf.to_string()).netns("");
        env.run("bridge", &del).assert_success();
        assert_nothing_left(&env, &pod, &cid, &format!("DEL after a kill at {step}"));
    }
}
