//! A ClusterNetworkPolicy checked as the API server checks it against the CRD of
//! kubernetes-sigs/network-policy-api (`config/crd/experimental/
//! policy.networking.k8s.io_clusternetworkpolicies.yaml`): its OpenAPI schema (required
//! fields, enumerations, minimum and maximum, item and property counts, lengths, sets) and its
//! CEL rules (`isCIDR`, a range's start below its end, no named port towards networks or
//! nodes), each error named and worded as `kubectl` prints it:
//! `spec.ingress[0].from[1]: Too many: 2: must have at most 1 items`.
//!
//! Two checks go further than the CRD, deliberately: label selectors are checked as
//! Kubernetes checks them in its own objects (operators, keys, values), because a selector
//! the evaluator cannot read would otherwise be stored and fail every decision; and
//! `domainNames` peers are refused, because rcni does not implement them.

use std::collections::BTreeSet;

use ipnet::IpNet;

use crate::validate::{label_value_problem, ErrorKind, Errors, FieldError};

use super::types::{
    ClusterNetworkPolicy, EgressPeer, IngressPeer, NamespacedPod, Port, ProtocolMatch, Spec,
};

/// The most rules in `spec.ingress` or `spec.egress`, peers in a rule, protocols in a rule and
/// CIDRs in a `networks` peer.
pub const MAX_ITEMS: usize = 25;
/// The highest (last evaluated) priority.
pub const MAX_PRIORITY: i64 = 1000;
/// The longest rule name.
pub const MAX_RULE_NAME: usize = 100;
/// The longest CIDR string.
pub const MAX_CIDR: usize = 43;

const TIERS: [&str; 2] = ["Admin", "Baseline"];
const ACTIONS: [&str; 3] = ["Accept", "Deny", "Pass"];

/// Every field error of `policy`; empty when the API server would accept it.
pub fn validate_cluster_policy(policy: &ClusterNetworkPolicy) -> Vec<FieldError> {
    let mut v = Errors::default();
    match policy.metadata.name.as_deref() {
        None | Some("") => v.required("metadata.name", "name or generateName is required"),
        Some(name) => v.dns_subdomain("metadata.name", name),
    }
    labels(&mut v, policy.metadata.labels.iter().flatten());
    match &policy.spec {
        None => v.required("spec", ""),
        Some(spec) => validate_spec(&mut v, spec),
    }
    v.0
}

fn labels<'a>(v: &mut Errors, labels: impl Iterator<Item = (&'a String, &'a String)>) {
    for (key, value) in labels {
        v.label_key("metadata.labels", key);
        if let Some(why) = label_value_problem(value) {
            v.invalid("metadata.labels".to_string(), value, why);
        }
    }
}

fn validate_spec(v: &mut Errors, spec: &Spec) {
    match spec.tier.as_deref() {
        None => v.required("spec.tier", ""),
        Some(t) if !TIERS.contains(&t) => v.push(
            "spec.tier".into(),
            ErrorKind::NotSupported(format!("{t:?}"), TIERS.to_vec()),
            "",
        ),
        Some(_) => {}
    }
    match spec.priority {
        None => v.required("spec.priority", ""),
        Some(p) => range(v, "spec.priority", p, 0, MAX_PRIORITY),
    }
    match &spec.subject {
        None => v.required("spec.subject", ""),
        Some(s) => {
            let at = "spec.subject";
            if one_of(v, at, [s.namespaces.is_some(), s.pods.is_some()]) {
                if let Some(sel) = &s.namespaces {
                    v.selector(&format!("{at}.namespaces"), sel);
                }
                if let Some(pods) = &s.pods {
                    namespaced_pod(v, &format!("{at}.pods"), pods);
                }
            }
        }
    }
    let ingress = spec.ingress.as_deref().unwrap_or_default();
    max_items(v, "spec.ingress", ingress.len());
    for (i, rule) in ingress.iter().enumerate() {
        let at = format!("spec.ingress[{i}]");
        rule_head(v, &at, rule.name.as_deref(), rule.action.as_deref());
        let peers = list(v, &format!("{at}.from"), rule.from.as_deref());
        for (k, peer) in peers.iter().enumerate() {
            ingress_peer(v, &format!("{at}.from[{k}]"), peer);
        }
        protocols(v, &at, rule.protocols.as_deref());
    }
    let egress = spec.egress.as_deref().unwrap_or_default();
    max_items(v, "spec.egress", egress.len());
    for (i, rule) in egress.iter().enumerate() {
        let at = format!("spec.egress[{i}]");
        rule_head(v, &at, rule.name.as_deref(), rule.action.as_deref());
        let peers = list(v, &format!("{at}.to"), rule.to.as_deref());
        for (k, peer) in peers.iter().enumerate() {
            egress_peer(v, &format!("{at}.to[{k}]"), peer);
        }
        protocols(v, &at, rule.protocols.as_deref());
        let addressed = peers
            .iter()
            .any(|p| p.networks.is_some() || p.nodes.is_some() || p.domain_names.is_some());
        let named = rule
            .protocols
            .iter()
            .flatten()
            .any(|p| p.destination_named_port.is_some());
        if addressed && named {
            cel(
                v,
                &at,
                "object",
                "networks/nodes/domainNames peer cannot be set with namedPorts since there are \
                 no namedPorts for networks/nodes/domainNames",
            );
        }
    }
}

