//! One test per rule of the CRD: each invalid field named and worded as the API server does.

use super::*;
use crate::objects::{parse_documents, Document};

fn policy(spec: &str) -> ClusterNetworkPolicy {
    let text = format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {{name: p}}\nspec:\n{spec}"
    );
    match parse_documents(&text).unwrap().remove(0) {
        Document::ClusterNetworkPolicy(p) => *p,
        other => panic!("{other:?}"),
    }
}

fn errors(spec: &str) -> Vec<String> {
    validate_cluster_policy(&policy(spec))
        .iter()
        .map(|e| e.to_string())
        .collect()
}

/// `spec` with a valid head and `rules` after it.
fn with_rules(rules: &str) -> Vec<String> {
    errors(&format!(
        "  tier: Admin\n  priority: 1\n  subject: {{namespaces: {{}}}}\n{rules}"
    ))
}

#[test]
fn a_valid_policy_has_no_errors() {
    let e = errors(
        r#"  tier: Baseline
  priority: 1000
  subject:
    pods:
      namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a, b]}]}
      podSelector: {matchLabels: {app: web}}
  ingress:
  - name: from-monitoring
    action: Accept
    from:
    - namespaces: {matchLabels: {team: monitoring}}
    - pods: {podSelector: {}}
    protocols:
    - tcp: {destinationPort: {number: 8080}}
    - udp: {destinationPort: {range: {start: 5000, end: 5010}}}
    - destinationNamedPort: metrics
  egress:
  - action: Deny
    to:
    - networks: [169.254.169.254/32, "fd00::/8"]
    - nodes: {matchLabels: {kubernetes.io/os: linux}}
    protocols: [{sctp: {destinationPort: {number: 9003}}}]
  - action: Pass
    to: [{pods: {namespaceSelector: {}, podSelector: {}}}]
"#,
    );
    assert_eq!(e, Vec::<String>::new());
}

#[test]
fn spec_name_and_the_required_head_fields() {
    let text = "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {labels: {bad/key/x: v}}\n";
    let Document::ClusterNetworkPolicy(p) = parse_documents(text).unwrap().remove(0) else {
        unreachable!()
    };
    let e: Vec<String> = validate_cluster_policy(&p)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(e.len(), 3, "{e:#?}");
    assert_eq!(
        e[0],
        "metadata.name: Required value: name or generateName is required"
    );
    assert!(
        e[1].starts_with("metadata.labels: Invalid value: \"bad/key/x\""),
        "{}",
        e[1]
    );
    assert_eq!(e[2], "spec: Required value");
    assert_eq!(
        errors("  ingress: []\n"),
        [
            "spec.tier: Required value",
            "spec.priority: Required value",
            "spec.subject: Required value"
        ]
    );
}

#[test]
fn tier_is_admin_or_baseline_and_priority_is_0_to_1000() {
    assert_eq!(
        errors("  tier: admin\n  priority: 1001\n  subject: {namespaces: {}}\n"),
        [
            "spec.tier: Unsupported value: \"admin\": supported values: \"Admin\", \"Baseline\"",
            "spec.priority: Invalid value: 1001: spec.priority in body should be less than or equal to 1000",
        ]
    );
    assert_eq!(
        errors("  tier: Admin\n  priority: -1\n  subject: {namespaces: {}}\n"),
        ["spec.priority: Invalid value: -1: spec.priority in body should be greater than or equal to 0"]
    );
    assert_eq!(
        errors("  tier: Admin\n  priority: 0\n  subject: {namespaces: {}}\n"),
        Vec::<String>::new()
    );
}

#[test]
fn the_subject_has_exactly_one_field_and_pods_need_a_pod_selector() {
    let head = "  tier: Admin\n  priority: 1\n";
    assert_eq!(
        errors(&format!("{head}  subject: {{}}\n")),
        ["spec.subject: Invalid value: 0: spec.subject in body should have at least 1 properties"]
    );
    assert_eq!(
        errors(&format!(
            "{head}  subject: {{namespaces: {{}}, pods: {{podSelector: {{}}}}}}\n"
        )),
        ["spec.subject: Too many: 2: must have at most 1 items"]
    );
    assert_eq!(
        errors(&format!(
            "{head}  subject: {{pods: {{namespaceSelector: {{}}}}}}\n"
        )),
        ["spec.subject.pods.podSelector: Required value"]
    );
}

