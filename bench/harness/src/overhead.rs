//! Figure "runtime": what `rcni add` and `rcni del` cost on top of the plugins they run,
//! against a target for the median ([`TARGET_MS`]; docs/performance.md, "The runtime's own
//! cost and where a bridge ADD spends its time"). Each round runs the bridge chain once through
//! the `rcni` CLI (process start, config discovery, lock, cache claim, plugins, cache write)
//! and once directly (the plugins alone, as figure 2 runs them), alternating which goes
//! first, on the same network, so both see the same bridge, lease directory and load.
//!
//! Besides spawn-to-exit time, each run's CPU time (user + system of the processes it waited
//! for, from `getrusage(RUSAGE_CHILDREN)`) is recorded: on a loaded machine the wall-clock
//! difference is dominated by waiting for a CPU at each process and pipe wake-up, and the CPU
//! difference shows what the runtime itself costs.
//!
//! The same rounds also time processes that run no plugin: a static program that exits at once
//! (`bench/noop.c`, when `bench/run` passes it: the cheapest process there is), `/bin/true` (the
//! cost of an ordinary process on this machine) and `rcni add` of a network that is not in the
//! conf dir (rcni's start, argument parsing and config discovery, then an error). They split the
//! overhead into what any separately executed runtime pays, what rcni's own start adds to it,
//! and the runtime's work (lock, cache claim and result, plugin spawn and wait).
//!
//! A third path runs the chain through the runtime library in this process, as a CRI runtime
//! linking it would (containerd links libcni the same way): config discovery, lock, cache and
//! plugin processes, but no `rcni` process. Its CPU is this thread's plus the plugins'.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Result};
use serde_json::Value;

use crate::chain::{self, Attachment, Impl};
use crate::configs::{conflist, ChainKind};
use crate::ns::NamedNs;
use crate::report::{Report, Row, Series};
use crate::stats::{median, ms};
use crate::stop;

/// The target for the median overhead, in ms.
const TARGET_MS: f64 = 1.0;
/// A DEL's wall time swings by several ms between samples with the kernel's RCU waits in
/// deleting the veth, so a difference of DEL medians is mostly that noise.
const DEL_WALL_CAVEAT: &str = "; DEL wall times swing by several ms with the kernel's RCU waits in veth deletion: the CPU rows are the ones to compare";
/// Figure-2 slots are 0 and 1, churn uses 10 and up.
const SLOT: u8 = 2;

#[derive(Default)]
struct Samples {
    add: Vec<f64>,
    del: Vec<f64>,
    add_cpu: Vec<f64>,
    del_cpu: Vec<f64>,
}

impl Samples {
    fn push(&mut self, verb: &str, wall: f64, cpu: f64) {
        if verb == "add" {
            self.add.push(wall);
            self.add_cpu.push(cpu);
        } else {
            self.del.push(wall);
            self.del_cpu.push(cpu);
        }
    }
}

