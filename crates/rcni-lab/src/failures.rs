//! Controlled failures. Each one gets its own container ID and pod namespace, and runs the
//! same protocol:
//!
//! 1. the scope's state before the failing ADD;
//! 2. the failing ADD, which must fail;
//! 3. what it left, captured right away, before any cleanup (the evidence);
//! 4. DEL with the correct config and the same ID, which must bring the scope back to
//!    exactly the state of step 1 (it released what the failure left, and nothing else);
//! 5. an ADD of the correct config with a new ID, which must succeed, and its DEL.
//!
//! The failures: (a) an IPAM type that does not exist, (b) a netns path that does not exist
//! (the error must come before any lease is taken), (c) a chain whose last plugin fails, run
//! through the runtime with and without its rollback. (a) and (b) run without rollback, as
//! libcni does, so the evidence shows what the plugins themselves leave.

use serde_json::{json, Value};

use cni_linux::NetNs;
use cni_runtime::{Attachment, Network, Runtime};

use super::evidence::Tracer;
use super::report::{Layer, Report, Verdict};
use super::scope::{diff_except, Change, Scope, State};
use super::Prepared;
use crate::scratch::{Namespaces, Scratch};

/// An IPAM plugin name no plugin directory has.
const MISSING_IPAM: &str = "rcni-lab-no-such-ipam";

/// The lab's fixed parts every failure uses.
pub struct Bench<'a> {
    pub rt: &'a Runtime,
    pub host: &'a NetNs,
    pub prepared: &'a Prepared,
    pub scope: Scope,
    pub args: Vec<(String, String)>,
    /// The network's shared bridges, whose own state is not an attachment's (see
    /// [`super::scope::diff_except`]).
    pub shared: Vec<String>,
    pub scratch: &'a Scratch,
}

/// One failure to provoke.
struct Case {
    tag: &'static str,
    title: String,
    failing: Network,
    rollback: bool,
    /// Run the failing ADD with a netns path that does not exist.
    missing_netns: bool,
}

pub fn run_all(report: &mut Report, tracer: &mut Tracer, bench: &Bench, ns: &mut Namespaces) {
    let list = &bench.prepared.list;
    match with_missing_ipam(list) {
        Some(bytes) => run_case(
            report,
            tracer,
            bench,
            ns,
            Case {
                tag: "a",
                title: format!("(a) IPAM type {MISSING_IPAM:?} that does not exist"),
                failing: match Network::from_list_bytes(&bytes) {
                    Ok(n) => n,
                    Err(e) => return report.fail(Layer::Failures, "(a) build the config", e),
                },
                rollback: false,
                missing_netns: false,
            },
        ),
        None => report.record(
            Layer::Failures,
            "(a) IPAM type that does not exist",
            Verdict::Skip,
            "no plugin of the network delegates to IPAM",
        ),
    }
    run_case(
        report,
        tracer,
        bench,
        ns,
        Case {
            tag: "b",
            title: "(b) netns path that does not exist".into(),
            failing: bench.prepared.network.clone(),
            rollback: false,
            missing_netns: true,
        },
    );
    let tuning = tracer.bin_dir().join("tuning");
    if !tuning.exists() {
        report.record(
            Layer::Failures,
            "(c) chain whose last plugin fails",
            Verdict::Skip,
            "the plugin directory has no tuning plugin to fail the chain's last step",
        );
        return;
    }
    let failing = match Network::from_list_bytes(&with_failing_last_plugin(list, bench.scratch)) {
        Ok(n) => n,
        Err(e) => return report.fail(Layer::Failures, "(c) build the config", e),
    };
    for (tag, rollback) in [("c1", true), ("c2", false)] {
        run_case(
            report,
            tracer,
            bench,
            ns,
            Case {
                tag,
                title: format!(
                    "({tag}) chain whose last plugin (tuning, unknown sysctl) fails, runtime {} rollback",
                    if rollback { "with" } else { "without" }
                ),
                failing: failing.clone(),
                rollback,
                missing_netns: false,
            },
        );
    }
}

/// The conflist with the first IPAM section's type replaced.
fn with_missing_ipam(list: &Value) -> Option<Vec<u8>> {
    let mut list = list.clone();
    let ipam = list
        .get_mut("plugins")?
        .as_array_mut()?
        .iter_mut()
        .find_map(|p| p.get_mut("ipam").and_then(Value::as_object_mut))?;
    ipam.insert("type".into(), json!(MISSING_IPAM));
    serde_json::to_vec(&list).ok()
}