#[test]
fn selectors_are_checked_as_kubernetes_checks_them() {
    let e = with_rules(
        "  ingress:\n  - action: Deny\n    from: [{namespaces: {matchExpressions: [{key: team, operator: Like, values: [a]}]}}]\n",
    );
    assert_eq!(
        e,
        ["spec.ingress[0].from[0].namespaces.matchExpressions[0].operator: Invalid value: \"Like\": not a valid selector operator"]
    );
    let e = errors(
        "  tier: Admin\n  priority: 1\n  subject: {pods: {podSelector: {matchExpressions: [{key: app, operator: In}]}}}\n",
    );
    assert_eq!(
        e,
        ["spec.subject.pods.podSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"]
    );
}

#[test]
fn rules_need_an_action_of_the_enum_and_peers() {
    let e = with_rules(
        "  ingress:\n  - {action: Allow, from: [{namespaces: {}}]}\n  - {from: [{namespaces: {}}]}\n  - {action: Deny}\n  - {action: Deny, from: []}\n  egress:\n  - {action: Pass}\n",
    );
    assert_eq!(
        e,
        [
            "spec.ingress[0].action: Unsupported value: \"Allow\": supported values: \"Accept\", \"Deny\", \"Pass\"",
            "spec.ingress[1].action: Required value",
            "spec.ingress[2].from: Required value",
            "spec.ingress[3].from: Invalid value: 0: spec.ingress[3].from in body should have at least 1 items",
            "spec.egress[0].to: Required value",
        ]
    );
}

#[test]
fn at_most_25_rules_peers_protocols_and_networks() {
    let rule = "  - {action: Deny, from: [{namespaces: {}}]}\n";
    let e = with_rules(&format!("  ingress:\n{}", rule.repeat(26)));
    assert_eq!(
        e,
        ["spec.ingress: Too many: 26: must have at most 25 items"]
    );
    let peers = vec!["{namespaces: {}}"; 26].join(", ");
    let ports = vec!["{tcp: {destinationPort: {number: 80}}}"; 26].join(", ");
    let nets: Vec<String> = (0..26).map(|i| format!("198.18.{i}.0/24")).collect();
    let e = with_rules(&format!(
        "  egress:\n  - {{action: Deny, to: [{peers}], protocols: [{ports}]}}\n  - {{action: Deny, to: [{{networks: [{}]}}]}}\n",
        nets.join(", ")
    ));
    assert_eq!(
        e,
        [
            "spec.egress[0].to: Too many: 26: must have at most 25 items",
            "spec.egress[0].protocols: Too many: 26: must have at most 25 items",
            "spec.egress[1].to[0].networks: Too many: 26: must have at most 25 items",
        ]
    );
}

#[test]
fn a_rule_name_is_at_most_100_bytes() {
    let long = "r".repeat(101);
    let e = with_rules(&format!(
        "  ingress:\n  - {{name: {long}, action: Deny, from: [{{namespaces: {{}}}}]}}\n  - {{name: {}, action: Deny, from: [{{namespaces: {{}}}}]}}\n",
        "r".repeat(100)
    ));
    assert_eq!(
        e,
        ["spec.ingress[0].name: Too long: may not be more than 100 bytes"]
    );
}

#[test]
fn a_peer_has_exactly_one_field() {
    let e = with_rules(
        "  ingress:\n  - action: Deny\n    from: [{}, {namespaces: {}, pods: {podSelector: {}}}]\n  egress:\n  - action: Deny\n    to: [{namespaces: {}, networks: [198.18.0.0/15], nodes: {}}]\n",
    );
    assert_eq!(
        e,
        [
            "spec.ingress[0].from[0]: Invalid value: 0: spec.ingress[0].from[0] in body should have at least 1 properties",
            "spec.ingress[0].from[1]: Too many: 2: must have at most 1 items",
            "spec.egress[0].to[0]: Too many: 3: must have at most 1 items",
        ]
    );
}

#[test]
fn networks_and_nodes_are_egress_peers_only() {
    // The ingress peer declares neither: the document is refused before validation.
    let text = "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: p}\nspec:\n  tier: Admin\n  priority: 1\n  subject: {namespaces: {}}\n  ingress: [{action: Deny, from: [{networks: [198.18.0.0/15]}, {nodes: {}}]}]\n";
    let e = parse_documents(text).unwrap_err().to_string();
    assert!(
        e.ends_with(
            "strict decoding error: unknown field \"spec.ingress[0].from[0].networks\", unknown field \"spec.ingress[0].from[1].nodes\""
        ),
        "{e}"
    );
}