/// A rule's `name` and `action`.
fn rule_head(v: &mut Errors, at: &str, name: Option<&str>, action: Option<&str>) {
    if name.is_some_and(|n| n.len() > MAX_RULE_NAME) {
        v.push(
            format!("{at}.name"),
            ErrorKind::TooLong { max: MAX_RULE_NAME },
            "",
        );
    }
    match action {
        None => v.required(&format!("{at}.action"), ""),
        Some(a) if !ACTIONS.contains(&a) => v.push(
            format!("{at}.action"),
            ErrorKind::NotSupported(format!("{a:?}"), ACTIONS.to_vec()),
            "",
        ),
        Some(_) => {}
    }
}

/// A required list of 1 to [`MAX_ITEMS`] items (`from`, `to`): its items, empty when absent.
fn list<'a, T>(v: &mut Errors, at: &str, items: Option<&'a [T]>) -> &'a [T] {
    match items {
        None => v.required(at, ""),
        Some(items) => min_max_items(v, at, items.len()),
    }
    items.unwrap_or_default()
}

fn ingress_peer(v: &mut Errors, at: &str, peer: &IngressPeer) {
    if !one_of(v, at, [peer.namespaces.is_some(), peer.pods.is_some()]) {
        return;
    }
    if let Some(sel) = &peer.namespaces {
        v.selector(&format!("{at}.namespaces"), sel);
    }
    if let Some(pods) = &peer.pods {
        namespaced_pod(v, &format!("{at}.pods"), pods);
    }
}

fn egress_peer(v: &mut Errors, at: &str, peer: &EgressPeer) {
    let fields = [
        peer.namespaces.is_some(),
        peer.pods.is_some(),
        peer.nodes.is_some(),
        peer.networks.is_some(),
        peer.domain_names.is_some(),
    ];
    if !one_of(v, at, fields) {
        return;
    }
    if let Some(sel) = &peer.namespaces {
        v.selector(&format!("{at}.namespaces"), sel);
    }
    if let Some(pods) = &peer.pods {
        namespaced_pod(v, &format!("{at}.pods"), pods);
    }
    if let Some(sel) = &peer.nodes {
        v.selector(&format!("{at}.nodes"), sel);
    }
    if let Some(networks) = &peer.networks {
        cidrs(v, &format!("{at}.networks"), networks);
    }
    if peer.domain_names.is_some() {
        v.push(
            format!("{at}.domainNames"),
            ErrorKind::Forbidden,
            "domain name peers are not supported by rcni",
        );
    }
}

fn cidrs(v: &mut Errors, at: &str, networks: &[String]) {
    min_max_items(v, at, networks.len());
    let mut seen = BTreeSet::new();
    for (i, cidr) in networks.iter().enumerate() {
        let here = format!("{at}[{i}]");
        if !seen.insert(cidr) {
            v.push(here.clone(), ErrorKind::Duplicate(format!("{cidr:?}")), "");
        }
        if cidr.len() > MAX_CIDR {
            v.push(here, ErrorKind::TooLong { max: MAX_CIDR }, "");
        } else if cidr.parse::<IpNet>().is_err() {
            cel(v, &here, "string", "Invalid CIDR format provided");
        }
    }
}

