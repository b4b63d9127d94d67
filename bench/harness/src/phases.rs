//! Figure "phases": where a bridge+host-local ADD and DEL spend their time.
//!
//! The rcni bridge plugin is run directly with `RCNI_TRACE_PHASES=<file>`; it appends one line
//! per finished phase with a `CLOCK_MONOTONIC` time and its cumulative kernel work (netlink
//! exchanges, sysctl accesses, namespace threads). The harness reads the same clock just
//! before the spawn and after the exit, so the first phase is exec and loader start up to
//! `main` and the last is writing the result and exiting. A delegated IPAM process writes its
//! own lines; its `main` splits the IPAM phase into starting that process and the rest.
//!
//! The two chains (without and with ipMasq) alternate run by run. The figure checks two targets
//! (docs/performance.md, "The runtime's own cost and where a bridge ADD spends its time"): on
//! figure 2's medians, a bridge+host-local ADD, with and without ipMasq, within 2x of kernel
//! floor + one process start; on its own alternating runs, the DEL with ipMasq within 1.1x of
//! the DEL without.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use cni_linux::counters::monotonic_ns;
use serde_json::{Map, Value};

use crate::chain::{request, Attachment, Impl};
use crate::configs::{conflist, ChainKind};
use crate::exec::{command, Call};
use crate::ns::NamedNs;
use crate::report::{Report, Row};
use crate::stats::median;
use crate::stop;

/// Slots clear of figure 2 (0, 1), the runtime figure (2) and churn (10 and up).
const SLOTS: [(ChainKind, u8); 2] = [(ChainKind::Bridge, 5), (ChainKind::BridgeMasq, 6)];
const TRACE_ENV: &str = "RCNI_TRACE_PHASES";

/// One phase of one run: its time and the kernel work done in it.
#[derive(Default, Clone, Copy)]
struct Cost {
    ms: f64,
    netlink: f64,
    netlink_ms: f64,
    sysctl: f64,
    sysctl_ms: f64,
    ns_thread: f64,
    ns_thread_ms: f64,
}

/// The phases of one run, in order.
type Phases = Vec<(String, Cost)>;

/// A trace line.
struct Mark {
    pid: u64,
    plugin: String,
    phase: String,
    t_ns: i128,
    counters: [f64; 6],
}

fn parse(line: &str) -> Option<Mark> {
    let v: Value = serde_json::from_str(line).ok()?;
    let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Some(Mark {
        pid: v["pid"].as_u64()?,
        plugin: v["plugin"].as_str()?.to_string(),
        phase: v["phase"].as_str()?.to_string(),
        t_ns: i128::from(v["t_ns"].as_i64()?),
        counters: [
            n("netlink"),
            n("netlink_ns"),
            n("sysctl"),
            n("sysctl_ns"),
            n("ns_thread"),
            n("ns_thread_ns"),
        ],
    })
}

fn cost(from_ns: i128, to: &Mark, before: [f64; 6]) -> Cost {
    let d = |i: usize| to.counters[i] - before[i];
    Cost {
        ms: (to.t_ns - from_ns) as f64 / 1e6,
        netlink: d(0),
        netlink_ms: d(1) / 1e6,
        sysctl: d(2),
        sysctl_ms: d(3) / 1e6,
        ns_thread: d(4),
        ns_thread_ms: d(5) / 1e6,
    }
}

