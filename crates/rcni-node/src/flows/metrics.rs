//! The flow log in `/metrics`: verdicts per direction, verdict and policy
//! (`rcni_node_policy_verdicts_total`), the records the kernel's rate limits held back and
//! the socket lost, and the store's size. Labels name policies, never pods or addresses, so
//! the series grow with the policies only, and a deleted policy's series go.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use rcni_flows::{Direction, Flow, Usage, Verdict};

use super::names::ClusterNames;
use super::Stats;
use crate::prometheus::label;

/// (direction, verdict, namespace, policy); empty names for verdicts no policy gave (held,
/// or a record the view could not name).
type Series = (Direction, Verdict, String, String);

/// Verdict counters by policy.
#[derive(Debug, Default)]
pub struct VerdictCounters {
    counts: BTreeMap<Series, u64>,
}

impl VerdictCounters {
    /// Counts one record's flow: for a denied one, once for each policy isolating its pod.
    pub fn count(&mut self, f: &Flow) {
        let series = |key: Option<&str>| -> Series {
            let (ns, name) = key.and_then(|k| k.split_once('/')).unwrap_or(("", ""));
            (f.direction, f.verdict, ns.to_string(), name.to_string())
        };
        if f.policies.is_empty() || f.verdict == Verdict::Held {
            *self.counts.entry(series(None)).or_default() += f.count;
        }
        if f.verdict != Verdict::Held {
            for p in &f.policies {
                *self.counts.entry(series(Some(p))).or_default() += f.count;
            }
        }
    }

    /// Drops the series of policies that no longer exist.
    pub fn forget_gone_policies(&mut self, names: &dyn ClusterNames) {
        self.counts.retain(|(_, _, ns, name), _| {
            ns.is_empty() || names.has_policy(&format!("{ns}/{name}"))
        });
    }
}

/// The Prometheus text of the flow log.
pub fn render(v: &VerdictCounters, usage: Usage, stats: &Stats) -> String {
    let mut out = String::from(
        "# HELP rcni_node_policy_verdicts_total Connection attempts the policy program logged, \
         by direction, verdict and policy (a denied one counts for each policy isolating its pod).\n\
         # TYPE rcni_node_policy_verdicts_total counter\n",
    );
    for ((direction, verdict, ns, policy), n) in &v.counts {
        let _ = writeln!(
            out,
            "rcni_node_policy_verdicts_total{{direction=\"{}\",verdict=\"{}\",namespace=\"{}\",policy=\"{}\"}} {n}",
            direction.name(),
            verdict.name(),
            label(ns),
            label(policy)
        );
    }
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let _ = write!(
        out,
        "# HELP rcni_node_flow_records_total Records of the flow log taken.\n\
         # TYPE rcni_node_flow_records_total counter\nrcni_node_flow_records_total {}\n\
         # HELP rcni_node_flow_records_suppressed_total Records the kernel's rate limit held back.\n\
         # TYPE rcni_node_flow_records_suppressed_total counter\n\
         rcni_node_flow_records_suppressed_total{{verdict=\"denied\"}} {}\n\
         rcni_node_flow_records_suppressed_total{{verdict=\"allowed\"}} {}\n\
         # HELP rcni_node_flow_records_lost_total Records the kernel sent that the agent's socket could not hold.\n\
         # TYPE rcni_node_flow_records_lost_total counter\nrcni_node_flow_records_lost_total {}\n\
         # HELP rcni_node_flow_records_unnamed_total Records whose prefix or headers could not be read.\n\
         # TYPE rcni_node_flow_records_unnamed_total counter\nrcni_node_flow_records_unnamed_total {}\n\
         # HELP rcni_node_flows Flows in memory.\n\
         # TYPE rcni_node_flows gauge\nrcni_node_flows {}\n\
         # HELP rcni_node_flow_memory_bytes Estimated memory of the flows kept.\n\
         # TYPE rcni_node_flow_memory_bytes gauge\nrcni_node_flow_memory_bytes {}\n\
         # HELP rcni_node_flows_evicted_total Flows pushed out of memory by newer ones.\n\
         # TYPE rcni_node_flows_evicted_total counter\nrcni_node_flows_evicted_total {}\n\
         # HELP rcni_node_flow_log_bound 1 while the agent reads the flow log group.\n\
         # TYPE rcni_node_flow_log_bound gauge\nrcni_node_flow_log_bound {}\n",
        usage.records,
        load(&stats.suppressed_denied),
        load(&stats.suppressed_allowed),
        load(&stats.lost),
        load(&stats.unnamed),
        usage.flows,
        usage.bytes,
        usage.evicted,
        load(&stats.bound),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::names::tests::{names, record, syn};

    #[test]
    fn a_denied_record_counts_for_each_isolating_policy_and_gone_policies_go() {
        let r = record(
            "rcni:deny:pod-i-00000000000000db",
            syn([198, 19, 1, 2], [198, 19, 1, 3], 5432),
        );
        let f = crate::flows::names::to_flow(&r, &names(), std::time::SystemTime::now()).unwrap();
        let mut v = VerdictCounters::default();
        v.count(&f);
        v.count(&f);
        let held = record("rcni:hold:e", syn([198, 19, 1, 2], [198, 19, 1, 3], 80));
        v.count(
            &crate::flows::names::to_flow(&held, &names(), std::time::SystemTime::now()).unwrap(),
        );
        let text = render(&v, Usage::default(), &Stats::default());
        assert!(text.contains("rcni_node_policy_verdicts_total{direction=\"ingress\",verdict=\"denied\",namespace=\"shop\",policy=\"deny-all\"} 2\n"), "{text}");
        assert!(text.contains("{direction=\"ingress\",verdict=\"denied\",namespace=\"shop\",policy=\"db-only-api\"} 2\n"));
        assert!(
            text.contains("{direction=\"egress\",verdict=\"held\",namespace=\"\",policy=\"\"} 1\n")
        );
        let mut gone = names();
        gone.isolating.clear();
        v.forget_gone_policies(&gone);
        let text = render(&v, Usage::default(), &Stats::default());
        assert!(!text.contains("deny-all"), "{text}");
        assert!(text.contains("verdict=\"held\""));
    }
}
