//! Every case of the data against the reference evaluator.

use super::*;

/// The upstream suite's ClusterNetworkPolicy tests (`ShortName`s of
/// kubernetes-sigs/network-policy-api `conformance/tests/`), every one ported.
const UPSTREAM: [&str; 24] = [
    "CNPAdminTierEgressInlineCIDRPeers",
    "CNPAdminTierEgressNamedPort",
    "CNPAdminTierEgressNodePeers",
    "CNPAdminTierEgressSCTP",
    "CNPAdminTierEgressTCP",
    "CNPAdminTierEgressUDP",
    "CNPAdminTierGress",
    "CNPAdminTierIngressNamedPort",
    "CNPAdminTierIngressSCTP",
    "CNPAdminTierIngressTCP",
    "CNPAdminTierIngressUDP",
    "CNPAdminTierIntegration",
    "CNPAdminTierPriorityField",
    "CNPBaselineTierEgressInlineCIDRPeers",
    "CNPBaselineTierEgressNamedPort",
    "CNPBaselineTierEgressNodePeers",
    "CNPBaselineTierEgressSCTP",
    "CNPBaselineTierEgressTCP",
    "CNPBaselineTierEgressUDP",
    "CNPBaselineTierGress",
    "CNPBaselineTierIngressNamedPort",
    "CNPBaselineTierIngressSCTP",
    "CNPBaselineTierIngressTCP",
    "CNPBaselineTierIngressUDP",
];

#[test]
fn every_upstream_test_is_ported_once() {
    let cases = cases().unwrap();
    let mut ported: Vec<&str> = cases
        .iter()
        .filter(|c| c.upstream.is_some())
        .map(|c| c.name.as_str())
        .collect();
    ported.sort();
    assert_eq!(ported, UPSTREAM);
}

#[test]
fn every_case_passes_on_the_reference_evaluator() {
    let model = model().unwrap();
    let mut failures = Vec::new();
    let mut probes = 0;
    for case in cases().unwrap() {
        probes += case.steps.iter().map(|s| s.probes.len()).sum::<usize>();
        match run_on_evaluator(&model, &case) {
            Ok(m) => failures.extend(m.iter().map(|m| format!("{}: {m}", case.name))),
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(probes > 300, "{probes} probes");
}

#[test]
fn every_probe_is_decided_by_the_evaluator_not_assumed() {
    // Each expectation reversed: every probe must then be a mismatch.
    let model = model().unwrap();
    for mut case in cases().unwrap() {
        let mut count = 0;
        for probe in case.steps.iter_mut().flat_map(|s| s.probes.iter_mut()) {
            probe.connect = !probe.connect;
            count += 1;
        }
        let m = run_on_evaluator(&model, &case).unwrap();
        assert_eq!(m.len(), count, "{}", case.name);
    }
}

#[test]
fn a_wrong_expectation_is_reported_with_the_deciding_rule() {
    let model = model().unwrap();
    let mut case = cases()
        .unwrap()
        .into_iter()
        .find(|c| c.name == "CNPAdminTierIngressTCP")
        .unwrap();
    case.steps.truncate(2);
    case.steps[1].probes[1].connect = true;
    let m = run_on_evaluator(&model, &case).unwrap();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(
        m[0].probe.to_string(),
        "cedric-diggory-1 -> harry-potter-1 TCP/8080 connect"
    );
    assert!(
        m[0].why.contains("deny-from-hufflepuff-everything-else"),
        "{}",
        m[0].why
    );
}

#[test]
fn probes_read_and_print_in_one_form() {
    let p: Probe = "a-0 -> b-1 SCTP/9003 drop".parse().unwrap();
    assert_eq!(
        (p.protocol, p.port, p.connect),
        (Protocol::Sctp, 9003, false)
    );
    assert_eq!(p.to_string(), "a-0 -> b-1 SCTP/9003 drop");
    assert!("a-0 -> b-1 ICMP/1 drop".parse::<Probe>().is_err());
    assert!("a-0 b-1 TCP/1 drop".parse::<Probe>().is_err());
    assert!("a-0 -> b-1 TCP/1 maybe".parse::<Probe>().is_err());
}

#[test]
fn changes_reorder_set_insert_and_delete_objects() {
    let model = model().unwrap();
    let case: Case = from_yaml("name: t\nmanifests: [integration.yaml]\nsteps: []\n").unwrap();
    let mut state = State::new(&model, &case).unwrap();
    assert_eq!(state.objects.len(), 3);
    let change = |s: &str| from_yaml::<Change>(s).unwrap();
    state
        .apply(&change(
            "set: {policy: pass-example, path: spec.ingress.0.action, value: Pass}",
        ))
        .unwrap();
    assert_eq!(state.objects[0]["spec"]["ingress"][0]["action"], "Pass");
    state
        .apply(&change("insert: {policy: default, list: spec.egress, at: 0, value: {action: Accept, to: [{networks: ['{{cidr harry-potter-0}}']}]}}"))
        .unwrap();
    state
        .apply(&change(
            "swap: {policy: default, list: spec.egress, items: [0, 1]}",
        ))
        .unwrap();
    assert_eq!(state.objects[2]["spec"]["egress"][1]["action"], "Accept");
    let addresses = Addresses::reference(&model, &state.pods);
    let docs = state.documents(&addresses).unwrap();
    let Document::ClusterNetworkPolicy(p) = &docs[2] else {
        panic!("{docs:?}")
    };
    let egress = p.spec.as_ref().unwrap().egress.as_ref().unwrap();
    let harry = addresses.0["harry-potter-0"];
    assert_eq!(
        egress[1].to.as_ref().unwrap()[0].networks,
        Some(vec![format!("{harry}/32")])
    );
    state
        .apply(&change("delete: {kind: NetworkPolicy, namespace: network-policy-conformance-gryffindor, name: allow-gress-from-to-slytherin-to-gryffindor}"))
        .unwrap();
    assert_eq!(state.objects.len(), 2);
    assert!(state
        .apply(&change(
            "swap: {policy: default, list: spec.egress, items: [0, 7]}"
        ))
        .is_err());
    assert!(state
        .apply(&change(
            "set: {policy: nothing, path: spec.priority, value: 1}"
        ))
        .is_err());
    // A host-network pod has its node's address.
    assert_eq!(
        addresses.of(&state, "centaur-1"),
        addresses.0.get("node-2").copied()
    );
}
