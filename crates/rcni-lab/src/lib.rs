//! `rcni lab`: proves a pod attachment end to end on four layers, inside namespaces it makes
//! and removes itself.
//!
//! 1. what the plugin said (the result),
//! 2. the kernel objects, read back through netlink (not `ip`),
//! 3. the IPAM lease files,
//! 4. a real HTTP request from pod A to pod B's address,
//!
//! then CHECK and a repeated ADD of a live attachment, deletes everything and proves nothing
//! is left; then provokes controlled failures (`failures`) and proves their cleanup, and
//! compares the lab's whole scope before and after the run (`scope`). Every plugin run is
//! recorded with its inputs and outputs (`evidence`, `--record FILE`). The "host" is a
//! throwaway namespace: the plugins run inside it, so the machine's root namespace is never
//! touched.
//!
//! The throwaway fixtures the lab makes its namespaces and scratch directory with
//! ([`scratch`]) are shared with `rcni conformance` (crate `rcni-conformance`).

mod checks;
mod config;
mod evidence;
mod failures;
mod http;
mod lifecycle;
mod report;
mod scope;
pub mod scratch;
mod shared;

use std::path::PathBuf;

use cni_linux::NetNs;
use cni_runtime::sandbox::{SandboxNetworks, SandboxRequest, SetupMode};
use cni_runtime::{Network, Runtime, SandboxResult};

use crate::scratch::{Namespaces, Scratch};
pub use config::PLUGIN_NAMES;
pub use report::{Layer, Report, Verdict};

/// What the lab is asked to do.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// A conflist to prove instead of the built-in bridge + host-local one.
    pub config: Option<PathBuf>,
    /// Where the plugins are; default: links to `rcni-plugins` next to this executable.
    pub bin_dir: Option<PathBuf>,
    /// Print one JSON document instead of the step-by-step text.
    pub json: bool,
    /// Write the evidence record (every plugin run, binaries, config, kernel) here as JSON.
    pub record: Option<PathBuf>,
}

/// One pod of the lab.
struct Pod {
    label: &'static str,
    ns: NetNs,
    container_id: String,
    result: Option<SandboxResult>,
}

/// Runs the lab; returns the report (its `ok()` decides the exit code).
pub fn run(opts: &LabOptions) -> Report {
    let mut report = Report::new(opts.json);
    if !opts.json {
        println!("rcni lab: proving a pod network attachment on four layers");
    }
    let scratch = match Scratch::new("rcni-lab") {
        Ok(s) => s,
        Err(e) => {
            report.fail(Layer::Setup, "create a scratch directory", e);
            return report;
        }
    };
    let mut namespaces = Namespaces::new("rcnilab");
    let tracer = run_in(opts, &scratch, &mut namespaces, &mut report);
    // Namespaces go last, and their removal is itself checked.
    let names = namespaces.names();
    let removed = namespaces.remove_all();
    let left: Vec<String> = names
        .iter()
        .filter(|n| std::path::Path::new("/run/netns").join(n).exists())
        .cloned()
        .collect();
    checks::namespaces_removed(&mut report, &names, removed, &left);
    let summary = tracer.as_ref().map(|t| t.summary()).unwrap_or_default();
    if let (Some(t), Some(file)) = (&tracer, &opts.record) {
        write_record(&mut report, &t.record, file);
    }
    if opts.json {
        let evidence = serde_json::json!({
            "summary": summary,
            "record": opts.record.as_ref().map(|p| p.display().to_string()),
        });
        println!("{}", report.to_json(Some(evidence)));
    } else {
        println!("evidence:");
        for line in &summary {
            println!("  {line}");
        }
        println!("checks by layer:");
        for line in report.layer_lines() {
            println!("  {line}");
        }
        println!(
            "rcni lab: {} passed, {} failed, {} skipped, {} notes",
            report.count(Verdict::Pass),
            report.count(Verdict::Fail),
            report.count(Verdict::Skip),
            report.count(Verdict::Note)
        );
    }
    report
}

