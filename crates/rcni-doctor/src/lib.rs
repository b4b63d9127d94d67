//! `rcni doctor`: diagnosis for operators. `explain` places an error message from kubelet
//! events or runtime logs in its CNI lifecycle stage; without an argument the node is
//! inspected read-only (configs, plugins, and the leak audit of `audit.rs`), and `--fix`
//! removes the leaks through the plugins' DEL and GC (`fix.rs`); `rcni pod` records without
//! a netns are audited and removed through `rcni pod rm`'s code (`sandboxes.rs`); attachments
//! whose nf_tables rules are missing are listed (`missing_rules.rs`); with the etcd flags,
//! pods whose NetworkPolicy dataplane disagrees with the datastore (`netpol/`); on a node of
//! rcni-node's WireGuard backend, the peers without a recent handshake (`wireguard.rs`); and
//! what the node agent saw denied lately, the most frequent denied pairs (`flows.rs`).
//!
//! The command line (`rcni`) parses the flags and hands over what this crate cannot make
//! itself: the runtime, the namespaces of `rcni pod`, and the reader of the datastore.

mod agent;
mod audit;
mod explain;
mod fix;
mod flows;
mod missing_rules;
mod netpol;
mod read;
mod sandboxes;
mod wireguard;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use cni_runtime::Runtime;
use cni_sandbox::Namespaces;

pub use audit::{judge, Finding, Snapshot};
pub use explain::{explain, Explanation};
pub use netpol::{PolicyCheck, StoredCluster};

/// What `inspect` looks at, and how it answers.
pub struct Options<'a> {
    /// The network configuration directory.
    pub conf_dir: PathBuf,
    /// State dir of `rcni pod` whose records are audited (a record without its netns).
    pub pod_state_dir: PathBuf,
    /// Remove the leaks found, through the plugins' own DEL and GC only.
    pub fix: bool,
    /// One JSON document instead of the text report.
    pub json: bool,
    /// How `rcni pod` creates and removes namespaces (a fixed sandbox's netns goes this way).
    pub namespaces: Arc<dyn Namespaces>,
    /// The NetworkPolicy check; `None` skips it (no etcd flags given).
    pub policy: Option<PolicyCheck<'a>>,
}

/// A problem with the configs or plugins (not a leak).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Problem {
    pub object: String,
    pub why: String,
}

/// Config files that do not load, and networks whose plugins are missing or do not speak
/// their version.
fn config_problems(conf_dir: &std::path::Path, rt: &Runtime) -> Vec<Problem> {
    let found = match cni_runtime::discover(conf_dir) {
        Ok(f) => f,
        Err(e) => {
            return vec![Problem {
                object: conf_dir.display().to_string(),
                why: e.to_string(),
            }]
        }
    };
    let mut out: Vec<Problem> = found
        .warnings
        .iter()
        .map(|w| Problem {
            object: w.file.display().to_string(),
            why: w.to_string(),
        })
        .collect();
    if found.networks.is_empty() {
        out.push(Problem {
            object: conf_dir.display().to_string(),
            why: "no network config loads: a CRI runtime reports NetworkReady=false (cni plugin not initialized)".into(),
        });
    }
    out.extend(agent::problems(&found.networks));
    for net in &found.networks {
        if let Err(e) = rt.validate(net) {
            out.push(Problem {
                object: format!("network {}", net.name()),
                why: e.to_string(),
            });
        }
    }
    out
}

/// Inspects the node; with `fix`, removes the leaks and inspects again. Returns whether the
/// node is clean (no problem and no leak left). Sandboxes are removed first: their DEL takes
/// their cache entries with them, so the rest is judged again afterwards.
pub fn inspect(rt: &Runtime, opts: Options) -> Result<bool, String> {
    let (conf_dir, pod_state_dir) = (opts.conf_dir.as_path(), opts.pod_state_dir.as_path());
    let problems = config_problems(conf_dir, rt);
    let audit = || -> Result<Vec<Finding>, String> {
        let mut f = sandboxes::audit(pod_state_dir)?;
        f.extend(judge(&Snapshot::read(conf_dir, rt.cache_dir())?));
        Ok(f)
    };
    let mut findings = audit()?;
    let mut applied = Vec::new();
    if opts.fix && !findings.is_empty() {
        applied = sandboxes::fix(rt, conf_dir, pod_state_dir, opts.namespaces, &findings);
        let snap = Snapshot::read(conf_dir, rt.cache_dir())?;
        applied.extend(fix::apply(rt, &snap, &judge(&snap)));
        findings = audit()?;
    }
    let missing = missing_rules::audit(rt);
    let policy = netpol::audit(opts.policy);
    let tunnels = wireguard::audit(conf_dir);
    let networks = cni_runtime::discover(conf_dir)
        .map(|found| found.networks)
        .unwrap_or_default();
    let denied = flows::audit(&networks);
    if opts.json {
        let v = json!({"problems": problems, "leaks": findings, "fixed": applied,
                       "missingRules": missing, "networkPolicy": policy,
                       "wireguard": tunnels, "deniedConnections": flows::to_json(&denied)});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print_report(&problems, &findings, &applied);
        missing_rules::print(&missing);
        netpol::print(&policy);
        wireguard::print(&tunnels);
        flows::print(&denied);
    }
    Ok(problems.is_empty()
        && findings.is_empty()
        && missing.is_empty()
        && policy.is_clean()
        && tunnels.is_clean())
}

fn print_report(problems: &[Problem], findings: &[Finding], applied: &[fix::Applied]) {
    println!("configs and plugins: {} problem(s)", problems.len());
    for p in problems {
        println!("  {}: {}", p.object, p.why);
    }
    for a in applied {
        match &a.error {
            None => println!("fixed: {}", a.action),
            Some(e) => println!("fix failed: {}: {e}", a.action),
        }
    }
    println!("leak audit: {} leaked object(s)", findings.len());
    for f in findings {
        println!(
            "  [{}] {}\n      why: {}\n      remove: {}",
            f.kind, f.object, f.why, f.remedy
        );
    }
}

/// Prints an explanation as text, or as one JSON object.
pub fn print(e: &Explanation, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(e).unwrap_or_else(|_| "{}".into())
        );
        return;
    }
    let stage = e
        .stage
        .map(|s| s.describe())
        .unwrap_or("unknown (the message names no CNI operation)");
    println!("stage:   {stage}");
    println!("cause:   {}", e.cause.unwrap_or("not recognised"));
    if let Some(p) = &e.plugin {
        println!("plugin:  {p}");
    }
    if let Some(c) = e.code {
        println!("code:    {c}");
    }
    println!("meaning: {}", e.meaning);
    println!("next:");
    for n in &e.next {
        println!("  - {n}");
    }
}
