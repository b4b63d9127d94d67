//! Root-only: the agent puts the node's nf_tables rules back by itself. On a simulated node
//! with a pod attached by `rcni add` (hostPort 8080 -> 80): the external namespace reaches
//! the pod through the node's address and the pod's traffic to it leaves with the node's
//! address (the agent's masquerade). Then, one after another, `nft flush ruleset` and the
//! deletion of only the agent's and portmap's tables remove rules in the node: without any command, the agent's masquerade table and the pod's
//! port mapping come back (the time from the disruption to both being back is measured and
//! printed, not asserted), the traffic works again, `rcni check` passes and
//! `rcni_node_rule_repairs_total` in /metrics went up.

mod harness;

use std::process::Command;
use std::time::Duration;

use cni_testkit::{bin_path, http_get, http_server, HTTP_BODY};
use harness::*;
use serde_json::{json, Value};

/// `rcni <verb> rcni <pod>` on the node, with the hostPort mapping as capability args.
fn rcni(c: &Cluster, i: usize, verb: &str, pod: &cni_testkit::Netns) -> std::process::Output {
    let node = &c.nodes[i];
    Command::new("ip")
        .args(["netns", "exec", &node.ns.name])
        .arg(bin_path("rcni").expect("cargo build -p rcni first"))
        .args([verb, "rcni"])
        .arg(&pod.path)
        .arg("--conf-dir")
        .arg(node.conf_dir())
        .arg("--bin-dir")
        .arg(&c.plugins)
        .arg("--cache-dir")
        .arg(node.dir.join("cache"))
        .args([
            "--capability-args",
            r#"{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}"#,
        ])
        .output()
        .unwrap()
}

fn repairs_total(c: &Cluster, i: usize) -> u64 {
    let text = c.nodes[i].health_get("/metrics").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("rcni_node_rule_repairs_total "))
        .expect("the counter is exported")
        .trim()
        .parse()
        .unwrap()
}

/// Whether the node's ruleset holds the agent's masquerade rules and the pod's mapping.
fn rules_back(ns: &str) -> bool {
    let Ok(out) = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-j", "list", "ruleset"])
        .output()
    else {
        return false;
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let items = v["nftables"].as_array().cloned().unwrap_or_default();
    let masq = items.iter().any(|i| {
        i["rule"]["table"] == "rcni-node"
            && i["rule"]["comment"]
                .as_str()
                .is_some_and(|c| c.ends_with("is masqueraded"))
    });
    let mapped = items.iter().any(|i| {
        i["map"]["name"] == "rcni_hostports"
            && i["map"]["elem"].as_array().is_some_and(|e| !e.is_empty())
    });
    masq && mapped
}

#[test]
fn the_agent_restores_its_masquerade_and_the_pods_rules_without_a_command() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    let i = c.add_node();
    let cache = c.nodes[i].dir.join("cache");
    c.nodes[i].extra = vec!["--cni-cache-dir".into(), cache.display().to_string()];
    c.start_agent(i);
    let pod = c.sb.add_container().unwrap();
    let added = rcni(&c, i, "add", &pod);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let _srv = http_server(&pod.name, [0, 0, 0, 0], 80).unwrap();
    let node_ip = c.nodes[i].ip;
    let url = format!("http://{node_ip}:8080/");
    let node_ns = c.nodes[i].ns.name.clone();
    let works = |c: &Cluster| {
        let mapped = (0..3).any(|_| http_get(&c.external.name, &url).is_ok_and(|b| b == HTTP_BODY));
        let listener = listen_in(&c.external, EXTERNAL_IP);
        let masqueraded = source_seen(&pod, &listener, EXTERNAL_IP) == std::net::IpAddr::V4(node_ip);
        (mapped, masqueraded)
    };
    assert_eq!(works(&c), (true, true), "before");
    assert!(rules_back(&node_ns));

    for disruption in [
        "nft flush ruleset",
        "nft delete table ip rcni-node; nft delete table ip cni_hostport",
    ] {
        let before = repairs_total(&c, i);
        sh(&["ip", "netns", "exec", &node_ns, "sh", "-c", disruption]);
        let back = poll_every(Duration::from_millis(10), Duration::from_secs(10), || {
            rules_back(&node_ns)
        });
        let took = back.unwrap_or_else(|| {
            panic!("`{disruption}`: not restored in 10 s:\n{}", c.nodes[i].agent_log())
        });
        eprintln!("`{disruption}`: restored by the agent {} ms after it", took.as_millis());
        assert_eq!(works(&c), (true, true), "after `{disruption}`");
        let check = rcni(&c, i, "check", &pod);
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
        let after = wait_for(Duration::from_secs(5), || repairs_total(&c, i) > before);
        assert!(after.is_some(), "`{disruption}`: the repair counter stayed at {before}");
    }
}