/// The conflist plus a last plugin that fails at ADD: tuning asked to set a sysctl the kernel
/// does not have (its backups kept in the scratch directory).
fn with_failing_last_plugin(list: &Value, scratch: &Scratch) -> Vec<u8> {
    let mut list = list.clone();
    if let Some(plugins) = list.get_mut("plugins").and_then(Value::as_array_mut) {
        let mut tuning = json!({
            "type": "tuning",
            "sysctl": {"net.ipv4.conf.eth0.rcni_lab_no_such_sysctl": "1"}
        });
        super::config::keep_tuning_in_scratch(&mut tuning, scratch);
        plugins.push(tuning);
    }
    serde_json::to_vec(&list).unwrap_or_default()
}

fn changes_text(c: &[Change]) -> String {
    if c.is_empty() {
        return "nothing".into();
    }
    c.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

fn run_case(
    report: &mut Report,
    tracer: &mut Tracer,
    bench: &Bench,
    namespaces: &mut Namespaces,
    case: Case,
) {
    let t = case.tag;
    let pod = match namespaces.create(&format!("f{t}")) {
        Ok(p) => p,
        Err(e) => return report.fail(Layer::Failures, format!("({t}) pod namespace"), e),
    };
    let mut scope = bench.scope.clone();
    scope.pod_ns.push(ns_name(&pod));
    let netns = if case.missing_netns {
        format!("{}-gone", pod.path().display())
    } else {
        pod.path().display().to_string()
    };
    let cid = case_container_id(t);
    let att = Attachment::new(&cid, &netns, "eth0").with_args(bench.args.clone());
    let mut rt = bench.rt.clone();
    rt.rollback = case.rollback;

    let before = match scope.capture() {
        Ok(s) => s,
        Err(e) => return report.fail(Layer::Failures, format!("({t}) state before"), e),
    };
    let outcome = bench.host.run(|| rt.add(&case.failing, &att));
    let calls = tracer
        .operation(format!("({t}) failing ADD {cid}"))
        .calls
        .clone();
    let failed = matches!(outcome, Ok(Err(_)));
    report.check(
        Layer::Failures,
        format!("{}: ADD fails", case.title),
        failed,
        match &outcome {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(_)) => "the ADD succeeded".into(),
            Err(e) => e.to_string(),
        },
    );
    let left = match scope.capture() {
        Ok(s) => s,
        Err(e) => return report.fail(Layer::Failures, format!("({t}) state after"), e),
    };
    let residue = diff_except(&before, &left, &bench.shared);
    record_residue(report, &case, &residue, &calls, bench);

    // DEL with the correct config, the same ID and the same netns path.
    let del = bench
        .host
        .run(|| bench.rt.del(&bench.prepared.network, &att));
    tracer.operation(format!("({t}) DEL {cid} with the correct config"));
    report.check(
        Layer::Failures,
        format!("({t}) DEL with the correct config and the same ID succeeds"),
        matches!(del, Ok(Ok(()))),
        outcome_text(&del),
    );
    released(
        report,
        t,
        bench,
        &scope,
        &before,
        &residue,
        "the failure left",
    );

    retry_succeeds(report, tracer, bench, &pod, &scope, &before, t);
}

/// The container ID of case `t`'s failing ADD.
fn case_container_id(t: &str) -> String {
    format!("rcnilab{}f{t}", std::process::id())
}

