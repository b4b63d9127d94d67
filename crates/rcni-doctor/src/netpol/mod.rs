//! `rcni doctor`'s NetworkPolicy check: the cluster as stored in etcd (what `rcni policy`
//! reads), the program `cni_policy::nft` builds from it for this node's pods
//! (`expected.rs`), the kernel's `inet rcni_policy` table read over netlink (`kernel.rs`),
//! and where they disagree, per pod (`compare.rs`). Without the etcd flags the check is
//! skipped; a datastore or kernel that cannot be read is a disagreement, not a crash. The
//! datastore is read by the caller's reader (`rcni policy`'s, in the command line).

mod compare;
mod expected;
mod kernel;

use std::collections::BTreeMap;

use cni_policy::stored::BadEntry;
use cni_policy::Cluster;

pub use compare::Disagreement;
use expected::Expected;

/// The check's inputs: the node, and how to read the datastore.
pub struct PolicyCheck<'a> {
    /// The name rcni-node publishes this node's pods under; `None`: the hostname.
    pub node: Option<String>,
    /// Reads the cluster from the datastore; the error is one line saying why it cannot.
    pub read: Box<dyn FnOnce() -> Result<StoredCluster, String> + 'a>,
}

/// The cluster as the datastore has it.
pub struct StoredCluster {
    pub cluster: Cluster,
    /// Entries that do not decode (the rest is still used).
    pub bad: Vec<BadEntry>,
    /// The node publishing each pod, by `namespace/name`.
    pub nodes: BTreeMap<String, String>,
}

/// The check's outcome.
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Why the check did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The node whose published pods were checked.
    pub node: Option<String>,
    pub local_pods: usize,
    /// Local pods some policy isolates in a direction.
    pub isolated_pods: usize,
    pub disagreements: Vec<Disagreement>,
}

impl Report {
    /// Nothing found (a skipped check finds nothing).
    pub fn is_clean(&self) -> bool {
        self.disagreements.is_empty()
    }

    fn node_problem(&mut self, problem: String) {
        self.disagreements.push(Disagreement { pod: None, problem });
    }
}

/// Runs the check (skipped without its inputs: no etcd flags given).
pub fn audit(check: Option<PolicyCheck>) -> Report {
    let Some(check) = check else {
        return Report {
            skipped: Some(
                "no --etcd-endpoints given: give rcni-node's etcd flags to compare this \
                 node's dataplane with the datastore"
                    .into(),
            ),
            ..Report::default()
        };
    };
    let node = check.node.unwrap_or_else(hostname);
    let mut report = Report {
        node: Some(node.clone()),
        ..Report::default()
    };
    let stored = match (check.read)() {
        Ok(s) => s,
        Err(why) => {
            report.node_problem(format!("cannot read the datastore: {why}"));
            return report;
        }
    };
    for bad in &stored.bad {
        report.node_problem(format!("datastore entry ignored: {bad}"));
    }
    let nodes: &BTreeMap<String, String> = &stored.nodes;
    let expected = match Expected::of(&stored.cluster, |pod| nodes.get(pod) == Some(&node)) {
        Ok(e) => e,
        Err(e) => {
            report.node_problem(format!("the stored policies cannot be evaluated: {e}"));
            return report;
        }
    };
    report.local_pods = expected.pods.len();
    report.isolated_pods = expected.isolated().len();
    match kernel::read(&expected) {
        Ok(observed) => report
            .disagreements
            .extend(compare::compare(&expected, &observed)),
        Err(e) => report.node_problem(format!("cannot read nf_tables: {e}")),
    }
    report
}

/// The node name rcni-node is usually given: the host's name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// The report section.
pub fn print(report: &Report) {
    if let Some(why) = &report.skipped {
        println!("networkpolicy: skipped ({why})");
        return;
    }
    let node = report.node.as_deref().unwrap_or_default();
    println!(
        "networkpolicy (node {node}): {} local pod(s), {} isolated; {} disagreement(s)",
        report.local_pods,
        report.isolated_pods,
        report.disagreements.len()
    );
    if report.local_pods == 0 {
        println!("  no pod is published for node {node} (rcni-node --node-name)");
    }
    let mut by_pod: BTreeMap<Option<&str>, Vec<&str>> = BTreeMap::new();
    for d in &report.disagreements {
        by_pod.entry(d.pod.as_deref()).or_default().push(&d.problem);
    }
    for (pod, problems) in by_pod {
        println!("  {}", pod.unwrap_or("(node)"));
        for p in problems {
            println!("      {p}");
        }
    }
    if !report.is_clean() {
        println!(
            "  rcni-node programs this table from the datastore: check that it runs and \
             reaches etcd"
        );
    }
}
