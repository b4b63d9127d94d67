//! One rule of a policy in words, as the node agent names the rule that allowed a flow:
//! `ingress[0]: from pods: app=web in namespace shop; on TCP/8080`.

use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::effective::{
    describe_peer, ip_block, policy_namespace, raw_rules, resolve_ports, Direction, PortSpec,
};

/// Rule `index` of `policy`'s `direction`, or `None` when it has no such rule.
pub fn rule(policy: &NetworkPolicy, direction: Direction, index: usize) -> Option<String> {
    let (peers, ports) = raw_rules(policy, direction).into_iter().nth(index)?;
    let namespace = policy_namespace(policy);
    let (field, towards) = match direction {
        Direction::Ingress => ("ingress", "from"),
        Direction::Egress => ("egress", "to"),
    };
    let peers = match peers.filter(|p| !p.is_empty()) {
        None => format!("{towards} anywhere"),
        Some(list) => {
            let each: Vec<String> = list
                .iter()
                .map(|p| match &p.ip_block {
                    Some(block) => ip_block(block).map_or_else(
                        || format!("ipBlock {}", block.cidr),
                        |peer| peer.to_string(),
                    ),
                    None => describe_peer(p, namespace),
                })
                .collect();
            format!("{towards} {}", each.join(" or "))
        }
    };
    let ports = match resolve_ports(ports) {
        None => "any port".to_string(),
        Some(ps) => {
            let each: Vec<String> = ps.iter().map(port).collect();
            format!("on {}", each.join(", "))
        }
    };
    Some(format!("{field}[{index}]: {peers}; {ports}"))
}

fn port(p: &PortSpec) -> String {
    match p {
        PortSpec::Numbered {
            protocol,
            range: None,
        } => format!("{protocol} any port"),
        PortSpec::Numbered {
            protocol,
            range: Some((lo, hi)),
        } if lo == hi => format!("{protocol}/{lo}"),
        PortSpec::Numbered {
            protocol,
            range: Some((lo, hi)),
        } => format!("{protocol}/{lo}-{hi}"),
        PortSpec::Named { protocol, name } => format!("{protocol}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> NetworkPolicy {
        match crate::parse_documents(yaml).unwrap().remove(0) {
            crate::Document::NetworkPolicy(p) => *p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rules_in_words() {
        let p = policy(
            r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: frontend}}
    - ipBlock: {cidr: 198.18.0.0/16, except: [198.18.1.0/24]}
    ports:
    - {protocol: TCP, port: 8080}
    - {protocol: UDP, port: 5000, endPort: 5010}
  - {}
  egress:
  - to: [{namespaceSelector: {}}]
    ports: [{port: http}]
"#,
        );
        assert_eq!(
            rule(&p, Direction::Ingress, 0).unwrap(),
            "ingress[0]: from pods: app=frontend in namespace shop or ipBlock 198.18.0.0/16 \
             except 198.18.1.0/24; on TCP/8080, UDP/5000-5010"
        );
        assert_eq!(
            rule(&p, Direction::Ingress, 1).unwrap(),
            "ingress[1]: from anywhere; any port"
        );
        assert_eq!(
            rule(&p, Direction::Egress, 0).unwrap(),
            "egress[0]: to any pod in any namespace; on TCP/http"
        );
        assert_eq!(rule(&p, Direction::Ingress, 2), None);
    }
}
