//! The node agent behind a network: a config whose plugins name `rcni-node`'s status file
//! (`rcniNodeStatus`) is only usable while that agent serves the node. An agent that cannot
//! reach or authenticate to etcd says why in its status file (the endpoint and the cause);
//! `rcni doctor` reports it with that reason, read the way the plugins' STATUS reads it.

use cni_runtime::Network;
use cni_types::node_agent;

use super::Problem;

/// The networks whose node agent is down or unhealthy, each with the agent's reason.
pub fn problems(networks: &[Network]) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    for net in networks {
        for plugin in net.plugins() {
            if let Err(e) = node_agent::check(plugin) {
                let why = format!("STATUS {}: {}", e.code, e.msg);
                if !out.iter().any(|p| p.why == why) {
                    out.push(Problem {
                        object: format!("network {} (node agent)", net.name()),
                        why,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unhealthy_agent_is_reported_with_its_reason_and_a_healthy_one_not() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("node-status.json");
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "rcni",
            "plugins": [
                {"type": "bridge", "rcniNodeStatus": status, "rcniNodeName": "node1"},
                {"type": "portmap"}
            ]
        });
        let net = Network::from_list_bytes(conf.to_string().as_bytes()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let reason =
            "datastore unreachable for 12 s: etcd https://198.18.0.2:2379: authentication failed";
        let write = |healthy: bool| {
            let v = serde_json::json!({"healthy": healthy, "reason": reason, "until": now + 10, "node": "node1"});
            std::fs::write(&status, v.to_string()).unwrap();
        };
        write(false);
        let found = problems(std::slice::from_ref(&net));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].object, "network rcni (node agent)");
        assert!(found[0].why.starts_with("STATUS 50: "), "{}", found[0].why);
        assert!(found[0].why.contains(reason), "{}", found[0].why);
        write(true);
        assert!(problems(&[net]).is_empty());
    }
}
