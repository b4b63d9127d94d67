//! `rcni pod`: the pod-sandbox verbs of a CRI runtime (cni-sandbox) on the command line.
//! Each invocation first finishes or undoes what killed invocations left (recovery), then
//! runs its verb; namespaces are created and removed through cni-linux. The first
//! invocation after the node started runs the full GC instead of the recovery ([`boot_gc`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use cni_sandbox::{
    parse_cidrs, update_cidr, CidrUpdate, PodMeta, PortMapping, RunRequest, SandboxError,
    SandboxStatus, Sandboxes, SetupMode,
};
use cni_types::code;

use crate::boot_gc;
use crate::cli::pod::{PodArgs, PodVerb, RunArgs};
use crate::cli::Global;
use crate::failure::Failure;
use crate::netns::LinuxNamespaces;
use crate::output::print_json;
use crate::setup;

fn failed(verb: &str, e: &SandboxError) -> Failure {
    Failure::Failed {
        verb: format!("pod {verb}"),
        error: e.to_cni_error(),
    }
}

pub fn run(g: &Global, p: &PodArgs) -> Result<(), Failure> {
    if g.ifname != "eth0" {
        return Err(Failure::usage(
            "rcni pod names interfaces itself (lo, eth0, net1, ...): --ifname / CNI_IFNAME does not apply",
        ));
    }
    let mut sb = Sandboxes::new(
        setup::runtime(g),
        &p.state_dir,
        &g.conf_dir,
        Arc::new(LinuxNamespaces),
    );
    if p.serial {
        sb.mode = SetupMode::Serial;
    }
    if matches!(
        p.verb,
        PodVerb::Run(_) | PodVerb::Stop { .. } | PodVerb::Rm { .. } | PodVerb::Ls
    ) {
        let marker = boot_gc::marker(&p.run_dir, &p.state_dir);
        if boot_gc::done(&marker) || !gc_on_start(&sb, &marker) {
            recover(&sb);
        }
    }
    match &p.verb {
        PodVerb::Run(r) => run_pod(g, &sb, r),
        PodVerb::Status { id } => {
            show(g, &sb.status(id));
            Ok(())
        }
        PodVerb::Stop { id } => sb.stop(id).map_err(|e| failed("stop", &e)),
        PodVerb::Rm { id } => sb.remove(id).map_err(|e| failed("rm", &e)),
        PodVerb::Ls => list(g, &sb),
        PodVerb::Ready => ready(g, &sb),
        PodVerb::UpdateCidr { cidr } => cidr_update(g, p, cidr),
        PodVerb::Gc => gc(g, &sb, &boot_gc::marker(&p.run_dir, &p.state_dir)),
    }
}

/// The start-of-process recovery: its problems are reported, the verb still runs.
fn recover(sb: &Sandboxes) {
    match sb.recover() {
        Ok(r) => {
            for id in &r.undone {
                log::info!("undid the interrupted run of sandbox {id}");
            }
            for id in &r.finished {
                log::info!("finished the interrupted stop of sandbox {id}");
            }
            for e in &r.errors {
                log::warn!("recovery: {e}");
            }
        }
        Err(e) => log::warn!("recovery: {e}"),
    }
}

/// The first start after boot: the `gc` pass (recovery included) under the exclusive state
/// lock, then the marker. `false` when the pass could not run (the marker stays absent, so
/// the next start tries again).
fn gc_on_start(sb: &Sandboxes, marker: &Path) -> bool {
    match sb.gc() {
        Ok(report) => {
            log::info!(
                "gc on start: {} network(s), {} interrupted run(s) undone, {} stop(s) finished",
                report.networks.len(),
                report.undone.len(),
                report.finished.len()
            );
            for e in &report.errors {
                log::warn!("gc on start: {e}");
            }
            mark(marker);
            true
        }
        Err(e) => {
            log::warn!("gc on start: {e}");
            false
        }
    }
}

fn mark(marker: &Path) {
    if let Err(e) = boot_gc::mark(marker) {
        log::warn!("cannot write the gc marker {}: {e}", marker.display());
    }
}

