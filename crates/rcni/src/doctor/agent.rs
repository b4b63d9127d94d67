//! The node agent behind a network: a config whose plugins name `rcni-node`'s status file
//! (`rcniNodeStatus`) is only usable while that agent serves the node. An agent that cannot
//! reach or authenticate to etcd says why in its status file (the endpoint and the cause);
//! `rcni doctor` reports it with that reason, read the way the plugins' STATUS reads it.

use cni_plugins::common::node_status;
use cni_runtime::Network;

use super::Problem;

/// The networks whose node agent is down or unhealthy, each with the agent's reason.
pub fn problems(networks: &[Network]) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    for net in networks {
        for plugin in net.plugins() {
            if let Err(e) = node_status::check(plugin) {
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
