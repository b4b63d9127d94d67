//! `rcni lab`: proves a pod attachment end to end on four layers, inside namespaces it makes
//! and removes itself.
//!
//! 1. what the plugin said (the result),
//! 2. the kernel objects, read back through netlink (not `ip`),
//! 3. the IPAM lease files,
//! 4. a real HTTP request from pod A to pod B's address,
//!
//! then deletes everything and proves nothing is left. The "host" is a throwaway namespace:
//! the plugins run inside it, so the machine's root namespace is never touched.

mod checks;
mod config;
mod http;
mod report;
mod scratch;

use std::path::PathBuf;

use cni_linux::NetNs;
use cni_runtime::sandbox::{SandboxNetworks, SandboxRequest, SetupMode};
use cni_runtime::{Network, Runtime, SandboxResult};

pub use report::{Layer, Report, Verdict};
use scratch::{LabNamespaces, Scratch};

/// What the lab is asked to do.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// A conflist to prove instead of the built-in bridge + host-local one.
    pub config: Option<PathBuf>,
    /// Where the plugins are; default: links to `rcni-plugins` next to this executable.
    pub bin_dir: Option<PathBuf>,
    /// Print one JSON document instead of the step-by-step text.
    pub json: bool,
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
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(e) => {
            report.fail(Layer::Setup, "create a scratch directory", e);
            return report;
        }
    };
    let mut namespaces = LabNamespaces::default();
    run_in(opts, &scratch, &mut namespaces, &mut report);
    // Namespaces go last, and their removal is itself checked.
    let names = namespaces.names();
    let removed = namespaces.remove_all();
    let left: Vec<String> = names
        .iter()
        .filter(|n| std::path::Path::new("/run/netns").join(n).exists())
        .cloned()
        .collect();
    checks::namespaces_removed(&mut report, &names, removed, &left);
    if opts.json {
        println!("{}", report.to_json());
    } else {
        println!(
            "rcni lab: {} passed, {} failed, {} skipped",
            report.count(Verdict::Pass),
            report.count(Verdict::Fail),
            report.count(Verdict::Skip)
        );
    }
    report
}

fn run_in(
    opts: &LabOptions,
    scratch: &Scratch,
    namespaces: &mut LabNamespaces,
    report: &mut Report,
) {
    let bin_dir = match config::plugin_dir(opts.bin_dir.as_deref(), scratch) {
        Ok(d) => d,
        Err(e) => return report.fail(Layer::Setup, "find the plugins", e),
    };
    let prepared = match config::prepare(opts.config.as_deref(), scratch) {
        Ok(p) => p,
        Err(e) => return report.fail(Layer::Setup, "load the network config", e),
    };
    report.check(
        Layer::Setup,
        format!("network {:?} loaded", prepared.network.name()),
        true,
        prepared.note.clone(),
    );
    let rt = Runtime::new(vec![bin_dir.clone()], scratch.path().join("cache"));
    let networks = SandboxNetworks::new(vec![prepared.network.clone()], true);
    // Every plugin must exist and speak the network's version before anything is attached.
    for m in networks.members() {
        match rt.validate(&m.network) {
            Ok(_) => report.check(
                Layer::Setup,
                format!(
                    "plugins of {:?} found and support its version",
                    m.network.name()
                ),
                true,
                format!(
                    "{} in {}",
                    m.network.plugin_types().join(" -> "),
                    bin_dir.display()
                ),
            ),
            Err(e) => {
                return report.fail(
                    Layer::Setup,
                    format!(
                        "plugins of {:?} found and support its version",
                        m.network.name()
                    ),
                    e,
                )
            }
        };
    }
    let (host, a, b) = match (
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
            return report.fail(Layer::Setup, "create the host and pod namespaces", err);
        }
    };
    report.check(
        Layer::Setup,
        "throwaway host and pod namespaces created",
        true,
        namespaces.names().join(", "),
    );
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

    for pod in pods.iter_mut() {
        let req = request(pod);
        // Plugins run as children of a thread inside the host namespace, so they inherit it.
        match host.run(|| networks.setup(&rt, &req, SetupMode::Serial)) {
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
    }

    for pod in &pods {
        let Some(result) = &pod.result else { continue };
        let net_result = checks::network_result(result, &prepared.network);
        checks::plugin_result(report, pod.label, net_result, &pod.ns);
        checks::kernel(report, pod.label, net_result, &pod.ns, &host);
        checks::leases(report, pod.label, net_result, &prepared, &pod.container_id);
    }

    if let (Some(ra), Some(rb)) = (&pods[0].result, &pods[1].result) {
        checks::traffic(
            report,
            &pods[0].ns,
            checks::network_result(ra, &prepared.network),
            &pods[1].ns,
            checks::network_result(rb, &prepared.network),
        );
    } else {
        report.record(
            Layer::Traffic,
            "HTTP from pod-a to pod-b",
            Verdict::Skip,
            "a pod has no attachment",
        );
    }

    for pod in &pods {
        let before = pod
            .result
            .as_ref()
            .map(|r| checks::Snapshot::of(checks::network_result(r, &prepared.network), &host));
        let req = request(pod);
        match host.run(|| networks.teardown(&rt, &req)) {
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
        if let Some(before) = before {
            checks::nothing_left(
                report,
                pod.label,
                &before,
                &pod.ns,
                &host,
                &prepared,
                &pod.container_id,
                &rt,
            );
        }
    }
}

fn request(pod: &Pod) -> SandboxRequest {
    SandboxRequest {
        container_id: pod.container_id.clone(),
        netns: pod.ns.path().display().to_string(),
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
    /// host-local's `<dataDir>/<network>` when the network uses host-local.
    pub lease_dir: Option<PathBuf>,
    pub note: String,
}
