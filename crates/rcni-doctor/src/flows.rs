//! What the node agent saw denied lately: for each network whose node agent keeps a state
//! directory (its status file's, `rcniNodeStatus`), the most frequent denied pairs of the
//! last minutes from the agent's flow socket, with the policies that denied them. Denied
//! connections are not faults of the node (a policy may deny on purpose), so they never make
//! the inspection fail; they are what to look at when a connection does not work.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_runtime::Network;
use cni_types::node_agent;
use rcni_flows::{denied_pairs, Agent, DeniedPair, Filter};
use serde_json::{json, Value};

/// How far back the pairs go.
pub const WINDOW: Duration = Duration::from_secs(10 * 60);
/// How many pairs are listed.
const TOP: usize = 10;
/// How long the agent may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The denied pairs one agent reported, or why it could not.
pub struct AgentPairs {
    pub agent: String,
    pub pairs: Result<Vec<DeniedPair>, String>,
}

/// The flow socket of each node agent the networks name, once each.
fn agents(networks: &[Network]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for net in networks {
        for plugin in net.plugins() {
            let Ok(Some(status)) = plugin.decode::<String>(node_agent::KEY) else {
                continue;
            };
            let Some(dir) = Path::new(&status).parent() else {
                continue;
            };
            let socket = dir.join(cni_attribution::names::NODE_FLOWS_SOCKET);
            if !out.contains(&socket) {
                out.push(socket);
            }
        }
    }
    out
}

/// The denied pairs of the last [`WINDOW`] from every agent whose socket exists.
pub fn audit(networks: &[Network]) -> Vec<AgentPairs> {
    let filter = Filter {
        denied: true,
        since: Some(WINDOW),
        ..Filter::default()
    };
    agents(networks)
        .into_iter()
        .filter(|socket| socket.exists())
        .map(|socket| {
            let agent = Agent::Socket(socket);
            let pairs = agent
                .flows(&filter, TIMEOUT)
                .map(|flows| denied_pairs(&flows, TOP))
                .map_err(|e| e.to_string());
            AgentPairs {
                agent: agent.describe(),
                pairs,
            }
        })
        .collect()
}

pub fn print(found: &[AgentPairs]) {
    for a in found {
        match &a.pairs {
            Err(why) => println!("denied connections: cannot ask the node agent: {why}"),
            Ok(pairs) => {
                println!(
                    "denied connections (last {} minutes, node agent at {}): {} pair(s)",
                    WINDOW.as_secs() / 60,
                    a.agent,
                    pairs.len()
                );
                for p in pairs {
                    println!("  {}", line(p));
                }
            }
        }
    }
}

/// `shop/web-1 -> shop/db-0 TCP/5432: 17 attempts, last 10:00:03Z; denied by shop/db-ingress`.
fn line(p: &DeniedPair) -> String {
    let port = p.port.map(|n| format!("/{n}")).unwrap_or_default();
    let why = match (p.policies.is_empty(), p.held) {
        (false, _) => format!("denied by {}", p.policies.join(", ")),
        (true, true) => "held (the pod's labels were not known yet)".to_string(),
        (true, false) => "denied".to_string(),
    };
    format!(
        "{} -> {} {}{port}: {} attempt(s), last {}; {why}",
        p.from, p.to, p.protocol, p.count, p.last_seen
    )
}

pub fn to_json(found: &[AgentPairs]) -> Value {
    Value::Array(
        found
            .iter()
            .map(|a| match &a.pairs {
                Ok(pairs) => json!({"agent": a.agent, "pairs": pairs}),
                Err(why) => json!({"agent": a.agent, "error": why}),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_are_found_through_the_status_files_the_networks_name() {
        let conf = |name: &str, status: &str| {
            let v = json!({
                "cniVersion": "1.0.0", "name": name,
                "plugins": [{"type": "bridge", "rcniNodeStatus": status}, {"type": "portmap"}]
            });
            Network::from_list_bytes(v.to_string().as_bytes()).unwrap()
        };
        let nets = [
            conf("a", "/run/rcni/node-status.json"),
            conf("b", "/run/rcni/node-status.json"),
            conf("c", "/var/run/other/node-status.json"),
        ];
        assert_eq!(
            agents(&nets),
            [
                PathBuf::from("/run/rcni/flows.sock"),
                PathBuf::from("/var/run/other/flows.sock")
            ]
        );
        let p = DeniedPair {
            from: "shop/web-1".into(),
            to: "shop/db-0".into(),
            protocol: rcni_flows::Protocol::TCP,
            port: Some(5432),
            policies: vec!["shop/db-ingress".into()],
            held: false,
            count: 17,
            last_seen: "2025-05-01T10:00:03Z".parse().unwrap(),
        };
        assert_eq!(
            line(&p),
            "shop/web-1 -> shop/db-0 TCP/5432: 17 attempt(s), last 2025-05-01T10:00:03Z; denied by shop/db-ingress"
        );
    }
}
