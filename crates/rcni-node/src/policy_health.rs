//! NetworkPolicy's part of the agent's health: what the program holds (for `/metrics`) and
//! whether enforcement is in force. The node is unhealthy (the status file says why, ADD is
//! refused with code 11, `/healthz` answers 503) until the first program is committed, while
//! a program cannot be built or committed (until one is), and when the policies or the
//! node's pods cannot be read for longer than the agent's grace: nothing fails silently.

use std::time::{Duration, Instant};

/// A failure that lasts: since when, and the last cause.
#[derive(Debug, Clone)]
pub struct Failure {
    pub since: Instant,
    pub cause: String,
}

impl Failure {
    fn seconds(&self) -> u64 {
        self.since.elapsed().as_secs()
    }
}

/// Records `cause` in `slot`, keeping the start of a failure that goes on.
pub fn failing(slot: &mut Option<Failure>, cause: impl std::fmt::Display) {
    let cause = cause.to_string();
    match slot {
        Some(f) => f.cause = cause,
        None => {
            *slot = Some(Failure {
                since: Instant::now(),
                cause,
            })
        }
    }
}

/// What enforcement reports.
#[derive(Debug, Clone, Default)]
pub struct PolicyHealth {
    /// Policies known.
    pub policies: usize,
    /// Local pods isolated by at least one policy.
    pub selected_pods: usize,
    /// Addresses in the program's sets and maps.
    pub set_elements: usize,
    /// Addresses of local pods held (no element in some direction yet).
    pub held_addresses: usize,
    /// Unix time of the last program committed.
    pub last_sync_unix: Option<u64>,
    /// Programs that could not be built or committed, and failed reads of the datastore.
    pub sync_errors: u64,
    /// Stored values left out because they cannot be read (bad JSON, invalid selectors).
    pub bad_inputs: u64,
    /// The first program of this run is in force.
    pub ready: bool,
    /// The last program could not be built or committed.
    pub program: Option<Failure>,
    /// The policies, namespaces and other nodes' pods cannot be read from etcd.
    pub read: Option<Failure>,
    /// This node's pods cannot be listed from their source (unhealthy only before the first
    /// program: existing pods must be known then).
    pub scan: Option<Failure>,
}

impl PolicyHealth {
    /// `Ok` while enforcement is in force; else why not. Read failures count after `grace`
    /// (before that, a starting agent is only "starting").
    pub fn verdict(&self, grace: Duration) -> Result<(), String> {
        if let Some(f) = &self.program {
            return Err(format!(
                "NetworkPolicy: the policy program cannot be committed (for {} s): {}",
                f.seconds(),
                f.cause
            ));
        }
        let lasting =
            |f: &Option<Failure>| f.as_ref().filter(|f| f.since.elapsed() >= grace).cloned();
        if let Some(f) = lasting(&self.read) {
            return Err(format!(
                "NetworkPolicy: the policies cannot be read from etcd (for {} s): {}",
                f.seconds(),
                f.cause
            ));
        }
        // Once in force, pods are learned from their ADDs: a runtime that does not answer
        // for a while (containerd restarting) holds new pods, it does not stop enforcement.
        if let Some(f) = lasting(&self.scan).filter(|_| !self.ready) {
            return Err(format!(
                "NetworkPolicy: this node's pods cannot be listed (for {} s): {}",
                f.seconds(),
                f.cause
            ));
        }
        if !self.ready {
            return Err(
                "NetworkPolicy: starting (the first policy program is not in force yet)".into(),
            );
        }
        Ok(())
    }

    /// The Prometheus text of these values.
    pub fn metrics(&self, grace: Duration) -> String {
        format!(
            "# HELP rcni_node_policies NetworkPolicies in the node's program.\n\
             # TYPE rcni_node_policies gauge\nrcni_node_policies {}\n\
             # HELP rcni_node_policy_selected_pods Local pods isolated by a NetworkPolicy.\n\
             # TYPE rcni_node_policy_selected_pods gauge\nrcni_node_policy_selected_pods {}\n\
             # HELP rcni_node_policy_set_elements Addresses in the policy program's sets and maps.\n\
             # TYPE rcni_node_policy_set_elements gauge\nrcni_node_policy_set_elements {}\n\
             # HELP rcni_node_policy_held_addresses Local pod addresses held until their policies are programmed.\n\
             # TYPE rcni_node_policy_held_addresses gauge\nrcni_node_policy_held_addresses {}\n\
             # HELP rcni_node_policy_last_sync_timestamp_seconds Unix time of the last policy program committed.\n\
             # TYPE rcni_node_policy_last_sync_timestamp_seconds gauge\nrcni_node_policy_last_sync_timestamp_seconds {}\n\
             # HELP rcni_node_policy_sync_errors_total Policy programs not built or committed, and failed reads.\n\
             # TYPE rcni_node_policy_sync_errors_total counter\nrcni_node_policy_sync_errors_total {}\n\
             # HELP rcni_node_policy_bad_inputs_total Stored policies, namespaces and pods left out because they cannot be read.\n\
             # TYPE rcni_node_policy_bad_inputs_total counter\nrcni_node_policy_bad_inputs_total {}\n\
             # HELP rcni_node_policy_enforced 1 when the node's policy program is in force and current.\n\
             # TYPE rcni_node_policy_enforced gauge\nrcni_node_policy_enforced {}\n",
            self.policies,
            self.selected_pods,
            self.set_elements,
            self.held_addresses,
            self.last_sync_unix.unwrap_or(0),
            self.sync_errors,
            self.bad_inputs,
            u8::from(self.verdict(grace).is_ok()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforcement_is_healthy_only_once_in_force_and_while_it_can_commit() {
        let mut h = PolicyHealth::default();
        let grace = Duration::from_secs(10);
        assert!(h.verdict(grace).unwrap_err().contains("starting"));
        h.ready = true;
        assert!(h.verdict(grace).is_ok());
        failing(
            &mut h.program,
            "add 5102 element(s) of set x: No such file or directory",
        );
        let why = h.verdict(grace).unwrap_err();
        assert!(why.contains("cannot be committed"), "{why}");
        assert!(why.ends_with("No such file or directory"), "{why}");
        assert!(h.metrics(grace).contains("rcni_node_policy_enforced 0\n"));
        h.program = None;
        // A read failure counts once it outlasts the grace.
        failing(&mut h.read, "etcd http://198.18.0.1:2379: unreachable");
        assert!(h.verdict(grace).is_ok());
        assert!(h
            .verdict(Duration::ZERO)
            .unwrap_err()
            .contains("cannot be read from etcd"));
        h.read = None;
        failing(
            &mut h.scan,
            "CRI runtime at /run/x.sock: ListPodSandbox failed",
        );
        assert!(
            h.verdict(Duration::ZERO).is_ok(),
            "in force: the scan is a safety net"
        );
        h.ready = false;
        assert!(h
            .verdict(Duration::ZERO)
            .unwrap_err()
            .contains("pods cannot be listed"));
    }
}
