//! Figure 4: churn. N attachments ADDed, then DELed, by C workers at once; attachments per
//! second, duplicate addresses, failures and leftovers (host veths, lease files).

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Result;
use serde_json::Value;

use crate::chain::{self, Attachment, Impl};
use crate::configs::{conflist, ChainKind};
use crate::ns::{links_with_prefix, NamedNs};
use crate::report::{Report, Row};
use crate::stop;

pub struct ChurnOutcome {
    pub add_per_sec: f64,
    pub del_per_sec: f64,
    pub duplicates: usize,
    pub failures: usize,
    pub leftovers: usize,
}

/// Runs `work(i)` for i in 0..n on `workers` threads; stops early when a stop was requested.
pub(crate) fn parallel<F: Fn(usize) + Sync>(n: usize, workers: usize, work: F) {
    run_all(n, workers, true, work);
}

/// Runs `work(i)` for every i in 0..n, even after a stop request: for cleanups.
pub(crate) fn parallel_to_end<F: Fn(usize) + Sync>(n: usize, workers: usize, work: F) {
    run_all(n, workers, false, work);
}

fn run_all<F: Fn(usize) + Sync>(n: usize, workers: usize, stoppable: bool, work: F) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || (stoppable && stop::requested()) {
                    break;
                }
                work(i);
            });
        }
    });
}

fn lease_files(data: &Path, network: &str) -> usize {
    std::fs::read_dir(data.join(network))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n != "lock" && !n.starts_with("last_reserved_ip")
                })
                .count()
        })
        .unwrap_or(0)
}

pub fn run_one(
    imp: &Impl,
    slot: u8,
    n: usize,
    workers: usize,
    data: &Path,
) -> Result<ChurnOutcome> {
    let list = conflist(ChainKind::Bridge, imp.label, slot, data);
    let network = list["name"].as_str().unwrap_or_default().to_string();
    let namespaces: Vec<NamedNs> = (0..n)
        .map(|_| NamedNs::create("k"))
        .collect::<Result<_>>()?;
    let results: Mutex<Vec<Option<Value>>> = Mutex::new(vec![None; n]);
    let failures = AtomicUsize::new(0);
    let empty = serde_json::Map::new();
    let cids: Vec<String> = (0..n).map(|i| format!("churn{slot}x{i}")).collect();
    let att = |i: usize| Attachment {
        container_id: &cids[i],
        netns: &namespaces[i].path,
        ifname: "eth0",
        capability_args: &empty,
    };

    let veths_before = links_with_prefix("veth").len();
    let started = Instant::now();
    parallel(n, workers, |i| match chain::add(imp, &list, &att(i)) {
        Ok((_, r)) => {
            if let Ok(mut all) = results.lock() {
                all[i] = Some(r);
            }
        }
        Err(_) => {
            failures.fetch_add(1, Ordering::Relaxed);
        }
    });
    let add_secs = started.elapsed().as_secs_f64();

    let results = results.into_inner().unwrap_or_default();
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for r in results.iter().flatten() {
        for ip in r["ips"].as_array().into_iter().flatten() {
            if !seen.insert(ip["address"].as_str().unwrap_or_default().to_string()) {
                duplicates += 1;
            }
        }
    }

    let started = Instant::now();
    parallel(n, workers, |i| {
        let result = results[i].clone().unwrap_or_default();
        if chain::del(imp, &list, &att(i), &result).is_err() {
            failures.fetch_add(1, Ordering::Relaxed);
        }
    });
    let del_secs = started.elapsed().as_secs_f64();
    drop(namespaces);

    let leftovers =
        lease_files(data, &network) + links_with_prefix("veth").len().saturating_sub(veths_before);
    Ok(ChurnOutcome {
        add_per_sec: n as f64 / add_secs,
        del_per_sec: n as f64 / del_secs,
        duplicates,
        failures: failures.load(Ordering::Relaxed),
        leftovers,
    })
}

pub fn measure(report: &mut Report, rcni: &Impl, go: &Impl, n: usize, data: &Path) -> Result<()> {
    for (round, workers) in [1usize, 4, 16].into_iter().enumerate() {
        stop::check()?;
        // Fresh bridges and subnets per round and implementation: slots 10.. stay clear of figure 2.
        let slot = |k: u8| 10 + 2 * round as u8 + k;
        let a = run_one(rcni, slot(0), n, workers, data);
        let b = run_one(go, slot(1), n, workers, data);
        let get = |r: &Result<ChurnOutcome>, f: fn(&ChurnOutcome) -> f64| r.as_ref().ok().map(f);
        let detail = |label: &str, r: &Result<ChurnOutcome>| match r {
            Ok(o) => format!(
                "{label}: {} dup, {} failed, {} left",
                o.duplicates, o.failures, o.leftovers
            ),
            Err(e) => format!("{label}: {e}"),
        };
        let note = format!("{}; {}", detail("rcni", &a), detail("Go", &b));
        for (what, f) in [
            (
                "ADD",
                (|o: &ChurnOutcome| o.add_per_sec) as fn(&ChurnOutcome) -> f64,
            ),
            ("DEL", |o: &ChurnOutcome| o.del_per_sec),
        ] {
            report.add_row(Row {
                figure: "churn",
                item: format!("{n} bridge attachments {what}, concurrency {workers}"),
                unit: "att/s",
                rcni: get(&a, f),
                go: get(&b, f),
                note: note.clone(),
            });
        }
    }
    Ok(())
}