#[test]
fn networks_are_cidrs_of_at_most_43_bytes_without_repeats() {
    let e = with_rules(
        "  egress:\n  - action: Deny\n    to: [{networks: [198.18.0.0/15, 198.18.0.0/15, 198.18.0.0, 300.0.0.0/8, \"2001:db8:1234:5678:9abc:def0:1234:5678:1/128\", \"fd00::/8\"]}]\n  - {action: Deny, to: [{networks: []}]}\n",
    );
    assert_eq!(
        e,
        [
            "spec.egress[0].to[0].networks[1]: Duplicate value: \"198.18.0.0/15\"",
            "spec.egress[0].to[0].networks[2]: Invalid value: \"string\": Invalid CIDR format provided",
            "spec.egress[0].to[0].networks[3]: Invalid value: \"string\": Invalid CIDR format provided",
            "spec.egress[0].to[0].networks[4]: Too long: may not be more than 43 bytes",
            "spec.egress[1].to[0].networks: Invalid value: 0: spec.egress[1].to[0].networks in body should have at least 1 items",
        ]
    );
}

#[test]
fn domain_names_are_refused_as_not_supported() {
    let e = with_rules(
        "  egress:\n  - action: Accept\n    to: [{domainNames: [\"*.kubernetes.io\"]}]\n",
    );
    assert_eq!(
        e,
        ["spec.egress[0].to[0].domainNames: Forbidden: domain name peers are not supported by rcni"]
    );
}

#[test]
fn protocols_have_one_field_and_ports_one_number_or_range() {
    let e = with_rules(
        r#"  ingress:
  - action: Deny
    from: [{namespaces: {}}]
    protocols:
    - {}
    - {tcp: {destinationPort: {number: 80}}, udp: {destinationPort: {number: 53}}}
    - {tcp: {}}
    - {udp: {destinationPort: {}}}
    - {sctp: {destinationPort: {number: 9003, range: {start: 1, end: 2}}}}
    - {tcp: {destinationPort: {number: 0}}}
    - {udp: {destinationPort: {number: 65536}}}
  - {action: Deny, from: [{namespaces: {}}], protocols: []}
"#,
    );
    let at = "spec.ingress[0].protocols";
    assert_eq!(
        e,
        [
            format!("{at}[0]: Invalid value: 0: {at}[0] in body should have at least 1 properties"),
            format!("{at}[1]: Too many: 2: must have at most 1 items"),
            format!("{at}[2].tcp: Invalid value: 0: {at}[2].tcp in body should have at least 1 properties"),
            format!("{at}[3].udp.destinationPort: Invalid value: 0: {at}[3].udp.destinationPort in body should have at least 1 properties"),
            format!("{at}[4].sctp.destinationPort: Too many: 2: must have at most 1 items"),
            format!("{at}[5].tcp.destinationPort.number: Invalid value: 0: {at}[5].tcp.destinationPort.number in body should be greater than or equal to 1"),
            format!("{at}[6].udp.destinationPort.number: Invalid value: 65536: {at}[6].udp.destinationPort.number in body should be less than or equal to 65535"),
            "spec.ingress[1].protocols: Invalid value: 0: spec.ingress[1].protocols in body should have at least 1 items".to_string(),
        ]
    );
}

#[test]
fn a_range_starts_below_its_end_within_the_port_numbers() {
    let e = with_rules(
        "  ingress:\n  - action: Deny\n    from: [{namespaces: {}}]\n    protocols:\n    - {tcp: {destinationPort: {range: {start: 90, end: 80}}}}\n    - {tcp: {destinationPort: {range: {start: 80, end: 80}}}}\n    - {udp: {destinationPort: {range: {end: 70000}}}}\n",
    );
    let at = "spec.ingress[0].protocols";
    assert_eq!(
        e,
        [
            format!("{at}[0].tcp.destinationPort.range: Invalid value: \"object\": Start port must be less than End port"),
            format!("{at}[1].tcp.destinationPort.range: Invalid value: \"object\": Start port must be less than End port"),
            format!("{at}[2].udp.destinationPort.range.start: Required value"),
            format!("{at}[2].udp.destinationPort.range.end: Invalid value: 70000: {at}[2].udp.destinationPort.range.end in body should be less than or equal to 65535"),
        ]
    );
}

#[test]
fn no_named_port_towards_networks_or_nodes() {
    let e = with_rules(
        "  egress:\n  - action: Accept\n    to: [{pods: {podSelector: {}}}, {nodes: {}}]\n    protocols: [{destinationNamedPort: web}]\n  - action: Accept\n    to: [{pods: {podSelector: {}}}]\n    protocols: [{destinationNamedPort: web}]\n  - action: Accept\n    to: [{networks: [198.18.0.0/15]}]\n    protocols: [{tcp: {destinationPort: {number: 80}}}]\n",
    );
    assert_eq!(
        e,
        ["spec.egress[0]: Invalid value: \"object\": networks/nodes/domainNames peer cannot be set with namedPorts since there are no namedPorts for networks/nodes/domainNames"]
    );
}