fn namespaced_pod(v: &mut Errors, at: &str, pods: &NamespacedPod) {
    if let Some(sel) = &pods.namespace_selector {
        v.selector(&format!("{at}.namespaceSelector"), sel);
    }
    match &pods.pod_selector {
        None => v.required(&format!("{at}.podSelector"), ""),
        Some(sel) => v.selector(&format!("{at}.podSelector"), sel),
    }
}

fn protocols(v: &mut Errors, rule: &str, protocols: Option<&[ProtocolMatch]>) {
    let Some(protocols) = protocols else {
        return;
    };
    let at = format!("{rule}.protocols");
    min_max_items(v, &at, protocols.len());
    for (i, p) in protocols.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let fields = [
            p.tcp.is_some(),
            p.udp.is_some(),
            p.sctp.is_some(),
            p.destination_named_port.is_some(),
        ];
        if !one_of(v, &here, fields) {
            continue;
        }
        for (name, ports) in [("tcp", &p.tcp), ("udp", &p.udp), ("sctp", &p.sctp)] {
            let Some(ports) = ports else { continue };
            let at = format!("{here}.{name}");
            match &ports.destination_port {
                None => min_properties(v, &at, 0),
                Some(port) => destination_port(v, &format!("{at}.destinationPort"), port),
            }
        }
    }
}

fn destination_port(v: &mut Errors, at: &str, port: &Port) {
    if !one_of(v, at, [port.number.is_some(), port.range.is_some()]) {
        return;
    }
    if let Some(n) = port.number {
        range(v, &format!("{at}.number"), n, 1, 65535);
    }
    if let Some(r) = &port.range {
        let at = format!("{at}.range");
        for (name, value) in [("start", r.start), ("end", r.end)] {
            match value {
                None => v.required(&format!("{at}.{name}"), ""),
                Some(n) => range(v, &format!("{at}.{name}"), n, 1, 65535),
            }
        }
        if let (Some(start), Some(end)) = (r.start, r.end) {
            if start >= end {
                cel(v, &at, "object", "Start port must be less than End port");
            }
        }
    }
}

/// An object of which exactly one field must be set (`minProperties: 1`,
/// `maxProperties: 1`); whether it holds.
fn one_of<const N: usize>(v: &mut Errors, at: &str, set: [bool; N]) -> bool {
    let count = set.iter().filter(|s| **s).count();
    match count {
        0 => min_properties(v, at, 0),
        1 => return true,
        n => v.push(at.to_string(), ErrorKind::TooMany { actual: n, max: 1 }, ""),
    }
    false
}

fn min_properties(v: &mut Errors, at: &str, count: usize) {
    v.invalid(
        at.to_string(),
        count,
        &format!("{at} in body should have at least 1 properties"),
    );
}

fn min_max_items(v: &mut Errors, at: &str, count: usize) {
    if count == 0 {
        v.invalid(
            at.to_string(),
            count,
            &format!("{at} in body should have at least 1 items"),
        );
    }
    max_items(v, at, count);
}

fn max_items(v: &mut Errors, at: &str, count: usize) {
    if count > MAX_ITEMS {
        let kind = ErrorKind::TooMany {
            actual: count,
            max: MAX_ITEMS,
        };
        v.push(at.to_string(), kind, "");
    }
}

/// The schema's `minimum` and `maximum`.
fn range(v: &mut Errors, at: &str, n: i64, min: i64, max: i64) {
    if n < min {
        let why = format!("{at} in body should be greater than or equal to {min}");
        v.invalid(at.to_string(), n, &why);
    } else if n > max {
        let why = format!("{at} in body should be less than or equal to {max}");
        v.invalid(at.to_string(), n, &why);
    }
}

/// A CEL rule that failed: the API server names the value by its type.
fn cel(v: &mut Errors, at: &str, type_name: &str, message: &str) {
    v.invalid(at.to_string(), type_name, message);
}

#[cfg(test)]
mod tests;
