//! The API server's validation of a NetworkPolicy (kubernetes/kubernetes
//! `pkg/apis/networking/validation/validation.go`), with its field paths and message shapes, so
//! that `rcni policy apply` refuses what `kubectl apply` would and says it the same way.

use std::fmt;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One invalid field, printed as Kubernetes prints a `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub kind: ErrorKind,
    pub detail: String,
}

/// The kinds of field errors Kubernetes reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Forbidden,
    /// The offending value, already rendered (`"x"` for strings, `10` for numbers).
    Invalid(String),
    /// The offending value and the supported ones.
    NotSupported(String, Vec<&'static str>),
    /// A list (or object) with `actual` items where at most `max` are allowed.
    TooMany {
        actual: usize,
        max: usize,
    },
    /// A string longer than `max` bytes.
    TooLong {
        max: usize,
    },
    /// A value repeated in a list that is a set, already rendered.
    Duplicate(String),
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_detail = |f: &mut fmt::Formatter<'_>, head: &str| {
            if self.detail.is_empty() {
                write!(f, "{}: {head}", self.field)
            } else {
                write!(f, "{}: {head}: {}", self.field, self.detail)
            }
        };
        match &self.kind {
            ErrorKind::Required => with_detail(f, "Required value"),
            ErrorKind::Forbidden => with_detail(f, "Forbidden"),
            ErrorKind::Invalid(v) => with_detail(f, &format!("Invalid value: {v}")),
            ErrorKind::NotSupported(v, supported) => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "{}: Unsupported value: {v}: supported values: {}",
                    self.field,
                    list.join(", ")
                )
            }
            ErrorKind::TooMany { actual, max } => {
                write!(
                    f,
                    "{}: Too many: {actual}: must have at most {max} items",
                    self.field
                )
            }
            ErrorKind::TooLong { max } => {
                with_detail(f, &format!("Too long: may not be more than {max} bytes"))
            }
            ErrorKind::Duplicate(v) => with_detail(f, &format!("Duplicate value: {v}")),
        }
    }
}

/// Every field error of `policy`; empty when the API server would accept it.
pub fn validate_policy(policy: &NetworkPolicy) -> Vec<FieldError> {
    let mut v = Errors::default();
    match policy.metadata.name.as_deref() {
        None | Some("") => v.required("metadata.name", "name or generateName is required"),
        Some(name) => v.dns_subdomain("metadata.name", name),
    }
    if let Some(ns) = policy.metadata.namespace.as_deref() {
        v.dns_label("metadata.namespace", ns);
    }
    let Some(spec) = &policy.spec else {
        return v.0;
    };
    if let Some(sel) = &spec.pod_selector {
        v.selector("spec.podSelector", sel);
    }
    for (i, rule) in spec.ingress.iter().flatten().enumerate() {
        let at = format!("spec.ingress[{i}]");
        v.ports(&at, rule.ports.as_deref());
        v.peers(&format!("{at}.from"), rule.from.as_deref());
    }
    for (i, rule) in spec.egress.iter().flatten().enumerate() {
        let at = format!("spec.egress[{i}]");
        v.ports(&at, rule.ports.as_deref());
        v.peers(&format!("{at}.to"), rule.to.as_deref());
    }
    let types = spec.policy_types.as_deref().unwrap_or_default();
    for (i, t) in types.iter().enumerate() {
        if t != "Ingress" && t != "Egress" {
            v.push(
                format!("spec.policyTypes[{i}]"),
                ErrorKind::NotSupported(format!("{t:?}"), vec!["Egress", "Ingress"]),
                "",
            );
        }
    }
    if types.len() > 2 {
        v.push(
            "spec.policyTypes".into(),
            ErrorKind::Invalid(format!("{types:?}")),
            "may not specify more than two policyTypes",
        );
    }
    v.0
}

/// Field errors as they are found; the validators of other objects (ClusterNetworkPolicy)
/// share its checks of names, labels and selectors.
#[derive(Default)]
pub(crate) struct Errors(pub(crate) Vec<FieldError>);

impl Errors {
    pub(crate) fn push(&mut self, field: String, kind: ErrorKind, detail: &str) {
        self.0.push(FieldError {
            field,
            kind,
            detail: detail.to_string(),
        });
    }

    pub(crate) fn required(&mut self, field: &str, detail: &str) {
        self.push(field.to_string(), ErrorKind::Required, detail);
    }

    pub(crate) fn invalid(&mut self, field: String, value: impl fmt::Debug, detail: &str) {
        self.push(field, ErrorKind::Invalid(format!("{value:?}")), detail);
    }

    fn ports(&mut self, rule: &str, ports: Option<&[NetworkPolicyPort]>) {
        for (j, port) in ports.unwrap_or_default().iter().enumerate() {
            self.port(&format!("{rule}.ports[{j}]"), port);
        }
    }

    fn port(&mut self, at: &str, port: &NetworkPolicyPort) {
        if let Some(proto) = &port.protocol {
            if !["TCP", "UDP", "SCTP"].contains(&proto.as_str()) {
                self.push(
                    format!("{at}.protocol"),
                    ErrorKind::NotSupported(format!("{proto:?}"), vec!["SCTP", "TCP", "UDP"]),
                    "",
                );
            }
        }
        let end = format!("{at}.endPort");
        match (&port.port, port.end_port) {
            (Some(IntOrString::Int(n)), end_port) => {
                if !(1..=65535).contains(n) {
                    self.invalid(format!("{at}.port"), n, PORT_RANGE);
                }
                if let Some(e) = end_port {
                    if !(1..=65535).contains(&e) {
                        self.invalid(end.clone(), e, PORT_RANGE);
                    }
                    if e < *n {
                        self.invalid(end, e, "must be greater than or equal to `port`");
                    }
                }
            }
            (Some(IntOrString::String(name)), end_port) => {
                if let Some(e) = end_port {
                    self.invalid(end, e, "may not be specified when `port` is non-numeric");
                }
                if let Some(why) = port_name_problem(name) {
                    self.invalid(format!("{at}.port"), name, why);
                }
            }
            (None, Some(e)) => {
                self.invalid(end, e, "may not be specified when `port` is not specified")
            }
            (None, None) => {}
        }
    }

    fn peers(&mut self, at: &str, peers: Option<&[NetworkPolicyPeer]>) {
        for (k, peer) in peers.unwrap_or_default().iter().enumerate() {
            let here = format!("{at}[{k}]");
            let mut count = 0;
            if let Some(sel) = &peer.pod_selector {
                count += 1;
                self.selector(&format!("{here}.podSelector"), sel);
            }
            if let Some(sel) = &peer.namespace_selector {
                count += 1;
                self.selector(&format!("{here}.namespaceSelector"), sel);
            }
            if let Some(block) = &peer.ip_block {
                count += 1;
                self.ip_block(&format!("{here}.ipBlock"), block);
            }
            if count == 0 {
                self.required(&here, "must specify a peer");
            } else if peer.ip_block.is_some() && count > 1 {
                self.push(
                    here,
                    ErrorKind::Forbidden,
                    "may not specify both ipBlock and another peer",
                );
            }
        }
    }

    fn ip_block(&mut self, at: &str, block: &IPBlock) {
        let cidr_at = format!("{at}.cidr");
        if block.cidr.is_empty() {
            self.required(&cidr_at, "");
            return;
        }
        let Ok(cidr) = block.cidr.parse::<IpNet>() else {
            self.invalid(cidr_at, &block.cidr, CIDR_HINT);
            return;
        };
        for (i, except) in block.except.iter().flatten().enumerate() {
            let except_at = format!("{at}.except[{i}]");
            match except.parse::<IpNet>() {
                Err(_) => self.invalid(except_at, except, CIDR_HINT),
                Ok(e) if !(cidr.contains(&e) && e.prefix_len() > cidr.prefix_len()) => {
                    self.invalid(except_at, except, "must be a strict subset of `cidr`")
                }
                Ok(_) => {}
            }
        }
    }

    pub(crate) fn selector(&mut self, at: &str, sel: &LabelSelector) {
        for (key, value) in sel.match_labels.iter().flatten() {
            self.label_key(&format!("{at}.matchLabels"), key);
            if let Some(why) = label_value_problem(value) {
                self.invalid(format!("{at}.matchLabels"), value, why);
            }
        }
        for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
            let here = format!("{at}.matchExpressions[{i}]");
            self.label_key(&format!("{here}.key"), &req.key);
            let values = req.values.as_deref().unwrap_or_default();
            match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => self.required(
                    &format!("{here}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ),
                "Exists" | "DoesNotExist" if !values.is_empty() => self.push(
                    format!("{here}.values"),
                    ErrorKind::Forbidden,
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => self.invalid(
                    format!("{here}.operator"),
                    other,
                    "not a valid selector operator",
                ),
            }
        }
    }

    pub(crate) fn label_key(&mut self, at: &str, key: &str) {
        let (prefix, name) = match key.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, key),
        };
        let bad_prefix = prefix.is_some_and(|p| dns_subdomain_problem(p).is_some());
        if bad_prefix || label_value_problem(name).is_some() || name.is_empty() {
            self.invalid(
                at.to_string(),
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
                 start and end with an alphanumeric character (with an optional DNS subdomain \
                 prefix and '/')",
            );
        }
    }

    pub(crate) fn dns_subdomain(&mut self, at: &str, name: &str) {
        if let Some(why) = dns_subdomain_problem(name) {
            self.invalid(at.to_string(), name, why);
        }
    }

    fn dns_label(&mut self, at: &str, name: &str) {
        if name.len() > 63 || !dns_label_ok(name) {
            self.invalid(
                at.to_string(),
                name,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character",
            );
        }
    }
}

/// Every field error of `namespace` (its name and labels, what the layout and the policies
/// use of it); empty when the API server would accept them.
pub fn validate_namespace(namespace: &Namespace) -> Vec<FieldError> {
    let mut v = Errors::default();
    match namespace.metadata.name.as_deref() {
        None | Some("") => v.required("metadata.name", "name or generateName is required"),
        Some(name) => v.dns_label("metadata.name", name),
    }
    for (key, value) in namespace.metadata.labels.iter().flatten() {
        v.label_key("metadata.labels", key);
        if let Some(why) = label_value_problem(value) {
            v.invalid("metadata.labels".to_string(), value, why);
        }
    }
    v.0
}

/// Why `key=value` is not a valid Kubernetes label, if it is not.
pub fn label_problem(key: &str, value: &str) -> Option<String> {
    let mut e = Errors::default();
    e.label_key("key", key);
    if let Some(first) = e.0.first() {
        return Some(format!("invalid key {key:?}: {}", first.detail));
    }
    label_value_problem(value).map(|why| format!("invalid value {value:?}: {why}"))
}

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const CIDR_HINT: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn dns_label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn dns_subdomain_problem(s: &str) -> Option<&'static str> {
    if s.len() > 253 || !s.split('.').all(dns_label_ok) {
        return Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character",
        );
    }
    None
}

/// Label values: empty, or up to 63 of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub(crate) fn label_value_problem(v: &str) -> Option<&'static str> {
    let b = v.as_bytes();
    let ok = b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric());
    (!ok).then_some(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
         or '.', and must start and end with an alphanumeric character",
    )
}

/// An IANA service name (RFC 6335) as Kubernetes checks named ports.
fn port_name_problem(name: &str) -> Option<&'static str> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        return Some("must not contain consecutive hyphens");
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Some("must not begin or end with a hyphen");
    }
    if !b.iter().any(u8::is_ascii_lowercase) {
        return Some("must contain at least one letter (a-z)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{parse_documents, Document};

    fn errors(yaml_spec: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: x}}\nspec:\n{yaml_spec}"
        );
        let Document::NetworkPolicy(p) = parse_documents(&text).unwrap().remove(0) else {
            unreachable!()
        };
        validate_policy(&p).iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn a_valid_policy_has_no_errors() {
        let e = errors(
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress, Egress]\n  ingress:\n  - from:\n    - namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: [x, y]}]}\n      podSelector: {}\n    - ipBlock: {cidr: 198.18.0.0/16, except: [198.18.1.0/24]}\n    ports: [{protocol: TCP, port: 80, endPort: 81}, {port: http}]\n  egress:\n  - to: [{podSelector: {matchLabels: {pod: b}}}]\n",
        );
        assert_eq!(e, Vec::<String>::new());
    }

    #[test]
    fn port_errors_name_the_field_as_kubernetes_does() {
        let e = errors(
            "  podSelector: {}\n  ingress:\n  - ports:\n    - {protocol: ICMP, port: 80}\n    - {port: 90, endPort: 80}\n    - {port: web, endPort: 81}\n    - {endPort: 81}\n    - {port: 70000}\n    - {port: Web--x}\n",
        );
        assert_eq!(
            e,
            [
                "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.ingress[0].ports[1].endPort: Invalid value: 80: must be greater than or equal to `port`",
                "spec.ingress[0].ports[2].endPort: Invalid value: 81: may not be specified when `port` is non-numeric",
                "spec.ingress[0].ports[3].endPort: Invalid value: 81: may not be specified when `port` is not specified",
                "spec.ingress[0].ports[4].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.ingress[0].ports[5].port: Invalid value: \"Web--x\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
            ]
        );
    }

    #[test]
    fn peer_and_ip_block_errors() {
        let e = errors(
            "  podSelector: {}\n  egress:\n  - to:\n    - {}\n    - ipBlock: {cidr: 198.18.0.0/16}\n      podSelector: {}\n    - ipBlock: {cidr: 198.18.0.0/16, except: [198.19.0.0/24, 198.18.0.0/16, nonsense]}\n    - ipBlock: {cidr: 300.1.1.1/8}\n",
        );
        assert_eq!(
            e,
            [
                "spec.egress[0].to[0]: Required value: must specify a peer",
                "spec.egress[0].to[1]: Forbidden: may not specify both ipBlock and another peer",
                "spec.egress[0].to[2].ipBlock.except[0]: Invalid value: \"198.19.0.0/24\": must be a strict subset of `cidr`",
                "spec.egress[0].to[2].ipBlock.except[1]: Invalid value: \"198.18.0.0/16\": must be a strict subset of `cidr`",
                "spec.egress[0].to[2].ipBlock.except[2]: Invalid value: \"nonsense\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                "spec.egress[0].to[3].ipBlock.cidr: Invalid value: \"300.1.1.1/8\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ]
        );
    }

    #[test]
    fn selector_and_policy_type_errors() {
        let e = errors(
            "  podSelector:\n    matchExpressions:\n    - {key: pod, operator: In}\n    - {key: pod, operator: Exists, values: [a]}\n    - {key: pod, operator: Like, values: [a]}\n    - {key: -bad, operator: Exists}\n  policyTypes: [Ingress, Sideways]\n",
        );
        assert_eq!(e.len(), 5, "{e:#?}");
        assert_eq!(e[0], "spec.podSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'");
        assert_eq!(e[1], "spec.podSelector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'");
        assert_eq!(e[2], "spec.podSelector.matchExpressions[2].operator: Invalid value: \"Like\": not a valid selector operator");
        assert!(
            e[3].starts_with("spec.podSelector.matchExpressions[3].key: Invalid value: \"-bad\": "),
            "{}",
            e[3]
        );
        assert_eq!(e[4], "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\"");
    }

    #[test]
    fn metadata_errors() {
        let text = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: Bad_NS}\nspec: {podSelector: {}}\n";
        let Document::NetworkPolicy(p) = parse_documents(text).unwrap().remove(0) else {
            unreachable!()
        };
        let e: Vec<String> = validate_policy(&p).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            e[0],
            "metadata.name: Required value: name or generateName is required"
        );
        assert!(
            e[1].starts_with("metadata.namespace: Invalid value: \"Bad_NS\": "),
            "{e:?}"
        );
    }
}
