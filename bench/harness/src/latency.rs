//! Figure 2: attachment latency, ADD and DEL separately, per chain, plugins executed directly;
//! and the same bridge chain through the `rcni` runtime, to show the runtime's own overhead.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::chain::{self, Attachment, Impl};
use crate::configs::{conflist, port_mapping, ChainKind};
use crate::ns::NamedNs;
use crate::report::{Report, Row, Series};
use crate::stats::{median, ms};
use crate::stop;

#[derive(Default)]
struct Samples {
    add: Vec<f64>,
    del: Vec<f64>,
    error: Option<String>,
}

fn one(imp: &Impl, list: &serde_json::Value, i: usize, s: &mut Samples) -> Result<()> {
    if s.error.is_some() {
        return Ok(());
    }
    let ns = NamedNs::create("c")?;
    let caps = port_mapping(i);
    let cid = format!("bench{i}");
    let att = Attachment {
        container_id: &cid,
        netns: &ns.path,
        ifname: "eth0",
        capability_args: &caps,
    };
    match chain::add(imp, list, &att) {
        Ok((t, result)) => {
            s.add.push(ms(t));
            match chain::del(imp, list, &att, &result) {
                Ok(t) => s.del.push(ms(t)),
                Err(e) => s.error = Some(e.to_string()),
            }
        }
        Err(e) => {
            // Clean up what a failed ADD may have left, then stop measuring this chain.
            let _ = chain::del(imp, list, &att, &serde_json::json!({}));
            s.error = Some(e.to_string());
        }
    }
    Ok(())
}

pub fn measure(
    report: &mut Report,
    rcni: &Impl,
    go: &Impl,
    runs: usize,
    data: &Path,
) -> Result<()> {
    for kind in ChainKind::ALL {
        let lists = [
            conflist(kind, "rcni", 0, data),
            conflist(kind, "go", 1, data),
        ];
        let (mut a, mut b) = (Samples::default(), Samples::default());
        for i in 0..runs {
            stop::check()?;
            if i % 2 == 0 {
                one(rcni, &lists[0], i, &mut a)?;
                one(go, &lists[1], i, &mut b)?;
            } else {
                one(go, &lists[1], i, &mut b)?;
                one(rcni, &lists[0], i, &mut a)?;
            }
        }
        let note = [("rcni", &a.error), ("Go", &b.error)]
            .iter()
            .filter_map(|(who, e)| e.as_ref().map(|e| format!("{who} failed: {}", short(e))))
            .collect::<Vec<_>>()
            .join("; ");
        report.add_pair(
            "latency",
            &format!("ADD {}", kind.label()),
            "ms",
            a.add,
            b.add,
            &note,
        );
        report.add_pair(
            "latency",
            &format!("DEL {}", kind.label()),
            "ms",
            a.del,
            b.del,
            &note,
        );
    }
    Ok(())
}

fn short(e: &str) -> String {
    let e = e.replace('|', "/").replace('\n', " ");
    e.chars().take(120).collect()
}

/// The bridge chain through `rcni add/del` (runtime + cache + plugins) next to the direct run.
pub fn through_runtime(
    report: &mut Report,
    rcni_cli: &Path,
    rcni: &Impl,
    runs: usize,
    data: &Path,
) -> Result<()> {
    let conf_dir = data.join("net.d");
    let cache_dir = data.join("cache");
    std::fs::create_dir_all(&conf_dir)?;
    let list = conflist(ChainKind::Bridge, "rt", 2, data);
    let name = list["name"].as_str().unwrap_or_default().to_string();
    std::fs::write(
        conf_dir.join("10-bench.conflist"),
        serde_json::to_vec(&list)?,
    )?;
    let (mut add, mut del) = (Vec::new(), Vec::new());
    let mut note = String::new();
    for _ in 0..runs {
        stop::check()?;
        let ns = NamedNs::create("r")?;
        let netns = ns.path.display().to_string();
        let run = |verb: &str| -> Result<f64> {
            let started = Instant::now();
            let out = Command::new(rcni_cli)
                .args([verb, &name, &netns])
                .arg("--conf-dir")
                .arg(&conf_dir)
                .arg("--bin-dir")
                .arg(&rcni.dir)
                .arg("--cache-dir")
                .arg(&cache_dir)
                .output()?;
            let t = ms(started.elapsed());
            if !out.status.success() {
                bail!(
                    "rcni {verb}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(t)
        };
        match run("add").and_then(|a| Ok((a, run("del")?))) {
            Ok((a, d)) => {
                add.push(a);
                del.push(d);
            }
            Err(e) => {
                note = short(&e.to_string());
                break;
            }
        }
    }
    for (verb, samples) in [("ADD", add), ("DEL", del)] {
        let direct = median(&direct_samples(
            report,
            &format!("{verb} bridge+host-local"),
        ));
        let overhead = match (median(&samples), direct) {
            (Some(rt), Some(d)) => format!(
                "direct rcni plugins: {d:.2} ms; runtime overhead {:.2} ms",
                rt - d
            ),
            _ => note.clone(),
        };
        report.add_row(Row {
            figure: "runtime",
            item: format!(
                "{verb} bridge+host-local through `rcni {}`",
                verb.to_lowercase()
            ),
            unit: "ms",
            rcni: median(&samples),
            go: None,
            note: overhead,
        });
        report.series.push(Series {
            figure: "runtime",
            item: format!("{verb} bridge+host-local"),
            implementation: "rcni",
            unit: "ms",
            samples,
        });
    }
    Ok(())
}

fn direct_samples(report: &Report, item: &str) -> Vec<f64> {
    report
        .series
        .iter()
        .find(|s| s.figure == "latency" && s.item == item && s.implementation == "rcni")
        .map(|s| s.samples.clone())
        .unwrap_or_default()
}
