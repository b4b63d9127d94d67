//! Figure "pods": N pod sandboxes started at once through `rcni pod run` (C at a time), the
//! whole RunPodSandbox network path a CRI runtime walks: record, netns creation, the built-in
//! loopback network, then bridge + host-local + portmap, with rcni's plugins and with the Go
//! plugins under the same `rcni pod`. p50/p99 of each run (spawn to exit) and sandboxes per
//! second over the whole batch; then every sandbox is stopped and removed, and what is left
//! (failures, duplicate addresses, veths, leases, namespaces, records) goes into the note.
//! The same batch is measured again with many sandboxes already resident on the node (each
//! with its own port mapping), started before the clock starts and removed after it: the
//! setup cost of a pod must not grow with what the node already runs.
//! A Linux bridge takes at most 1,023 ports (`BR_MAX_PORTS` in the kernel's
//! net/bridge/br_private.h), so with many resident the batch is started in rounds that fit
//! beside them, each round removed (off the clock) before the next, followed by a pause while
//! the kernel tears the removed namespaces down (RCU-heavy work in the background that would
//! slow the next round). The empty node's batch runs in the same rounds, so the two compare.
//! Beside the two, the same batches made by `ip` alone (`pods_floor.rs`) give the kernel's
//! share of the growth.
//! The note names a published anchor, Cilium's setupPodNetwork time per pod with 100 pods
//! started in parallel on kind (cilium/cilium#48392; docs/performance.md, "Pod sandboxes at
//! scale").

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};

use crate::chain::Impl;
use crate::churn::{parallel, parallel_to_end};
use crate::configs::slot_subnet;
use crate::ns::links_with_prefix;
use crate::report::{Report, Row, Series};
use crate::stats::{ms, quantile};

struct Outcome {
    latencies: Vec<f64>,
    per_sec: f64,
    failures: usize,
    duplicates: usize,
    leftovers: usize,
}

/// The config slot (see [`slot_subnet`]) of implementation `slot`: a /20 holds the resident
/// sandboxes and the measured batch.
fn config_slot(slot: u8) -> u8 {
    28 + slot
}

fn conflist(slot: u8, data: &Path) -> Value {
    let subnet = slot_subnet(config_slot(slot)).to_string();
    json!({"cniVersion": "1.0.0", "name": format!("bench-pods-{slot}"), "plugins": [
        {"type": "bridge", "bridge": format!("rcnipod{slot}"), "isGateway": true,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                  "routes": [{"dst": "0.0.0.0/0"}], "dataDir": data.display().to_string()}},
        {"type": "portmap", "capabilities": {"portMappings": true}}]})
}

fn count_entries(dir: &Path, keep: impl Fn(&str) -> bool) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| keep(&e.file_name().to_string_lossy()))
                .count()
        })
        .unwrap_or(0)
}

/// Ports a Linux bridge can hold (`BR_MAX_PORTS` - 1: port number 0 is not used).
const BRIDGE_PORTS: usize = 1023;

/// How long the kernel is left to finish the background work of namespaces just created
/// (the resident ones) or removed (a round's).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// The size of one run: `n` sandboxes measured, started `workers` at a time and `round` per
/// round, with `resident` sandboxes started before and kept through the measurement.
#[derive(Clone, Copy)]
struct Batch {
    n: usize,
    workers: usize,
    round: usize,
    resident: usize,
}