/// Runs the bridge plugin once with tracing on and splits spawn-to-exit into phases.
fn traced(
    imp: &Impl,
    cmd: &str,
    stdin: &[u8],
    att: &Attachment,
    trace: &Path,
) -> Result<(Phases, Vec<u8>)> {
    let _ = std::fs::remove_file(trace);
    let bin = imp.plugin("bridge");
    let call = Call {
        bin: &bin,
        command: cmd,
        container_id: att.container_id,
        netns: att.netns,
        ifname: att.ifname,
        path: &imp.dir.display().to_string(),
        stdin,
    };
    let mut c = command(&call, None);
    c.env(TRACE_ENV, trace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = monotonic_ns();
    let mut child = c.spawn().context("spawning the bridge plugin")?;
    let pid = u64::from(child.id());
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin);
    }
    let out = child.wait_with_output()?;
    let end = monotonic_ns();
    if !out.status.success() {
        bail!(
            "bridge {cmd} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let marks: Vec<Mark> = std::fs::read_to_string(trace)
        .with_context(|| format!("no phase trace in {}", trace.display()))?
        .lines()
        .filter_map(parse)
        .collect();
    let ours: Vec<&Mark> = marks.iter().filter(|m| m.pid == pid).collect();
    let ipam_main = marks.iter().find(|m| m.pid != pid && m.phase == "main");
    let mut phases = Vec::new();
    let (mut t, mut before) = (start, [0.0; 6]);
    for m in &ours {
        let name = match m.phase.as_str() {
            "main" => "exec + loader start".to_string(),
            "conf" => "stdin, env and config parsing".to_string(),
            "ipam" if ipam_main.is_some() => {
                // Split at the delegate's own `main`: process start, then its work.
                let im = ipam_main.expect("checked");
                let start = Cost {
                    ms: (im.t_ns - t) as f64 / 1e6,
                    ..Cost::default()
                };
                phases.push((format!("ipam: start {}", im.plugin), start));
                t = im.t_ns;
                format!("ipam: {} work and exit", im.plugin)
            }
            other => other.to_string(),
        };
        phases.push((name, cost(t, m, before)));
        t = m.t_ns;
        before = m.counters;
    }
    phases.push((
        "result output + exit".to_string(),
        Cost {
            ms: (end - t) as f64 / 1e6,
            ..Cost::default()
        },
    ));
    Ok((phases, out.stdout))
}

/// Per-phase samples in the order phases were first seen.
#[derive(Default)]
struct Table {
    order: Vec<String>,
    samples: BTreeMap<String, Vec<Cost>>,
    totals: Vec<f64>,
}

impl Table {
    fn add(&mut self, phases: Phases) {
        self.totals.push(phases.iter().map(|(_, c)| c.ms).sum());
        for (name, c) in phases {
            if !self.samples.contains_key(&name) {
                self.order.push(name.clone());
            }
            self.samples.entry(name).or_default().push(c);
        }
    }

    fn rows(&self, report: &mut Report, label: &str) {
        let med = |v: &[Cost], f: fn(&Cost) -> f64| {
            median(&v.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
        };
        for name in &self.order {
            let v = &self.samples[name];
            let mut work = Vec::new();
            for (what, n, t) in [
                ("netlink", med(v, |c| c.netlink), med(v, |c| c.netlink_ms)),
                ("sysctl", med(v, |c| c.sysctl), med(v, |c| c.sysctl_ms)),
                (
                    "netns threads (incl. their work)",
                    med(v, |c| c.ns_thread),
                    med(v, |c| c.ns_thread_ms),
                ),
            ] {
                if n > 0.0 {
                    work.push(format!("{what} {n:.0} in {t:.2} ms"));
                }
            }
            report.add_row(Row {
                figure: "phases",
                item: format!("{label}: {name}"),
                unit: "ms",
                rcni: Some(med(v, |c| c.ms)),
                go: None,
                note: work.join(", "),
            });
        }
        report.add_row(Row {
            figure: "phases",
            item: format!("{label}: total, spawn to exit (traced)"),
            unit: "ms",
            rcni: median(&self.totals),
            go: None,
            note: format!("{} runs", self.totals.len()),
        });
    }
}

/// One chain kind's configuration and the tables its runs fill.
struct Kind {
    kind: ChainKind,
    slot: u8,
    list: Value,
    trace: std::path::PathBuf,
    add: Table,
    del: Table,
}

impl Kind {
    fn new(kind: ChainKind, slot: u8, data: &Path) -> Self {
        Kind {
            kind,
            slot,
            list: conflist(kind, "phases", slot, data),
            trace: data.join(format!("phases-{slot}.jsonl")),
            add: Table::default(),
            del: Table::default(),
        }
    }

    /// One ADD and its DEL in a fresh pod namespace, which is returned for the caller to
    /// delete later.
    fn run_once(&mut self, rcni: &Impl, i: usize) -> Result<NamedNs> {
        let plugin = self.list["plugins"][0].clone();
        let caps = Map::new();
        let ns = NamedNs::create("p")?;
        let cid = format!("phases{}x{i}", self.slot);
        let att = Attachment {
            container_id: &cid,
            netns: &ns.path,
            ifname: "eth0",
            capability_args: &caps,
        };
        let add_req = request(&self.list, &plugin, None, &att);
        let (phases, stdout) = traced(rcni, "ADD", &add_req, &att, &self.trace)?;
        self.add.add(phases);
        let result: Value = serde_json::from_slice(&stdout)?;
        let del_req = request(&self.list, &plugin, Some(&result), &att);
        let (phases, _) = traced(rcni, "DEL", &del_req, &att, &self.trace)?;
        self.del.add(phases);
        Ok(ns)
    }
}

/// The DEL target on this figure's own runs, where the two chains alternate run by run (so
/// drift hits both alike): the masquerade DEL within 1.1x of the same DEL without ipMasq.
fn masquerade_del_ratio(report: &mut Report, plain: &Kind, masq: &Kind) {
    let (Some(p), Some(m)) = (median(&plain.del.totals), median(&masq.del.totals)) else {
        return;
    };
    report.add_row(Row {
        figure: "phases",
        item: format!(
            "DEL {} against 1.1x DEL {}",
            masq.kind.label(),
            plain.kind.label()
        ),
        unit: "ms",
        rcni: Some(m),
        go: None,
        note: format!(
            "{:.2}x of {p:.2} ms (alternating runs): {}",
            m / p,
            if m <= 1.1 * p { "met" } else { "missed" }
        ),
    });
}

/// Median of a series already in the report.
fn series_median(report: &Report, figure: &str, item: &str, implementation: &str) -> Option<f64> {
    report
        .series
        .iter()
        .find(|s| s.figure == figure && s.item == item && s.implementation == implementation)
        .and_then(|s| median(&s.samples))
}

/// The ADD target on figure 2's medians: within 2x of kernel floor + one process start.
fn targets(report: &mut Report) {
    let floor = series_median(report, "kernel floor", "ADD bridge+host-local", "rcni");
    let process = series_median(report, "startup", "process floor (/bin/true)", "rcni");
    let Some(budget) = floor.zip(process).map(|(f, p)| 2.0 * (f + p)) else {
        return;
    };
    for kind in [ChainKind::Bridge, ChainKind::BridgeMasq] {
        let item = format!("ADD {}", kind.label());
        let Some(rcni) = series_median(report, "latency", &item, "rcni") else {
            continue;
        };
        report.add_row(Row {
            figure: "phases",
            item: format!("{item} against 2x (kernel floor + process start)"),
            unit: "ms",
            rcni: Some(rcni),
            go: None,
            note: format!(
                "budget {budget:.2} ms = 2 x ({:.2} + {:.2}); {:.2}x of (floor + start): {}",
                floor.unwrap_or_default(),
                process.unwrap_or_default(),
                rcni / (budget / 2.0),
                if rcni <= budget { "met" } else { "missed" }
            ),
        });
    }
}

pub fn measure(report: &mut Report, rcni: &Impl, runs: usize, data: &Path) -> Result<()> {
    targets(report);
    let mut kinds: Vec<Kind> = SLOTS
        .iter()
        .map(|&(kind, slot)| Kind::new(kind, slot, data))
        .collect();
    // The pod namespaces are deleted after the last run: the kernel tears a namespace down in
    // the background, RCU-heavy, and a run during that slowed down by several ms (a veth
    // deletion most of all).
    let mut used = Vec::with_capacity(2 * runs);
    for i in 0..runs {
        stop::check()?;
        // Alternate which chain goes first.
        if i % 2 == 1 {
            kinds.reverse();
        }
        for k in kinds.iter_mut() {
            used.push(k.run_once(rcni, i)?);
        }
        if i % 2 == 1 {
            kinds.reverse();
        }
    }
    for k in &kinds {
        k.add.rows(report, &format!("ADD {}", k.kind.label()));
        k.del.rows(report, &format!("DEL {}", k.kind.label()));
    }
    masquerade_del_ratio(report, &kinds[0], &kinds[1]);
    drop(used);
    Ok(())
}
