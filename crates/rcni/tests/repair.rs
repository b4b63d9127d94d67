//! `rcni repair` after the host's own firewall removed rcni's rules (issue: firewall managers
//! next to the CNI). For each disruption, on a node built by [`repair_world`]: everything
//! works before; after the disruption the expected properties fail (the disruption was real)
//! and `rcni check` names what is missing and suggests `rcni repair`; after `rcni repair`
//! everything works again, CHECK passes, the ruleset has exactly the counts it had before
//! (nothing doubled), links, leases and cache are untouched, the Go plugins' rules are not
//! recreated and the Go plugins are named as left alone; a second repair restores nothing.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

mod repair_world;
use repair_world::firewalld::Firewalld;
use repair_world::{Health, World};

/// The rcni networks and their pods, for CHECK.
fn rcni_pods(w: &World) -> [(&'static str, &cni_testkit::Netns); 2] {
    [("web", &w.a), ("other", &w.c)]
}

fn attachments(report: &Value) -> &Vec<Value> {
    report["attachments"].as_array().unwrap()
}

fn restored_any(report: &Value) -> bool {
    attachments(report).iter().any(|a| a["restoredAny"] == true)
}

/// The disruption `cmd` (in the host namespace) breaks `broken`; `rcni repair` brings it all
/// back.
fn disrupt_and_repair(label: &str, cmd: &str, broken: Health) {
    let Some(w) = World::new() else { return };
    assert_eq!(w.probe(), Health::ALL, "{label}: before the disruption");
    assert_eq!(
        w.doctor_missing(),
        Vec::<String>::new(),
        "{label}: doctor before"
    );
    for (net, pod) in rcni_pods(&w) {
        assert_eq!(w.check(net, pod), None, "{label}: CHECK {net} before");
    }
    let counts = w.ruleset_counts();
    let kept = w.untouchable();
    let go_chains = w.go_nat_chains();
    assert!(go_chains > 0, "{label}: Go ptp made no iptables chains");

    w.host_sh(cmd);
    let go_after = w.go_nat_chains();
    assert_eq!(w.probe(), broken, "{label}: after `{cmd}`");
    let failed = w
        .check("web", &w.a)
        .expect("CHECK passes after the disruption");
    assert!(failed.contains("rcni repair"), "{label}: {failed}");
    let missing = w.doctor_missing();
    assert!(
        missing.iter().any(|m| m.starts_with("web ")),
        "{label}: doctor lists {missing:?}"
    );
    assert!(
        !missing.iter().any(|m| m.starts_with("gonet ")),
        "{label}: {missing:?}"
    );

    let started = Instant::now();
    let report = w.repair();
    eprintln!("{label}: rcni repair took {:?}", started.elapsed());
    assert!(restored_any(&report), "{label}: {report:#}");
    let go = attachments(&report)
        .iter()
        .find(|a| a["network"] == "gonet")
        .expect("the Go attachment is reported");
    let left: Vec<&str> = go["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("leftAlone").is_some())
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["ptp", "tuning"], "{label}: {go:#}");

    assert_eq!(w.probe(), Health::ALL, "{label}: after rcni repair");
    for (net, pod) in rcni_pods(&w) {
        assert_eq!(w.check(net, pod), None, "{label}: CHECK {net} after repair");
    }
    let repaired = w.ruleset_counts();
    assert_eq!(
        rcni_owned(&repaired),
        rcni_owned(&counts),
        "{label}: rcni's objects differ from before the disruption"
    );
    assert_eq!(
        w.go_nat_chains(),
        go_after,
        "{label}: Go's rules were touched"
    );
    assert_eq!(
        w.untouchable(),
        kept,
        "{label}: links, leases or cache changed"
    );
    assert_eq!(
        w.doctor_missing(),
        Vec::<String>::new(),
        "{label}: doctor after repair"
    );

    let again = w.repair();
    assert!(!restored_any(&again), "{label}: second repair: {again:#}");
    assert_eq!(
        w.ruleset_counts(),
        repaired,
        "{label}: the second repair changed rules"
    );
}

/// The rule and element counts of the tables and iptables chains rcni's plugins write.
fn rcni_owned(counts: &BTreeMap<String, usize>) -> BTreeMap<String, usize> {
    let ours = |k: &str| {
        [
            "cni_hostport",
            "cni_plugins_masquerade",
            "cni_firewall",
            "\"bridge\" \"nat\"",
        ]
        .iter()
        .any(|t| k.contains(t))
            || (k.contains("\"filter\"") && (k.contains("CNI-") || k.contains("FORWARD")))
    };
    counts
        .iter()
        .filter(|(k, _)| ours(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

#[test]
fn repair_after_nft_flush_ruleset() {
    disrupt_and_repair("nft flush ruleset", "nft flush ruleset", Health::NOTHING);
}

#[test]
fn repair_after_iptables_flush() {
    // iptables-nft flushes its own tables' chains: the firewall plugin's accept rules (and the
    // jump to them) go, the FORWARD policy stays DROP; rcni's own tables are not touched.
    disrupt_and_repair(
        "iptables -F",
        "iptables -F; iptables -t nat -F",
        Health::ACCEPTS_GONE,
    );
}

#[test]
fn repair_after_rcnis_tables_are_deleted() {
    disrupt_and_repair(
        "rcni's tables deleted",
        "nft delete table ip cni_hostport; nft delete table inet cni_plugins_masquerade; \
         nft delete table inet cni_firewall; nft delete table bridge nat",
        Health::NOTHING,
    );
}

/// Debian's firewalld (nftables backend) running on the node. Its start and every
/// `firewall-cmd --reload` flush and delete the chains of the iptables and ebtables tables
/// (`ip filter`, `ip nat`, `bridge nat`, ... which iptables-nft and ebtables-nft keep in
/// nf_tables), where the firewall plugin's accept rules and macspoofchk (Go's layout) live;
/// rcni's own tables survive. The administrator puts the pod bridges in the
/// `trusted` zone (firewalld's own forward chain rejects everything else); after each
/// disruption `rcni repair` brings the pods back, and nothing is doubled.
#[test]
fn repair_after_firewalld_start_and_reload() {
    let Some(w) = World::new() else { return };
    assert_eq!(w.probe(), Health::ALL, "before firewalld");
    let counts = rcni_owned(&w.ruleset_counts());
    let Some(fw) = Firewalld::start(&w) else {
        return;
    };
    for bridge in ["rp0", "rp1"] {
        for scope in [&[][..], &["--permanent"][..]] {
            let mut args = vec!["--zone=trusted", "--add-interface", bridge];
            args.extend(scope);
            fw.cmd(&args).unwrap();
        }
    }
    // The accept rules (ip filter) and the spoof check (bridge nat, ebtables' table) are gone.
    let firewall_only = Health {
        host_port: false,
        egress_masquerade: false,
        isolation: true,
        spoof_check: false,
    };
    assert_eq!(w.probe(), firewall_only, "after firewalld started");
    assert!(w
        .check("web", &w.a)
        .is_some_and(|e| e.contains("rcni repair")));
    assert!(
        restored_any(&w.repair()),
        "nothing restored after firewalld's start"
    );
    assert_eq!(
        w.probe(),
        Health::ALL,
        "after repair with firewalld running"
    );
    assert_eq!(
        rcni_owned(&w.ruleset_counts()),
        counts,
        "after the first repair"
    );

    let started = Instant::now();
    fw.cmd(&["--reload"]).unwrap();
    eprintln!("firewall-cmd --reload took {:?}", started.elapsed());
    assert_eq!(w.probe(), firewall_only, "after firewall-cmd --reload");
    let report = w.repair();
    assert!(
        restored_any(&report),
        "nothing restored after the reload: {report:#}"
    );
    assert_eq!(w.probe(), Health::ALL, "after repair following the reload");
    for (net, pod) in rcni_pods(&w) {
        assert_eq!(
            w.check(net, pod),
            None,
            "CHECK {net} after the reload's repair"
        );
    }
    assert_eq!(
        rcni_owned(&w.ruleset_counts()),
        counts,
        "after the second repair"
    );
    assert!(
        !restored_any(&w.repair()),
        "a repair right after a repair restored something"
    );
}

/// An attachment whose netns is gone is reported and gets no rules back; the others are
/// repaired.
#[test]
fn an_attachment_whose_netns_is_gone_is_reported_not_repaired() {
    let Some(w) = World::new() else { return };
    let gone = w.sb.add_container().unwrap();
    let path = gone.path.display().to_string();
    w.add("other", &path, None);
    w.sb.remove_container(&gone).unwrap();
    w.host_sh("nft flush ruleset");
    let report = w.repair();
    let entry = attachments(&report)
        .iter()
        .find(|a| a["netns"] == path.as_str())
        .expect("the attachment is reported");
    assert!(
        entry["skipped"]
            .as_str()
            .is_some_and(|s| s.contains("gone")),
        "{entry:#}"
    );
    let cid = entry["containerId"].as_str().unwrap();
    assert!(
        !w.host_sh("nft list ruleset").contains(cid),
        "rules of {cid} came back"
    );
    assert_eq!(w.probe(), Health::ALL, "the live attachments were repaired");
}