fn run_one(rcni_cli: &Path, imp: &Impl, slot: u8, size: Batch, work: &Path) -> Result<Outcome> {
    let Batch {
        n,
        workers,
        round,
        resident,
    } = size;
    let base = work.join(format!("pods-{}-{resident}", imp.label));
    let (conf, state, cache, data, run) = (
        base.join("net.d"),
        base.join("state"),
        base.join("cache"),
        base.join("ipam"),
        // The gc-on-start marker: the bench's own, never the machine's /run/rcni.
        base.join("run"),
    );
    std::fs::create_dir_all(&conf)?;
    std::fs::write(
        conf.join("10-pods.conflist"),
        serde_json::to_vec(&conflist(slot, &data))?,
    )?;
    let prefix = format!("bp{}x{slot}x", std::process::id());
    let pod = |args: &[&str]| {
        Command::new(rcni_cli)
            .arg("--conf-dir")
            .arg(&conf)
            .arg("--bin-dir")
            .arg(&imp.dir)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("pod")
            .arg("--state-dir")
            .arg(&state)
            .arg("--run-dir")
            .arg(&run)
            .args(args)
            .output()
    };
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let resident_ids: Vec<String> = (0..resident).map(|i| format!("{prefix}r{i}")).collect();
    let latencies = Mutex::new(Vec::new());
    let failures = AtomicUsize::new(0);
    let veths_before = links_with_prefix("veth").len();
    parallel(resident, workers, |i| {
        let port = format!("{}:80", 30000 + i);
        let out = pod(&["run", "bench", "--id", &resident_ids[i], "--port", &port]);
        if !matches!(out, Ok(o) if o.status.success()) {
            failures.fetch_add(1, Ordering::Relaxed);
        }
    });
    // A node whose pods are running, not one still finishing their creation in the background.
    if resident > 0 {
        std::thread::sleep(SETTLE);
    }
    let mut measuring = std::time::Duration::ZERO;
    let mut duplicates = 0;
    for first in (0..n).step_by(round) {
        let these = &ids[first..n.min(first + round)];
        let started = Instant::now();
        let round_ips = start_round(&pod, these, 20000 + first, workers, &latencies, &failures);
        measuring += started.elapsed();
        // Addresses are compared within a round: a later round may reuse a removed one's.
        duplicates += round_ips.len() - round_ips.iter().collect::<HashSet<_>>().len();
        if these.len() < n {
            remove_all(&pod, these.iter().collect(), workers, &failures);
            std::thread::sleep(SETTLE);
        }
    }
    let per_sec = n as f64 / measuring.as_secs_f64();
    // Stopping and removing what was already removed is a no-op that succeeds.
    remove_all(
        &pod,
        ids.iter().chain(&resident_ids).collect(),
        workers,
        &failures,
    );
    let leftovers = links_with_prefix("veth").len().saturating_sub(veths_before)
        + count_entries(&data.join(format!("bench-pods-{slot}")), |f| {
            f.parse::<std::net::IpAddr>().is_ok()
        })
        + count_entries(Path::new("/run/netns"), |f| {
            f.starts_with(&format!("rcni-{prefix}"))
        })
        + count_entries(&state, |f| f.ends_with(".json"))
        + count_entries(&cache.join("results"), |_| true);
    Ok(Outcome {
        latencies: latencies.into_inner().unwrap_or_default(),
        per_sec,
        failures: failures.load(Ordering::Relaxed),
        duplicates,
        leftovers,
    })
}

