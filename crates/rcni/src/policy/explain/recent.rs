//! `explain POD --from PEER|--to PEER --port N`: besides what the datastore says, what
//! actually happened to that connection lately, as the node agent's flows of the pair
//! (when an agent is reachable: on the node of one of the two pods).

use std::net::IpAddr;
use std::time::Duration;

use rcni_flows::{Agent, Endpoint, Filter, Flow, Protocol};
use serde_json::Value;

use super::Connection;

/// How long the agent may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The recent flows of one pair, or why there are none to show.
pub struct Recent {
    agent: String,
    flows: Result<Vec<Flow>, String>,
}

impl Recent {
    /// Asks `agent` for the flows between `pod` and the connection's peer, in the
    /// connection's direction, to its port.
    pub fn of(agent: &Agent, pod: &str, c: &Connection) -> Recent {
        let filter = Filter {
            pod: Some(pod.to_string()),
            port: Some(c.port),
            protocol: Protocol::parse(&c.protocol.to_string()),
            ..Filter::default()
        };
        let is = |e: &Endpoint, who: &str| match who.parse::<IpAddr>() {
            Ok(ip) => e.ip == ip,
            Err(_) => e.pod_key().as_deref() == Some(who),
        };
        let flows = agent
            .flows(&filter, TIMEOUT)
            .map(|flows| {
                flows
                    .into_iter()
                    .filter(|f| match c.inbound {
                        true => is(&f.src, &c.peer) && is(&f.dst, pod),
                        false => is(&f.src, pod) && is(&f.dst, &c.peer),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string());
        Recent {
            agent: agent.describe(),
            flows,
        }
    }

    /// The flows as text for stdout; when none could be had, why, for stderr.
    pub fn to_text(&self) -> Result<String, String> {
        Ok(match &self.flows {
            Err(why) => return Err(format!("note: recent flows not shown: {why}")),
            Ok(flows) if flows.is_empty() => {
                format!(
                    "Recent flows seen by the node agent ({}): none\n",
                    self.agent
                )
            }
            Ok(flows) => {
                let mut out = format!(
                    "Recent flows seen by the node agent ({}):\n  {}\n",
                    self.agent,
                    crate::flows::header()
                );
                for f in flows {
                    out += &format!("  {}\n", crate::flows::row(f));
                }
                out
            }
        })
    }

    /// Adds `recentFlows` (or `recentFlowsError`) to the explanation.
    pub fn add_json(&self, v: &mut Value) {
        match &self.flows {
            Ok(flows) => v["recentFlows"] = serde_json::to_value(flows).unwrap_or_default(),
            Err(why) => v["recentFlowsError"] = Value::String(why.clone()),
        }
    }
}
