//! The verbs.

use serde_json::{json, Value};

use cni_runtime::{discover, AttachmentId, Discovery, Network, Runtime};
use cni_types::code;

use crate::cli::{AttachArgs, Cli, Command, DoctorCommand, GcArgs, Global};
use crate::failure::Failure;
use crate::output::print_json;
use crate::{diagnostics, netns, setup};

/// Runs the parsed command line.
pub fn run(cli: &Cli) -> Result<(), Failure> {
    let g = &cli.global;
    match &cli.command {
        Command::Add(a) => add(g, a),
        Command::Del(a) => with_attachment(g, a, "del", |rt, net, att| {
            rt.del_with_cached_args(net, att)
        }),
        Command::Check(a) => with_attachment(g, a, "check", |rt, net, att| {
            rt.check(net, &rt.complete_from_cache(net, att))
        }),
        Command::Status(n) => status(g, &n.network),
        Command::Gc(a) => gc(g, a),
        Command::Version(n) => version(g, &n.network),
        Command::Validate(n) => validate(g, &n.network),
        Command::List => list(g),
        Command::Netns(c) => netns::run(c, g.json),
        Command::Lab(l) => diagnostics::lab(g, l),
        Command::Conformance(c) => diagnostics::conformance(g, c),
        Command::Doctor(d) => match &d.command {
            Some(DoctorCommand::Explain { message }) => diagnostics::explain(g, message),
            None => diagnostics::doctor(g, d),
        },
        Command::Pod(p) => crate::pod::run(g, p),
        Command::Repair(r) => crate::repair::run(g, r),
        Command::Policy(p) => crate::policy::run(p, g.json),
        Command::Flows(f) => crate::flows::run(f, g.json),
    }
}

/// The named network. Files that could not be loaded are not reported here (`rcni list`
/// shows them); when the network is missing, the error names them.
fn network(g: &Global, verb: &str, name: &str) -> Result<Network, Failure> {
    let found: Discovery = discover(&g.conf_dir).map_err(|e| Failure::runtime(verb, &e))?;
    found
        .require(name)
        .cloned()
        .map_err(|e| Failure::runtime(verb, &e))
}

fn add(g: &Global, a: &AttachArgs) -> Result<(), Failure> {
    let net = network(g, "add", &a.network)?;
    let att = setup::attachment(g, &a.netns)?;
    let rt = setup::runtime(g);
    let result = rt
        .add(&net, &att)
        .map_err(|e| Failure::runtime("add", &e))?;
    let rendered = result
        .to_value(result.cni_version)
        .map_err(|e| Failure::other("add", code::INTERNAL, e.to_string()))?;
    print_json(&rendered);
    Ok(())
}

fn with_attachment(
    g: &Global,
    a: &AttachArgs,
    verb: &str,
    op: impl FnOnce(
        &Runtime,
        &Network,
        &cni_runtime::Attachment,
    ) -> Result<(), cni_runtime::RuntimeError>,
) -> Result<(), Failure> {
    let net = network(g, verb, &a.network)?;
    let att = setup::attachment(g, &a.netns)?;
    op(&setup::runtime(g), &net, &att).map_err(|e| Failure::runtime(verb, &e))
}

fn status(g: &Global, name: &str) -> Result<(), Failure> {
    let net = network(g, "status", name)?;
    setup::runtime(g)
        .status(&net)
        .map_err(|e| Failure::runtime("status", &e))?;
    if g.json {
        print_json(&json!({"network": name, "ready": true, "cniVersion": net.version.to_string()}));
    } else if net.version.allows_status_and_gc() {
        println!("{name}: ready");
    } else {
        println!(
            "{name}: ready (version {} has no STATUS; nothing was asked)",
            net.version
        );
    }
    Ok(())
}

fn gc(g: &Global, a: &GcArgs) -> Result<(), Failure> {
    let valid = a
        .valid
        .iter()
        .map(|v| match v.split_once(':') {
            Some((cid, ifname)) if !cid.is_empty() && !ifname.is_empty() => {
                Ok(AttachmentId::new(&a.network, cid, ifname))
            }
            _ => Err(Failure::usage(format!(
                "--valid {v:?}: expected CONTAINER_ID:IFNAME"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let net = network(g, "gc", &a.network)?;
    setup::runtime(g)
        .gc(&net, &valid)
        .map_err(|e| Failure::runtime("gc", &e))
}

fn version(g: &Global, name: &str) -> Result<(), Failure> {
    let net = network(g, "version", name)?;
    let answers = setup::runtime(g).version(&net);
    let mut failed = None;
    let mut out = Vec::new();
    for a in &answers {
        match &a.info {
            Ok(info) => {
                if g.json {
                    out.push(json!({"type": a.plugin_type, "cniVersion": info.cni_version, "supportedVersions": info.supported_versions}));
                } else {
                    println!("{}: {}", a.plugin_type, info.supported_versions.join(", "));
                }
            }
            Err(e) => {
                if g.json {
                    out.push(json!({"type": a.plugin_type, "error": e.to_cni_error()}));
                } else {
                    println!("{}: error: {e}", a.plugin_type);
                }
                failed.get_or_insert_with(|| Failure::runtime("version", e));
            }
        }
    }
    if g.json {
        print_json(
            &json!({"network": name, "cniVersion": net.version.to_string(), "plugins": out}),
        );
    }
    failed.map_or(Ok(()), Err)
}

fn validate(g: &Global, name: &str) -> Result<(), Failure> {
    let net = network(g, "validate", name)?;
    let report = setup::runtime(g)
        .validate(&net)
        .map_err(|e| Failure::runtime("validate", &e))?;
    if g.json {
        print_json(&json!({
            "network": name,
            "cniVersion": net.version.to_string(),
            "plugins": net.plugin_types(),
            "capabilities": report.capabilities,
            "warnings": report.warnings,
        }));
    } else {
        println!(
            "{name}: ok (version {}, plugins: {})",
            net.version,
            net.plugin_types().join(" -> ")
        );
        if !report.capabilities.is_empty() {
            let caps: Vec<&str> = report.capabilities.iter().map(String::as_str).collect();
            println!("capabilities: {}", caps.join(", "));
        }
        for w in &report.warnings {
            println!("warning: {w}");
        }
    }
    Ok(())
}

fn list(g: &Global) -> Result<(), Failure> {
    let found = discover(&g.conf_dir).map_err(|e| Failure::runtime("list", &e))?;
    if g.json {
        let nets: Vec<Value> = found
            .networks
            .iter()
            .enumerate()
            .map(|(i, n)| {
                json!({
                    "name": n.name(),
                    "cniVersion": n.version.to_string(),
                    "plugins": n.plugin_types(),
                    "file": n.source.as_ref().map(|p| p.display().to_string()),
                    "default": i == 0,
                })
            })
            .collect();
        let warnings: Vec<Value> = found
            .warnings
            .iter()
            .map(|w| json!({"file": w.file.display().to_string(), "line": w.line, "column": w.column, "message": w.message}))
            .collect();
        print_json(
            &json!({"confDir": found.dir.display().to_string(), "networks": nets, "errors": warnings}),
        );
        return Ok(());
    }
    if found.networks.is_empty() {
        println!("no networks in {}", found.dir.display());
    }
    for (i, n) in found.networks.iter().enumerate() {
        let file = n
            .source
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        println!(
            "{}{}  version {}  plugins: {}  ({file})",
            n.name(),
            if i == 0 { " (default)" } else { "" },
            n.version,
            n.plugin_types().join(" -> "),
        );
    }
    for w in &found.warnings {
        println!("error: {w}");
    }
    Ok(())
}