fn write_record(report: &mut Report, record: &evidence::Record, file: &std::path::Path) {
    let written = serde_json::to_vec_pretty(record)
        .map_err(|e| e.to_string())
        .and_then(|b| std::fs::write(file, b).map_err(|e| format!("{}: {e}", file.display())));
    match written {
        Ok(()) => {
            report.check(
                Layer::Evidence,
                "evidence record written",
                true,
                file.display().to_string(),
            );
        }
        Err(e) => report.fail(Layer::Evidence, "evidence record written", e),
    }
}

/// Every plugin run left a complete trace: stdin, exit status, duration.
fn evidence_complete(report: &mut Report, record: &evidence::Record) {
    let calls: Vec<&evidence::Call> = record.operations.iter().flat_map(|o| &o.calls).collect();
    if calls.is_empty() {
        report.record(
            Layer::Evidence,
            "every plugin run traced",
            Verdict::Skip,
            "no plugin ran",
        );
        return;
    }
    let incomplete: Vec<String> = calls
        .iter()
        .filter(|c| c.exit_status.is_none() || c.duration_ms.is_none() || c.env.is_empty())
        .map(|c| format!("{} {}", c.plugin, c.container_id))
        .collect();
    report.check(
        Layer::Evidence,
        "every plugin run traced with stdin, CNI_* env, stdout, stderr, exit status and duration",
        incomplete.is_empty(),
        if incomplete.is_empty() {
            format!(
                "{} runs, {} binaries identified",
                calls.len(),
                record.binaries.len()
            )
        } else {
            format!("incomplete: {}", incomplete.join(", "))
        },
    );
}

fn run_in(
    opts: &LabOptions,
    scratch: &Scratch,
    namespaces: &mut Namespaces,
    report: &mut Report,
) -> Option<evidence::Tracer> {
    let real_bin_dir = match config::plugin_dir(opts.bin_dir.as_deref(), scratch) {
        Ok(d) => d,
        Err(e) => {
            report.fail(Layer::Setup, "find the plugins", e);
            return None;
        }
    };
    let prepared = match config::prepare(opts.config.as_deref(), scratch) {
        Ok(p) => p,
        Err(e) => {
            report.fail(Layer::Setup, "load the network config", e);
            return None;
        }
    };
    let mut tracer = match evidence::Tracer::new(&real_bin_dir, scratch.path()) {
        Ok(t) => t,
        Err(e) => {
            report.fail(Layer::Setup, "trace the plugins", e);
            return None;
        }
    };
    tracer.record.config = Some(evidence::ConfigRecord {
        source: prepared.source.clone(),
        raw: String::from_utf8_lossy(&prepared.raw).into_owned(),
        sha256: evidence::sha256_hex(&prepared.raw),
        as_run: String::from_utf8_lossy(prepared.network.config_bytes()).into_owned(),
        as_run_sha256: evidence::sha256_hex(prepared.network.config_bytes()),
    });
    run_traced(&mut tracer, &prepared, scratch, namespaces, report);
    evidence_complete(report, &tracer.record);
    Some(tracer)
}

