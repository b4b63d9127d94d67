//! rcni-bench: rcni against the Go reference plugins, side by side, in one run.
//!
//! Everything runs inside a throwaway "host" namespace this process creates and enters; pods are
//! further throwaway namespaces. Results: `<out>/results.md`, `<out>/results.jsonl`, and the
//! chart drawn from the JSON lines by `bench/plot.py`.

mod chain;
mod churn;
mod configs;
mod density;
mod exec;
mod floor;
mod hostlocal_scale;
mod latency;
mod ns;
mod overhead;
mod phases;
mod pods;
mod pods_floor;
mod portmap_scale;
mod report;
mod resources;
mod startup;
mod stats;
mod stop;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use chain::Impl;
use report::Report;

struct Options {
    quick: bool,
    /// The figures to run (every one when empty), by [`STEPS`] name.
    only: Vec<String>,
    out: PathBuf,
    rcni_plugins: PathBuf,
    rcni_cli: PathBuf,
    go_dir: PathBuf,
    /// A statically linked program that exits at once (`bench/noop.c`), for the runtime
    /// figure's process floor; that row is left out without it.
    noop: Option<PathBuf>,
}

fn parse_args() -> Result<Options> {
    let mut o = Options {
        quick: false,
        only: Vec::new(),
        out: PathBuf::from("bench/out"),
        rcni_plugins: PathBuf::from("target/release/rcni-plugins"),
        rcni_cli: PathBuf::from("target/release/rcni"),
        go_dir: PathBuf::from("/usr/lib/cni"),
        noop: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => o.quick = true,
            "--out" => o.out = value()?.into(),
            "--only" => o.only.extend(parse_only(&value()?)?),
            "--rcni-plugins" => o.rcni_plugins = value()?.into(),
            "--rcni" => o.rcni_cli = value()?.into(),
            "--go-dir" => o.go_dir = value()?.into(),
            "--noop" => o.noop = Some(value()?.into()),
            "-h" | "--help" => {
                println!(
                    "usage: rcni-bench [--quick] [--only FIGURE[,FIGURE]] [--out DIR] \
                     [--rcni-plugins BIN] [--rcni BIN] [--go-dir DIR] [--noop BIN]\nfigures: {}",
                    STEPS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(o)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A directory of links named after every plugin, all pointing at the multi-call binary.
fn rcni_plugin_dir(bin: &std::path::Path, dir: &std::path::Path) -> Result<PathBuf> {
    let target = std::fs::canonicalize(bin).with_context(|| {
        format!(
            "{} not found: build with cargo build --release",
            bin.display()
        )
    })?;
    let d = dir.join("rcni-bin");
    std::fs::create_dir_all(&d)?;
    for name in [
        "loopback",
        "bridge",
        "host-local",
        "ptp",
        "portmap",
        "static",
        "firewall",
        "tuning",
        "bandwidth",
    ] {
        let link = d.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)?;
    }
    Ok(d)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("__rss") {
        if let Err(e) = resources::rss_probe() {
            eprintln!("rss probe: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    stop::install();
    if let Err(e) = run() {
        eprintln!("rcni-bench: {e:#}");
        std::process::exit(1);
    }
}

/// One step of the run: its `--only` name and the figures (`"figure"` in results.jsonl) it
/// produces.
struct Step {
    name: &'static str,
    figures: &'static [&'static str],
}

const STEPS: &[Step] = &[
    Step {
        name: "startup",
        figures: &["startup"],
    },
    Step {
        name: "latency",
        figures: &["latency"],
    },
    Step {
        name: "kernel-floor",
        figures: &["kernel floor"],
    },
    Step {
        name: "phases",
        figures: &["phases"],
    },
    Step {
        name: "runtime",
        figures: &["runtime"],
    },
    Step {
        name: "churn",
        figures: &["churn"],
    },
    Step {
        name: "pods",
        figures: &["pods"],
    },
    Step {
        name: "resources",
        figures: &["size", "resources"],
    },
    Step {
        name: "host-local-scale",
        figures: &[hostlocal_scale::FIGURE],
    },
    Step {
        name: "portmap-scale",
        figures: &[portmap_scale::FIGURE],
    },
    Step {
        name: "density",
        figures: &[density::FIGURE],
    },
];

/// The step names of an `--only` value: comma-separated step or figure names, spaces and
/// dashes alike (`host-local-scale`, `"host-local scale"`, `size`).
fn parse_only(value: &str) -> Result<Vec<String>> {
    value
        .split(',')
        .map(|w| w.trim().replace(' ', "-"))
        .filter(|w| !w.is_empty())
        .map(|w| {
            STEPS
                .iter()
                .find(|s| s.name == w || s.figures.iter().any(|f| f.replace(' ', "-") == w))
                .map(|s| s.name.to_string())
                .with_context(|| {
                    let names: Vec<_> = STEPS.iter().map(|s| s.name).collect();
                    format!("unknown figure {w:?} (one of: {})", names.join(", "))
                })
        })
        .collect()
}

fn run() -> Result<()> {
    let started = std::time::Instant::now();
    let o = parse_args()?;
    let wanted = |name: &str| o.only.is_empty() || o.only.iter().any(|n| n == name);
    let (runs_version, runs_latency, churn_n) = if o.quick { (5, 3, 4) } else { (300, 60, 100) };
    let work = tempdir()?;
    let rcni = Impl {
        label: "rcni",
        dir: rcni_plugin_dir(&o.rcni_plugins, &work.0)?,
    };
    let go = Impl {
        label: "go",
        dir: o.go_dir.clone(),
    };
    if !go.plugin("bridge").exists() {
        bail!(
            "Go reference plugins not found in {} (apt-get install containernetworking-plugins)",
            o.go_dir.display()
        );
    }
    let rcni_cli = std::fs::canonicalize(&o.rcni_cli).unwrap_or(o.rcni_cli.clone());
    let out = std::env::current_dir()?.join(&o.out);
    // What bench/run checks for afterwards: the figures of the steps asked for.
    std::fs::create_dir_all(&out)?;
    let expected: String = STEPS
        .iter()
        .filter(|s| wanted(s.name))
        .flat_map(|s| s.figures.iter().map(|f| format!("{f}\n")))
        .collect();
    std::fs::write(out.join("figures.txt"), expected)?;

    let load_start = loadavg();
    let host = ns::NamedNs::create("host")?;
    ns::enter(&host)?;
    let mut report = Report::default();
    let step = |name: &str| {
        let run = wanted(name);
        if run {
            eprintln!(
                "rcni-bench: {name} (at {:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
        run
    };
    run_figures(
        &mut report,
        &o,
        (&rcni, &go),
        &rcni_cli,
        &work.0,
        step,
        (runs_version, runs_latency, churn_n),
    )?;
    let leftovers = ns::links_with_prefix("veth");
    let took = started.elapsed().as_secs_f64();
    report.notes.push(format!(
        "Machine load (1/5/15 min) at start: {load_start}; at end: {}. Runs: {runs_version} VERSION, \
         {runs_latency} attachments per chain, churn {churn_n}. Times are medians, spawn to exit. \
         rcni/Go below 1 means rcni is faster for ms, and above 1 means rcni does more for att/s. \
         Leftover host veths after all figures: {}. Figures: {}. Total duration: {:.0} min {:.0} s.",
        loadavg(),
        leftovers.len(),
        if o.only.is_empty() { "all".to_string() } else { o.only.join(", ") },
        (took / 60.0).floor(),
        took % 60.0,
    ));
    report.write(&out)?;
    print!("{}", report.markdown());
    eprintln!(
        "rcni-bench: wrote {} after {:.0} min {:.0} s",
        out.display(),
        (took / 60.0).floor(),
        took % 60.0
    );
    if !leftovers.is_empty() {
        bail!("leftover host interfaces: {leftovers:?}");
    }
    Ok(())
}

/// Every figure `step` accepts, in order, into `report`.
fn run_figures(
    report: &mut Report,
    o: &Options,
    (rcni, go): (&Impl, &Impl),
    rcni_cli: &Path,
    work: &Path,
    step: impl Fn(&str) -> bool,
    (runs_version, runs_latency, churn_n): (usize, usize, usize),
) -> Result<()> {
    if step("startup") {
        startup::measure(report, rcni, go, runs_version)?;
    }
    if step("latency") {
        latency::measure(report, rcni, go, runs_latency, work)?;
    }
    if step("kernel-floor") {
        floor::measure(report, runs_latency)?;
    }
    if step("phases") {
        phases::measure(report, rcni, runs_latency, work)?;
    }
    if step("runtime") {
        overhead::measure(
            report,
            rcni_cli,
            rcni,
            o.noop.as_deref(),
            runs_latency,
            work,
        )?;
    }
    if step("churn") {
        churn::measure(report, rcni, go, churn_n, work)?;
    }
    if step("pods") {
        let size = if o.quick { (6, 3, 12) } else { (100, 16, 1000) };
        pods::measure(report, rcni_cli, (rcni, go), size, work)?;
    }
    if step("resources") {
        resources::measure(report, rcni, go, work)?;
    }
    if step("host-local-scale") {
        if let Err(e) = hostlocal_scale::measure(report, rcni, go, o.quick, work) {
            report.add_row(hostlocal_scale::failed_row(&e));
        }
    }
    if step("portmap-scale") {
        portmap_scale::measure(report, rcni, go, o.quick)?;
    }
    if step("density") {
        density::measure(report, rcni, go, o.quick, work)?;
    }
    Ok(())
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

fn tempdir() -> Result<TempDir> {
    let p = std::env::temp_dir().join(format!("rcni-bench-{}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(TempDir(p))
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_takes_step_and_figure_names() {
        let got = parse_only("host-local-scale, portmap scale,size").unwrap();
        assert_eq!(got, ["host-local-scale", "portmap-scale", "resources"]);
        assert!(parse_only("nonsense").is_err());
        assert!(parse_only("").unwrap().is_empty());
    }
}