/// Wall and CPU time of processes that run no plugin.
#[derive(Default)]
struct Floor {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Floor {
    /// Runs `cmd` to its exit and records it; `expect_success` tells which exit is normal.
    fn time(&mut self, cmd: &mut Command, expect_success: bool) -> Result<()> {
        let cpu = children_cpu_ms();
        let started = Instant::now();
        let done = cmd.output()?;
        self.wall.push(ms(started.elapsed()));
        self.cpu.push(children_cpu_ms() - cpu);
        if done.status.success() != expect_success {
            bail!(
                "{cmd:?} exited with {}: {}",
                done.status,
                String::from_utf8_lossy(&done.stderr)
            );
        }
        Ok(())
    }
}

/// CPU time (user + system) so far, in ms, of `who`: the waited-for children or this thread.
fn cpu_ms(who: nix::sys::resource::UsageWho) -> f64 {
    let t =
        |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1000.0 + tv.tv_usec() as f64 / 1000.0;
    nix::sys::resource::getrusage(who)
        .map(|u| t(u.user_time()) + t(u.system_time()))
        .unwrap_or(0.0)
}

fn children_cpu_ms() -> f64 {
    cpu_ms(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

fn thread_cpu_ms() -> f64 {
    cpu_ms(nix::sys::resource::UsageWho::RUSAGE_THREAD)
}

/// The runtime library in this process, doing what `rcni add` and `rcni del` do between
/// parsing their arguments and printing: discovery, then ADD (result rendered) or DEL.
fn through_library(
    rcni: &Impl,
    conf_dir: &Path,
    cache_dir: &Path,
    name: &str,
    container_id: &str,
    netns: &Path,
    out: &mut Samples,
) -> Result<()> {
    use cni_runtime::{discover, Attachment, Runtime};
    let att = Attachment::new(container_id, netns, "eth0");
    for verb in ["add", "del"] {
        let cpu = thread_cpu_ms() + children_cpu_ms();
        let started = Instant::now();
        let found = discover(conf_dir)?;
        let net = found.require(name)?;
        let rt = Runtime::new(vec![rcni.dir.clone()], cache_dir);
        if verb == "add" {
            let result = rt.add(net, &att)?;
            serde_json::to_vec(&result.to_value(result.cni_version)?)?;
        } else {
            rt.del_with_cached_args(net, &att)?;
        }
        let t = ms(started.elapsed());
        out.push(verb, t, thread_cpu_ms() + children_cpu_ms() - cpu);
    }
    Ok(())
}

/// `rcni add|del NAME NETNS`, spawn to exit.
fn through_cli(
    cli: &Path,
    rcni: &Impl,
    conf_dir: &Path,
    cache_dir: &Path,
    name: &str,
    netns: &Path,
    out: &mut Samples,
) -> Result<()> {
    for verb in ["add", "del"] {
        let cpu = children_cpu_ms();
        let started = Instant::now();
        let done = Command::new(cli)
            .args([verb, name])
            .arg(netns)
            .arg("--conf-dir")
            .arg(conf_dir)
            .arg("--bin-dir")
            .arg(&rcni.dir)
            .arg("--cache-dir")
            .arg(cache_dir)
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .output()?;
        let t = ms(started.elapsed());
        if !done.status.success() {
            bail!(
                "rcni {verb}: {}{}",
                String::from_utf8_lossy(&done.stdout),
                String::from_utf8_lossy(&done.stderr)
            );
        }
        out.push(verb, t, children_cpu_ms() - cpu);
    }
    Ok(())
}

/// The same chain with the plugins executed directly.
fn direct(rcni: &Impl, list: &Value, cid: &str, netns: &Path, out: &mut Samples) -> Result<()> {
    let caps = serde_json::Map::new();
    let att = Attachment {
        container_id: cid,
        netns,
        ifname: "eth0",
        capability_args: &caps,
    };
    let cpu = children_cpu_ms();
    let (t, result) = chain::add(rcni, list, &att)?;
    out.add.push(ms(t));
    let mid = children_cpu_ms();
    out.add_cpu.push(mid - cpu);
    out.del.push(ms(chain::del(rcni, list, &att, &result)?));
    out.del_cpu.push(children_cpu_ms() - mid);
    Ok(())
}

pub fn measure(
    report: &mut Report,
    cli: &Path,
    rcni: &Impl,
    noop: Option<&Path>,
    runs: usize,
    data: &Path,
) -> Result<()> {
    let conf_dir = data.join("net.d");
    let cache_dir = data.join("cache");
    std::fs::create_dir_all(&conf_dir)?;
    let list = conflist(ChainKind::Bridge, "rt", SLOT, data);
    let name = list["name"].as_str().unwrap_or_default().to_string();
    std::fs::write(
        conf_dir.join("10-bench.conflist"),
        serde_json::to_vec(&list)?,
    )?;
    let (mut rt, mut plain) = (Samples::default(), Samples::default());
    let (mut true_floor, mut rcni_floor) = (Floor::default(), Floor::default());
    let mut static_floor = Floor::default();
    let missing_network = |netns: &Path| {
        let mut cmd = Command::new(cli);
        cmd.args(["add", "rt-not-configured"])
            .arg(netns)
            .arg("--conf-dir")
            .arg(&conf_dir)
            .arg("--bin-dir")
            .arg(&rcni.dir)
            .arg("--cache-dir")
            .arg(&cache_dir);
        cmd
    };
    let mut lib = Samples::default();
    let mut failure = String::new();
    // The namespaces are deleted after the last round, not during the next one: the kernel
    // tears a namespace down in the background, RCU-heavy, which slowed what ran beside it.
    let mut used = Vec::with_capacity(runs);
    for i in 0..runs {
        stop::check()?;
        let (a, b, c) = (
            NamedNs::create("r")?,
            NamedNs::create("d")?,
            NamedNs::create("l")?,
        );
        // Each path goes first in a third of the rounds. The floors go last.
        let mut done = Ok(());
        for path in 0..3 {
            done = done.and_then(|()| match (i + path) % 3 {
                0 => through_cli(cli, rcni, &conf_dir, &cache_dir, &name, &a.path, &mut rt),
                1 => direct(rcni, &list, &format!("rt{i}"), &b.path, &mut plain),
                _ => through_library(
                    rcni,
                    &conf_dir,
                    &cache_dir,
                    &name,
                    &format!("rtlib{i}"),
                    &c.path,
                    &mut lib,
                ),
            });
        }
        let done = done.and_then(|()| {
            if let Some(noop) = noop {
                static_floor.time(&mut Command::new(noop), true)?;
            }
            true_floor.time(&mut Command::new("/bin/true"), true)?;
            rcni_floor.time(&mut missing_network(&a.path), false)
        });
        used.push((a, b, c));
        if let Err(e) = done {
            failure = e.to_string().replace('\n', " ").chars().take(160).collect();
            break;
        }
    }
    drop(used);
    let cpu_overheads = cpu_rows(report, &rt, &plain);
    library_rows(report, &lib, &plain);
    least_executed_runtime(report, &static_floor, &lib, &plain);
    let wall_overheads = wall_rows(report, rt, plain, &failure);
    floor_rows(report, &static_floor, &true_floor, &rcni_floor);
    for ((verb, wall), cpu) in ["ADD", "DEL"]
        .into_iter()
        .zip(wall_overheads)
        .zip(cpu_overheads)
    {
        split_row(report, verb, wall, cpu, &true_floor, &rcni_floor);
    }
    Ok(())
}

/// The runtime's CPU overhead per verb (the CLI with its plugins minus the plugins alone), as
/// rows; returns the overheads (ADD, DEL).
fn cpu_rows(report: &mut Report, rt: &Samples, plain: &Samples) -> Vec<Option<f64>> {
    let mut cpu_overheads = Vec::new();
    for (verb, through_cpu, alone_cpu) in [
        ("ADD", &rt.add_cpu, &plain.add_cpu),
        ("DEL", &rt.del_cpu, &plain.del_cpu),
    ] {
        let (a, b) = (median(through_cpu), median(alone_cpu));
        cpu_overheads.push(a.zip(b).map(|(a, b)| a - b));
        report.add_row(Row {
            figure: "runtime",
            item: format!("{verb} runtime CPU overhead (rcni CLI minus plugins alone, user+sys)"),
            unit: "ms",
            rcni: a.zip(b).map(|(a, b)| a - b),
            go: None,
            note: format!(
                "CPU of `rcni {}` with its plugins {:.2} ms, plugins alone {:.2} ms",
                verb.to_lowercase(),
                a.unwrap_or_default(),
                b.unwrap_or_default()
            ),
        });
    }
    cpu_overheads
}

/// The runtime's wall time and overhead per verb, as rows and series; returns the overheads
/// (ADD, DEL).
fn wall_rows(report: &mut Report, rt: Samples, plain: Samples, failure: &str) -> Vec<Option<f64>> {
    let mut wall_overheads = Vec::new();
    for (verb, through, alone) in [("ADD", rt.add, plain.add), ("DEL", rt.del, plain.del)] {
        let (m_rt, m_plain) = (median(&through), median(&alone));
        let overhead = m_rt.zip(m_plain).map(|(a, b)| a - b);
        wall_overheads.push(overhead);
        let note = match overhead {
            Some(o) => format!(
                "plugins alone {:.2} ms in the same rounds; runtime overhead {o:.2} ms (target <= {TARGET_MS:.1} ms: {}){}",
                m_plain.unwrap_or_default(),
                if o <= TARGET_MS { "met" } else { "missed" },
                if verb == "DEL" { DEL_WALL_CAVEAT } else { "" }
            ),
            None => failure.to_string(),
        };
        report.add_row(Row {
            figure: "runtime",
            item: format!(
                "{verb} bridge+host-local through `rcni {}`",
                verb.to_lowercase()
            ),
            unit: "ms",
            rcni: m_rt,
            go: None,
            note,
        });
        report.add_row(Row {
            figure: "runtime",
            item: format!("{verb} runtime overhead (rcni CLI minus plugins alone)"),
            unit: "ms",
            rcni: overhead,
            go: None,
            note: format!("target <= {TARGET_MS:.1} ms"),
        });
        for (implementation, samples) in [("rcni", through), ("plugins alone", alone)] {
            report.series.push(Series {
                figure: "runtime",
                item: format!("{verb} bridge+host-local"),
                implementation,
                unit: "ms",
                samples,
            });
        }
    }
    wall_overheads
}

/// What the runtime costs without a process of its own: the library path against the plugins
/// alone, wall and CPU.
fn library_rows(report: &mut Report, lib: &Samples, plain: &Samples) {
    for (verb, wall, alone, cpu, alone_cpu) in [
        ("ADD", &lib.add, &plain.add, &lib.add_cpu, &plain.add_cpu),
        ("DEL", &lib.del, &plain.del, &lib.del_cpu, &plain.del_cpu),
    ] {
        let diff = |a: &[f64], b: &[f64]| median(a).zip(median(b)).map(|(a, b)| a - b);
        report.add_row(Row {
            figure: "runtime",
            item: format!(
                "{verb} runtime overhead as a library in the caller's process (no `rcni` process)"
            ),
            unit: "ms",
            rcni: diff(wall, alone),
            go: None,
            note: format!(
                "through the library {:.2} ms, plugins alone {:.2} ms; CPU overhead {:.2} ms",
                median(wall).unwrap_or_default(),
                median(alone).unwrap_or_default(),
                diff(cpu, alone_cpu).unwrap_or_default()
            ),
        });
    }
}

/// The processes that run no plugin, wall and CPU (a floor without samples is left out).
fn floor_rows(report: &mut Report, static_floor: &Floor, true_floor: &Floor, rcni_floor: &Floor) {
    for (what, floor) in [
        (
            "a static program that exits at once (`bench/noop.c`)",
            static_floor,
        ),
        ("`/bin/true` (any process)", true_floor),
        (
            "`rcni add` of a network not configured (start, arguments, config discovery, error)",
            rcni_floor,
        ),
    ] {
        if floor.wall.is_empty() {
            continue;
        }
        report.add_row(Row {
            figure: "runtime",
            item: format!("no plugin run: {what}"),
            unit: "ms",
            rcni: median(&floor.wall),
            go: None,
            note: format!(
                "CPU {:.2} ms; same rounds as the rows above",
                median(&floor.cpu).unwrap_or_default()
            ),
        });
    }
}

/// The least ADD overhead any runtime executed as a process of its own could have here: the
/// cheapest process this machine runs plus the runtime's work measured without a process
/// (the library path), both from the same rounds.
fn least_executed_runtime(
    report: &mut Report,
    static_floor: &Floor,
    lib: &Samples,
    plain: &Samples,
) {
    let process = median(&static_floor.wall);
    let work = median(&lib.add).zip(median(&plain.add)).map(|(l, p)| l - p);
    let Some((process, work)) = process.zip(work) else {
        return;
    };
    let least = process + work;
    report.add_row(Row {
        figure: "runtime",
        item: "ADD: least overhead of an executed runtime (static no-op process + the runtime's work as a library)".into(),
        unit: "ms",
        rcni: Some(least),
        go: None,
        note: format!(
            "{process:.2} + {work:.2} ms; against the {TARGET_MS:.1} ms target: {}",
            if least <= TARGET_MS { "reachable" } else { "out of reach on this machine" }
        ),
    });
}

/// Where one verb's overhead goes: any process's start, what rcni's own start and config
/// discovery add to it, and the rest of the runtime's work.
fn split_row(
    report: &mut Report,
    verb: &str,
    wall: Option<f64>,
    cpu: Option<f64>,
    true_floor: &Floor,
    rcni_floor: &Floor,
) {
    let split = |overhead: f64, any: Option<f64>, rcni: Option<f64>| {
        let (any, rcni) = (any.unwrap_or_default(), rcni.unwrap_or_default());
        format!(
            "{overhead:.2} ms = any process {any:.2} + rcni's start and discovery beyond it {:.2} + lock, cache, plugin spawn and wait {:.2}",
            rcni - any,
            overhead - rcni
        )
    };
    let note = match (wall, cpu) {
        (Some(w), Some(c)) => format!(
            "wall {}; CPU {}",
            split(w, median(&true_floor.wall), median(&rcni_floor.wall)),
            split(c, median(&true_floor.cpu), median(&rcni_floor.cpu))
        ),
        _ => String::new(),
    };
    report.add_row(Row {
        figure: "runtime",
        item: format!("{verb} runtime overhead beyond an rcni process that runs no plugin"),
        unit: "ms",
        rcni: wall.zip(median(&rcni_floor.wall)).map(|(w, f)| w - f),
        go: None,
        note,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_executed_overhead_is_the_empty_process_plus_the_library_work() {
        let empty = Floor {
            wall: vec![0.7, 0.6, 0.8],
            cpu: vec![0.5; 3],
        };
        let lib = Samples {
            add: vec![5.0, 5.2, 4.9],
            ..Samples::default()
        };
        let plain = Samples {
            add: vec![4.6, 4.7, 4.5],
            ..Samples::default()
        };
        let mut report = Report::default();
        least_executed_runtime(&mut report, &empty, &lib, &plain);
        let row = &report.rows[0];
        assert!((row.rcni.unwrap() - 1.1).abs() < 1e-9, "{:?}", row.rcni);
        assert!(row.note.contains("out of reach"), "{}", row.note);

        // Without the static program (no --noop) there is no such row.
        let mut report = Report::default();
        least_executed_runtime(&mut report, &Floor::default(), &lib, &plain);
        assert!(report.rows.is_empty());
    }
}