fn run_traced(
    tracer: &mut evidence::Tracer,
    prepared: &Prepared,
    scratch: &Scratch,
    namespaces: &mut Namespaces,
    report: &mut Report,
) {
    report.check(
        Layer::Setup,
        format!("network {:?} loaded", prepared.network.name()),
        true,
        prepared.note.clone(),
    );
    let rt = Runtime::new(
        vec![tracer.bin_dir().to_path_buf()],
        scratch.path().join("cache"),
    );
    let networks = SandboxNetworks::new(vec![prepared.network.clone()], true);
    if !plugins_validated(tracer, report, &rt, &networks) {
        return;
    }
    let Some((host, a, b)) = create_namespaces(namespaces, report) else {
        return;
    };
    let scope = scope::Scope {
        host_ns: failures::ns_name(&host),
        pod_ns: Vec::new(),
        lease_dirs: prepared.lease_dir.iter().cloned().collect(),
        tuning_dir: scratch.path().join("tuning"),
        cache_dir: rt.cache_dir().to_path_buf(),
    };
    let before_run = scope.capture();
    if let Err(e) = &before_run {
        report.fail(Layer::Snapshot, "the lab's scope before the run", e);
    }
    let mut pods = [
        Pod {
            label: "pod-a",
            ns: a,
            container_id: format!("rcnilab{}a", std::process::id()),
            result: None,
        },
        Pod {
            label: "pod-b",
            ns: b,
            container_id: format!("rcnilab{}b", std::process::id()),
            result: None,
        },
    ];
    let run = PodRun {
        rt: &rt,
        networks: &networks,
        host: &host,
        prepared,
    };
    run.set_up(tracer, report, &mut pods);
    run.verify(report, &pods);
    run.check_and_repeat(tracer, report, &pods);
    run.tear_down(tracer, report, &pods);

    let shared = shared::bridges(&prepared.list);
    let bench = failures::Bench {
        rt: &rt,
        host: &host,
        prepared,
        scope: scope.clone(),
        args: request(&pods[0]).args,
        shared: shared.clone(),
        scratch,
    };
    failures::run_all(report, tracer, &bench, namespaces);

    if let Ok(before) = before_run {
        let ids = shared::Identities::of(&tracer.record, prepared.network.name());
        shared::whole_run_diff(report, &scope, &before, &shared, &ids);
    }
}

/// Every plugin must exist and speak the network's version before anything is attached.
fn plugins_validated(
    tracer: &mut evidence::Tracer,
    report: &mut Report,
    rt: &Runtime,
    networks: &SandboxNetworks,
) -> bool {
    let real_dir = tracer.record.bin_dir.clone();
    for m in networks.members() {
        let what = format!(
            "plugins of {:?} found and support its version",
            m.network.name()
        );
        match rt.validate(&m.network) {
            Ok(_) => report.check(
                Layer::Setup,
                what,
                true,
                format!("{} in {real_dir}", m.network.plugin_types().join(" -> "),),
            ),
            Err(e) => {
                tracer.operation(format!("validate {:?}", m.network.name()));
                report.fail(Layer::Setup, what, e);
                return false;
            }
        };
    }
    tracer.operation("validate: VERSION of every plugin");
    true
}

/// The throwaway host namespace and the two pods' namespaces.
fn create_namespaces(
    namespaces: &mut Namespaces,
    report: &mut Report,
) -> Option<(NetNs, NetNs, NetNs)> {
    let made = match (
        namespaces.create("host"),
        namespaces.create("a"),
        namespaces.create("b"),
    ) {
        (Ok(h), Ok(a), Ok(b)) => (h, a, b),
        (h, a, b) => {
            let err = [h.err(), a.err(), b.err()]
                .into_iter()
                .flatten()
                .next()
                .unwrap_or_default();
            report.fail(Layer::Setup, "create the host and pod namespaces", err);
            return None;
        }
    };
    report.check(
        Layer::Setup,
        "throwaway host and pod namespaces created",
        true,
        namespaces.names().join(", "),
    );
    Some(made)
}

/// What the pods' ADD, CHECK and DEL run with.
struct PodRun<'a> {
    rt: &'a Runtime,
    networks: &'a SandboxNetworks,
    host: &'a NetNs,
    prepared: &'a Prepared,
}