/// A retry with a new ID (and a netns that exists) succeeds, and its DEL cleans up.
fn retry_succeeds(
    report: &mut Report,
    tracer: &mut Tracer,
    bench: &Bench,
    pod: &NetNs,
    scope: &Scope,
    before: &State,
    t: &str,
) {
    let cid = case_container_id(t);
    let retry = Attachment::new(format!("{cid}r"), pod.path().display().to_string(), "eth0")
        .with_args(bench.args.clone());
    let add = bench
        .host
        .run(|| bench.rt.add(&bench.prepared.network, &retry));
    tracer.operation(format!("({t}) retry ADD {}", retry.container_id));
    report.check(
        Layer::Failures,
        format!("({t}) a retry with a new ID succeeds"),
        matches!(add, Ok(Ok(_))),
        match &add {
            Ok(Ok(r)) => r
                .ips
                .iter()
                .map(|ip| ip.address.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Ok(Err(e)) => e.to_string(),
            Err(e) => e.to_string(),
        },
    );
    let del = bench
        .host
        .run(|| bench.rt.del(&bench.prepared.network, &retry));
    tracer.operation(format!("({t}) retry DEL {}", retry.container_id));
    if !matches!(del, Ok(Ok(()))) {
        report.fail(
            Layer::Failures,
            format!("({t}) DEL of the retry"),
            outcome_text(&del),
        );
    }
    released(report, t, bench, scope, before, &[], "the retry made");
}

/// What the failed ADD left, as evidence; for (b) and a rolled-back chain, the evidence is
/// itself the check.
fn record_residue(
    report: &mut Report,
    case: &Case,
    residue: &[Change],
    calls: &[super::evidence::Call],
    bench: &Bench,
) {
    let t = case.tag;
    let text = changes_text(residue);
    if case.missing_netns {
        let leases: Vec<&Change> = residue.iter().filter(|c| c.item.kind == "lease").collect();
        let ipam_types = ipam_types(&bench.prepared.list);
        let ipam_ran: Vec<&str> = calls
            .iter()
            .filter(|c| ipam_types.contains(&c.plugin))
            .map(|c| c.plugin.as_str())
            .collect();
        report.check(
            Layer::Failures,
            format!("({t}) the error comes before any lease is taken"),
            leases.is_empty() && ipam_ran.is_empty(),
            format!(
                "{} plugin runs ({}); IPAM runs: {}; left: {text}",
                calls.len(),
                calls
                    .iter()
                    .map(|c| c.plugin.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if ipam_ran.is_empty() {
                    "none".into()
                } else {
                    ipam_ran.join(", ")
                },
            ),
        );
        return;
    }
    if case.rollback {
        report.check(
            Layer::Failures,
            format!("({t}) the runtime's rollback left nothing behind"),
            residue.is_empty(),
            format!("left: {text}"),
        );
        return;
    }
    report.record(
        Layer::Failures,
        format!("({t}) left right after the failed ADD, before any cleanup"),
        Verdict::Note,
        text,
    );
}

/// The scope is back to `before`.
fn released(
    report: &mut Report,
    t: &str,
    bench: &Bench,
    scope: &Scope,
    before: &State,
    what: &[Change],
    whose: &str,
) {
    match scope.capture() {
        Ok(after) => {
            let rest = diff_except(before, &after, &bench.shared);
            report.check(
                Layer::Failures,
                format!("({t}) DEL released exactly what {whose}"),
                rest.is_empty(),
                if rest.is_empty() {
                    format!(
                        "{} objects released, state equals the state before",
                        what.len()
                    )
                } else {
                    format!("differs from before: {}", changes_text(&rest))
                },
            );
        }
        Err(e) => report.fail(Layer::Failures, format!("({t}) state after DEL"), e),
    }
}

fn outcome_text<E: std::fmt::Display, F: std::fmt::Display>(
    o: &Result<Result<(), E>, F>,
) -> String {
    match o {
        Ok(Ok(())) => String::new(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    }
}

/// IPAM plugin types the conflist delegates to.
fn ipam_types(list: &Value) -> Vec<String> {
    list.get("plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("ipam")?.get("type")?.as_str().map(String::from))
        .collect()
}

/// The name under /run/netns of a namespace the lab made.
pub fn ns_name(ns: &NetNs) -> String {
    ns.path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_configs_change_only_what_they_must() {
        let list = json!({"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"bridge","ipam":{"type":"host-local","subnet":"198.18.0.0/24"}}]});
        let a: Value = serde_json::from_slice(&with_missing_ipam(&list).unwrap()).unwrap();
        assert_eq!(a["plugins"][0]["ipam"]["type"], MISSING_IPAM);
        assert_eq!(a["plugins"][0]["ipam"]["subnet"], "198.18.0.0/24");
        let scratch = Scratch::new("rcni-lab-failures-unit").unwrap();
        let c: Value = serde_json::from_slice(&with_failing_last_plugin(&list, &scratch)).unwrap();
        assert_eq!(c["plugins"].as_array().unwrap().len(), 2);
        assert_eq!(c["plugins"][1]["type"], "tuning");
        assert_eq!(
            c["plugins"][1]["dataDir"],
            scratch.path().join("tuning").display().to_string()
        );
        assert_eq!(ipam_types(&list), ["host-local"]);
        let no_ipam = json!({"cniVersion":"1.0.0","name":"n","plugins":[{"type":"macvlan"}]});
        assert!(with_missing_ipam(&no_ipam).is_none());
    }
}
