//! The flags of `rcni flows`, and of the node agent any verb reads flows from.

use std::path::PathBuf;

use clap::Args;

use cni_attribution::names::NODE_STATE_DIR;
use rcni_flows::Agent;

#[derive(Debug, Args)]
pub struct FlowsArgs {
    /// Keep printing flows as they change, until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Only dropped connection attempts: denied by a policy, or held (the pod's labels were
    /// not known yet).
    #[arg(long)]
    pub denied: bool,
    /// Only flows from or to this pod.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub pod: Option<String>,
    /// Only flows seen in this last while (e.g. 30s, 5m, 1h).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Where the node agent serves its flows.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The node agent's state directory (`rcni-node --state-dir`): the agent serves its
    /// flows on the root-only socket flows.sock there.
    #[arg(long, value_name = "DIR", default_value = NODE_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Ask the agent at its HTTP address instead (`rcni-node --health-addr`, e.g.
    /// http://127.0.0.1:9477).
    #[arg(long, value_name = "URL")]
    pub agent: Option<String>,
}

impl AgentArgs {
    /// The agent named by `--agent`, else the socket in `--state-dir`.
    pub fn agent(&self) -> Result<Agent, String> {
        match &self.agent {
            Some(url) => Agent::from_url(url).map_err(|e| format!("--agent {e}")),
            None => Ok(Agent::in_state_dir(&self.state_dir)),
        }
    }
}