/// Starts the sandboxes `ids` (host ports from `first_port`), `workers` at a time, timing each
/// successful start into `latencies`; returns their first addresses.
fn start_round<P>(
    pod: &P,
    ids: &[String],
    first_port: usize,
    workers: usize,
    latencies: &Mutex<Vec<f64>>,
    failures: &AtomicUsize,
) -> Vec<String>
where
    P: Fn(&[&str]) -> std::io::Result<std::process::Output> + Sync,
{
    let ips = Mutex::new(Vec::new());
    parallel(ids.len(), workers, |i| {
        let port = format!("{}:80", first_port + i);
        let t = Instant::now();
        let out = pod(&["--json", "run", "bench", "--id", &ids[i], "--port", &port]);
        let took = ms(t.elapsed());
        match out {
            Ok(o) if o.status.success() => {
                if let Ok(mut l) = latencies.lock() {
                    l.push(took);
                }
                let st: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
                if let (Ok(mut all), Some(ip)) = (ips.lock(), st["ips"][0].as_str()) {
                    all.push(ip.to_string());
                }
            }
            _ => {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    ips.into_inner().unwrap_or_default()
}

/// Stops and removes the sandboxes `ids`, `workers` at a time, counting failures; runs to the
/// end even when the benchmark is interrupted, so no sandbox outlives it.
fn remove_all<P>(pod: &P, ids: Vec<&String>, workers: usize, failures: &AtomicUsize)
where
    P: Fn(&[&str]) -> std::io::Result<std::process::Output> + Sync,
{
    parallel_to_end(ids.len(), workers, |i| {
        for verb in ["stop", "rm"] {
            if !matches!(pod(&[verb, ids[i]]), Ok(o) if o.status.success()) {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}

/// The figure: `n` sandboxes `workers` at a time on an empty node, then the same with
/// `resident` sandboxes already on it.
pub fn measure(
    report: &mut Report,
    rcni_cli: &Path,
    (rcni, go): (&Impl, &Impl),
    (n, workers, resident): (usize, usize, usize),
    work: &Path,
) -> Result<()> {
    // Sandboxes started per round: as many as fit on the bridge beside the resident ones.
    let round = n.min(BRIDGE_PORTS.saturating_sub(resident)).max(1);
    let empty = Batch {
        n,
        workers,
        round,
        resident: 0,
    };
    let p50_empty = measure_batch(report, rcni_cli, (rcni, go), empty, None, work)?;
    let dense = Batch { resident, ..empty };
    measure_batch(report, rcni_cli, (rcni, go), dense, Some(p50_empty), work)?;
    crate::pods_floor::measure(report, (n, workers, resident), round, SETTLE)
}

/// One batch for both implementations, as rows; returns the p50s (rcni, Go). With
/// `empty_p50`, the note gives each p50 over the empty node's.
fn measure_batch(
    report: &mut Report,
    rcni_cli: &Path,
    (rcni, go): (&Impl, &Impl),
    size: Batch,
    empty_p50: Option<(Option<f64>, Option<f64>)>,
    work: &Path,
) -> Result<(Option<f64>, Option<f64>)> {
    let a = run_one(rcni_cli, rcni, 0, size, work);
    let b = run_one(rcni_cli, go, 1, size, work);
    let detail = |label: &str, r: &Result<Outcome>| match r {
        Ok(o) => format!(
            "{label}: {} failed, {} dup, {} left",
            o.failures, o.duplicates, o.leftovers
        ),
        Err(e) => format!("{label}: {e}"),
    };
    let q = |r: &Result<Outcome>, p: f64| r.as_ref().ok().and_then(|o| quantile(&o.latencies, p));
    let p50 = (q(&a, 0.5), q(&b, 0.5));
    let growth = match empty_p50 {
        Some(empty) => {
            let ratio = |now: Option<f64>, then: Option<f64>| match (now, then) {
                (Some(now), Some(then)) if then > 0.0 => format!("{:.2}x", now / then),
                _ => "n/a".to_string(),
            };
            format!(
                "; p50 over the empty node's: rcni {}, Go {}",
                ratio(p50.0, empty.0),
                ratio(p50.1, empty.1)
            )
        }
        None => String::new(),
    };
    let note = format!(
        "{}; {}{growth}; Cilium publishes ≈310 ms per pod (setupPodNetwork) at 100 in parallel",
        detail("rcni", &a),
        detail("Go", &b)
    );
    let Batch {
        n,
        workers,
        round,
        resident,
    } = size;
    let item = format!(
        "{n} sandboxes via rcni pod run, concurrency {workers}, {round} per round, {resident} resident"
    );
    for (what, p) in [("p50", 0.5), ("p99", 0.99)] {
        report.add_row(Row {
            figure: "pods",
            item: format!("{item}: {what} setup latency"),
            unit: "ms",
            rcni: q(&a, p),
            go: q(&b, p),
            note: note.clone(),
        });
    }
    report.add_row(Row {
        figure: "pods",
        item: format!("{item}: throughput"),
        unit: "pods/s",
        rcni: a.as_ref().ok().map(|o| o.per_sec),
        go: b.as_ref().ok().map(|o| o.per_sec),
        note,
    });
    for (implementation, r) in [("rcni", a), ("go", b)] {
        if let Ok(o) = r {
            report.series.push(Series {
                figure: "pods",
                item: item.clone(),
                implementation,
                unit: "ms",
                samples: o.latencies,
            });
        }
    }
    Ok(p50)
}