impl PodRun<'_> {
    /// ADD of every pod; plugins run as children of a thread inside the host namespace, so
    /// they inherit it.
    fn set_up(&self, tracer: &mut evidence::Tracer, report: &mut Report, pods: &mut [Pod]) {
        for pod in pods.iter_mut() {
            let req = request(pod);
            match self
                .host
                .run(|| self.networks.setup(self.rt, &req, SetupMode::Serial))
            {
                Ok(Ok(result)) => {
                    report.check(
                        Layer::Setup,
                        format!("{}: ADD of lo and eth0", pod.label),
                        true,
                        "",
                    );
                    pod.result = Some(result);
                }
                Ok(Err(e)) => report.fail(Layer::Setup, format!("{}: ADD", pod.label), e),
                Err(e) => report.fail(
                    Layer::Setup,
                    format!("{}: enter host namespace", pod.label),
                    e,
                ),
            }
            tracer.operation(format!("{}: ADD {}", pod.label, pod.container_id));
        }
    }

    /// The plugins' results, the kernel and the leases of every attached pod, then traffic
    /// between the two.
    fn verify(&self, report: &mut Report, pods: &[Pod]) {
        let network = &self.prepared.network;
        for pod in pods {
            let Some(result) = &pod.result else { continue };
            let net_result = checks::network_result(result, network);
            checks::plugin_result(report, pod.label, net_result, &pod.ns);
            checks::kernel(report, pod.label, net_result, &pod.ns, self.host);
            checks::leases(
                report,
                pod.label,
                net_result,
                self.prepared,
                &pod.container_id,
            );
        }
        if let (Some(ra), Some(rb)) = (&pods[0].result, &pods[1].result) {
            checks::traffic(
                report,
                &pods[0].ns,
                checks::network_result(ra, network),
                &pods[1].ns,
                checks::network_result(rb, network),
            );
        } else {
            report.record(
                Layer::Traffic,
                "HTTP from pod-a to pod-b",
                Verdict::Skip,
                "a pod has no attachment",
            );
        }
    }

    /// CHECK of every attached pod, and a repeated ADD of the first.
    fn check_and_repeat(&self, tracer: &mut evidence::Tracer, report: &mut Report, pods: &[Pod]) {
        for pod in pods.iter().filter(|p| p.result.is_some()) {
            let req = request(pod);
            lifecycle::check(report, pod.label, self.host, self.networks, self.rt, &req);
            tracer.operation(format!("{}: CHECK {}", pod.label, pod.container_id));
        }
        if let Some(pod) = pods.first().filter(|p| p.result.is_some()) {
            lifecycle::repeated_add(
                report,
                pod.label,
                &pod.ns,
                self.host,
                self.networks,
                self.rt,
                &request(pod),
                self.prepared.lease_dir.as_deref(),
            );
            tracer.operation(format!("{}: repeated ADD {}", pod.label, pod.container_id));
        }
    }

    /// DEL of every pod, and what each attached pod left behind.
    fn tear_down(&self, tracer: &mut evidence::Tracer, report: &mut Report, pods: &[Pod]) {
        let network = &self.prepared.network;
        for pod in pods {
            let before = pod
                .result
                .as_ref()
                .map(|r| checks::Snapshot::of(checks::network_result(r, network), self.host));
            let req = request(pod);
            match self.host.run(|| self.networks.teardown(self.rt, &req)) {
                Ok(Ok(())) => {
                    report.check(
                        Layer::Teardown,
                        format!("{}: DEL of eth0 and lo", pod.label),
                        true,
                        "",
                    );
                }
                Ok(Err(e)) => report.fail(Layer::Teardown, format!("{}: DEL", pod.label), e),
                Err(e) => report.fail(
                    Layer::Teardown,
                    format!("{}: enter host namespace", pod.label),
                    e,
                ),
            }
            tracer.operation(format!("{}: DEL {}", pod.label, pod.container_id));
            if let Some(before) = before {
                checks::nothing_left(
                    report,
                    pod.label,
                    &before,
                    &pod.ns,
                    self.host,
                    self.prepared,
                    &pod.container_id,
                    self.rt,
                );
            }
        }
    }
}

fn request(pod: &Pod) -> SandboxRequest {
    SandboxRequest {
        container_id: pod.container_id.clone(),
        netns: pod.ns.path().to_path_buf(),
        args: vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAMESPACE".into(), "rcni-lab".into()),
            ("K8S_POD_NAME".into(), pod.label.into()),
        ],
        capability_args: Default::default(),
    }
}

/// The network proven, and where its IPAM keeps leases.
pub struct Prepared {
    pub network: Network,
    /// The conflist as run (with the lab's `dataDir`), for the failure variants.
    pub list: serde_json::Value,
    /// The config's bytes as given, and where they came from.
    pub raw: Vec<u8>,
    pub source: String,
    /// host-local's `<dataDir>/<network>` when the network uses host-local.
    pub lease_dir: Option<PathBuf>,
    pub note: String,
}
