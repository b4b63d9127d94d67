//! Root-only: the agent puts the node's nf_tables rules back by itself. On a simulated node
//! with two pods attached by `rcni add`: pod P on the agent's network with hostPort
//! 8080 -> 80, pod Q on a second network of the node (rcni bridge with ipMasq and
//! macspoofchk, firewall) in the same result cache. The external namespace reaches P through
//! the node's address and P's traffic to it leaves with the node's address (the agent's
//! masquerade). Then, one after another, `nft flush ruleset`, `iptables -F; iptables -t nat
//! -F`, the deletion of only rcni's tables, and what a firewalld reload does to other
//! software's rules (the iptables and ebtables tables' chains flushed and deleted) remove
//! rules in the node: without any command, every rule of the agent and of both pods comes back
//! (the time from the disruption to that is measured and printed, not asserted), the traffic
//! works again, `rcni check` passes for both pods and `rcni_node_rule_repairs_total` in
//! /metrics went up.

mod harness;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cni_testkit::{bin_path, http_get, http_server, Netns, HTTP_BODY};
use harness::*;
use serde_json::{json, Value};

/// The node's second network (its own conf dir, the same cache).
const SECOND: &str = r#"{"cniVersion":"1.0.0","name":"second","plugins":[
  {"type":"bridge","bridge":"sec0","isGateway":true,"ipMasq":true,"macspoofchk":true,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.70.0/24"}]],"dataDir":"IPAM"}},
  {"type":"firewall"}]}"#;

/// `rcni <verb> <net> <pod>` on the node with conf dir `conf`, the node's plugins and cache,
/// and the hostPort mapping as capability args.
fn rcni(
    c: &Cluster,
    i: usize,
    conf: &Path,
    verb: &str,
    net: &str,
    pod: &Netns,
) -> std::process::Output {
    let node = &c.nodes[i];
    Command::new("ip")
        .args(["netns", "exec", &node.ns.name])
        .arg(bin_path("rcni").expect("cargo build -p rcni first"))
        .args([verb, net])
        .arg(&pod.path)
        .arg("--conf-dir")
        .arg(conf)
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

/// The agent's rules and the rules and elements tagged with an attachment (portmap, ipMasq,
/// firewall and macspoofchk all name the container ID, which rcni derives as `cnitool-...`).
fn owned(ns: &str) -> usize {
    // A listing that fails mid-flush counts as nothing owned; the caller polls again.
    let v = cni_testkit::nft_json(ns)
        .ok()
        .flatten()
        .unwrap_or(Value::Null);
    let tagged = |c: &Value| c.as_str().is_some_and(|c| c.contains("cnitool-"));
    let mut n = 0;
    for item in v["nftables"].as_array().into_iter().flatten() {
        let rule = &item["rule"];
        if rule["table"] == "rcni-node" || tagged(&rule["comment"]) {
            n += 1;
        }
        for set in [&item["map"], &item["set"]] {
            let elems = set["elem"].as_array().into_iter().flatten();
            n += elems.filter(|e| tagged(&e["elem"]["comment"])).count();
        }
    }
    n
}

#[test]
fn the_agent_restores_its_masquerade_and_the_pods_rules_without_a_command() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    c.sb.link_plugins(bin_path("rcni-plugins").unwrap(), &["firewall"])
        .unwrap();
    let i = c.add_node();
    // The harness gives the agent the node's cache, the one `rcni` below writes.
    c.start_agent(i);
    let second = c.nodes[i].dir.join("second.d");
    std::fs::create_dir_all(&second).unwrap();
    let ipam = c.nodes[i].dir.join("ipam-second");
    std::fs::write(
        second.join("10-second.conflist"),
        SECOND.replace("IPAM", &ipam.display().to_string()),
    )
    .unwrap();
    let (p, q) = (c.sb.add_container().unwrap(), c.sb.add_container().unwrap());
    let conf = c.nodes[i].conf_dir();
    for (dir, net, pod) in [(&conf, "rcni", &p), (&second, "second", &q)] {
        let added = rcni(&c, i, dir, "add", net, pod);
        assert!(
            added.status.success(),
            "{}",
            String::from_utf8_lossy(&added.stderr)
        );
    }
    let _srv = http_server(&p.name, [0, 0, 0, 0], 80).unwrap();
    let node_ip = c.nodes[i].ip;
    let url = format!("http://{node_ip}:8080/");
    let node_ns = c.nodes[i].ns.name.clone();
    let works = |c: &Cluster| {
        let mapped = (0..3).any(|_| http_get(&c.external.name, &url).is_ok_and(|b| b == HTTP_BODY));
        let listener = listen_in(&c.external, EXTERNAL_IP);
        let masqueraded = source_seen(&p, &listener, EXTERNAL_IP) == std::net::IpAddr::V4(node_ip);
        (mapped, masqueraded)
    };
    let checks_pass = |c: &Cluster| {
        [(&conf, "rcni", &p), (&second, "second", &q)]
            .into_iter()
            .all(|(dir, net, pod)| rcni(c, i, dir, "check", net, pod).status.success())
    };
    assert_eq!(works(&c), (true, true), "before");
    assert!(checks_pass(&c), "CHECK before");
    let all = owned(&node_ns);

    for disruption in [
        "nft flush ruleset",
        "iptables -F; iptables -t nat -F",
        "nft delete table ip rcni-node; nft delete table ip cni_hostport; \
         nft delete table inet cni_plugins_masquerade; nft delete table bridge nat",
        // What firewalld's start and reload do to the iptables/ebtables tables.
        "iptables -F; iptables -X; iptables -t nat -F; iptables -t nat -X; \
         ebtables -t nat -F; ebtables -t nat -X",
    ] {
        let before = repairs_total(&c, i);
        sh(&["ip", "netns", "exec", &node_ns, "sh", "-c", disruption]);
        let back = poll_every(Duration::from_millis(10), Duration::from_secs(10), || {
            owned(&node_ns) == all
        });
        let took = back.unwrap_or_else(|| {
            panic!(
                "`{disruption}`: {} of {all} rules back after 10 s:\n{}",
                owned(&node_ns),
                c.nodes[i].agent_log()
            )
        });
        eprintln!(
            "`{disruption}`: restored by the agent {} ms after it",
            took.as_millis()
        );
        assert_eq!(works(&c), (true, true), "after `{disruption}`");
        assert!(checks_pass(&c), "CHECK after `{disruption}`");
        let counted = wait_for(Duration::from_secs(5), || repairs_total(&c, i) > before);
        assert!(
            counted.is_some(),
            "`{disruption}`: the repair counter stayed at {before}"
        );
        assert_eq!(owned(&node_ns), all, "`{disruption}`: rules doubled");
    }
}