fn run_pod(g: &Global, sb: &Sandboxes, r: &RunArgs) -> Result<(), Failure> {
    let mut capability_args = setup::parse_capability_args(g.capability_args.as_deref())?;
    if !r.ips.is_empty() {
        capability_args.insert("ips".into(), json!(r.ips));
    }
    if let Some(mac) = &r.mac {
        capability_args.insert("mac".into(), json!(mac));
    }
    let port_mappings = r
        .ports
        .iter()
        .map(|s| PortMapping::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let netns = r.netns.as_deref().map(setup::netns_path).transpose()?;
    let req = RunRequest {
        id: r.id.clone().or_else(|| g.container_id.clone()),
        pod: PodMeta {
            name: r.name.clone(),
            namespace: r.namespace.clone(),
            uid: r.uid.clone().unwrap_or_default(),
            labels: parse_labels(&r.labels)?,
        },
        netns,
        networks: r.networks.clone(),
        port_mappings,
        capability_args,
        extra_args: setup::parse_args(g.args.as_deref())?,
    };
    let status = sb.run(&req).map_err(|e| failed("run", &e))?;
    if g.json {
        print_json(&status);
    } else {
        println!("{}", status.id);
    }
    Ok(())
}

/// `KEY=VALUE` pairs, checked as Kubernetes checks label keys and values.
fn parse_labels(pairs: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    let mut labels = BTreeMap::new();
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(Failure::usage(format!(
                "--label {pair:?}: expected KEY=VALUE"
            )));
        };
        if let Some(why) = cni_policy::validate::label_problem(k, v) {
            return Err(Failure::usage(format!("--label {pair:?}: {why}")));
        }
        labels.insert(k.to_string(), v.to_string());
    }
    Ok(labels)
}

fn show(g: &Global, s: &SandboxStatus) {
    if g.json {
        print_json(s);
        return;
    }
    println!("id:      {}", s.id);
    println!("state:   {}", s.state_name());
    if s.state.is_some() {
        println!(
            "pod:     {}/{} (uid {})",
            s.pod.namespace, s.pod.name, s.pod.uid
        );
        if !s.pod.labels.is_empty() {
            let labels: Vec<String> = s
                .pod
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("labels:  {}", labels.join(","));
        }
        println!("netns:   {}", s.netns.display());
        println!("ips:     {}", s.ips.join(" "));
        for n in &s.networks {
            let how = if n.attached { "attached" } else { "detached" };
            println!("network: {} on {} ({how})", n.name, n.ifname);
        }
        for e in &s.errors {
            println!("error:   {e}");
        }
    }
}

fn list(g: &Global, sb: &Sandboxes) -> Result<(), Failure> {
    let all = sb.list().map_err(|e| failed("ls", &e))?;
    if g.json {
        print_json(&all);
        return Ok(());
    }
    for s in all {
        println!(
            "{}\t{}\t{}/{}\t{}",
            s.id,
            s.state_name(),
            s.pod.namespace,
            s.pod.name,
            s.ips.join(",")
        );
    }
    Ok(())
}

fn ready(g: &Global, sb: &Sandboxes) -> Result<(), Failure> {
    let r = sb.ready();
    if g.json {
        print_json(&r);
    } else if r.ready {
        println!("ready");
    } else {
        eprintln!("not ready: {}", r.reason);
    }
    if r.ready {
        Ok(())
    } else {
        Err(Failure::Reported)
    }
}

fn cidr_update(g: &Global, p: &PodArgs, cidr: &str) -> Result<(), Failure> {
    let template = p
        .conf_template
        .as_ref()
        .ok_or_else(|| Failure::usage("update-cidr needs --conf-template FILE"))?;
    let cidrs = parse_cidrs(cidr).map_err(|e| Failure::usage(e.to_string()))?;
    let outcome =
        update_cidr(&g.conf_dir, template, &cidrs).map_err(|e| failed("update-cidr", &e))?;
    let (written, file) = match &outcome {
        CidrUpdate::Written(f) => (true, f),
        CidrUpdate::Unchanged(f) => (false, f),
    };
    if g.json {
        print_json(&json!({"written": written, "file": file}));
    } else if written {
        println!("wrote {}", file.display());
    } else {
        println!(
            "unchanged: {} already configures the network",
            file.display()
        );
    }
    Ok(())
}

fn gc(g: &Global, sb: &Sandboxes, marker: &Path) -> Result<(), Failure> {
    let report = sb.gc().map_err(|e| failed("gc", &e))?;
    mark(marker);
    if g.json {
        print_json(&report);
    } else {
        println!(
            "gc: {} network(s), {} valid attachment(s), {} interrupted run(s) undone, {} stop(s) finished, {} stale file(s) swept",
            report.networks.len(),
            report.valid,
            report.undone.len(),
            report.finished.len(),
            report.swept
        );
        for e in &report.errors {
            eprintln!("gc: {e}");
        }
    }
    if report.errors.is_empty() {
        Ok(())
    } else if g.json {
        Err(Failure::Reported)
    } else {
        Err(Failure::other(
            "pod gc",
            code::INTERNAL,
            format!(
                "{} error(s): {}",
                report.errors.len(),
                report.errors.join("; ")
            ),
        ))
    }
}
