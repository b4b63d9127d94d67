//! Figure "portmap scale": portmap ADD, CHECK and DEL of one container while N other
//! containers already have a host port (0 / 100 / 500 / 2,000; quick: 0 / 10 / 40), and beside
//! one container with 5,000 mappings (quick: 300), rcni and Go side by side.
//!
//! Each implementation works in its own throwaway host namespace (rcni's nftables tables and
//! Go's iptables chains never mix), and the existing containers are made there by real ADDs of
//! that implementation, once per level, so the state is exactly what N ADDs leave. Container
//! addresses are made up (portmap only reads them from `prevResult`): 198.18.0.0/15. The
//! measured container maps host port 9000; the fill uses 10000 + i (the big one 20000 + j).
//! Runs alternate rcni and Go; each figure is also given as a ratio to the empty host.

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::chain::Impl;
use crate::exec::{run, Call};
use crate::ns::{self, NamedNs};
use crate::report::Report;
use crate::stats::{median, ms};
use crate::stop;

pub const FIGURE: &str = "portmap scale";
const NET: &str = "pmscale";
const OPS: [&str; 3] = ["ADD", "CHECK", "DEL"];

struct Plan {
    levels: Vec<usize>,
    big: usize,
    /// Whether Go is measured beside the big container too.
    go_big: bool,
    runs: usize,
}

/// The nth made-up container address (198.18.0.2 upwards).
fn address(n: usize) -> String {
    let v = 0xc612_0002u32 + n as u32;
    format!("{}/15", std::net::Ipv4Addr::from(v))
}

fn request(netns: &Path, n: usize, mappings: Value) -> Vec<u8> {
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "portmap",
        "capabilities": { "portMappings": true },
        "snat": true,
        "runtimeConfig": { "portMappings": mappings },
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [
                { "name": "cni0", "mac": "02:00:00:00:00:01" },
                { "name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": netns }
            ],
            "ips": [{ "address": address(n), "interface": 1 }]
        }
    });
    serde_json::to_vec(&conf).unwrap_or_default()
}

fn ports(first: usize, count: usize) -> Value {
    (first..first + count)
        .map(|p| json!({ "hostPort": p, "containerPort": 80, "protocol": "tcp" }))
        .collect()
}

/// One implementation's host namespace and the pod namespace every container "lives" in.
struct Side<'a> {
    imp: &'a Impl,
    host: NamedNs,
    pod: NamedNs,
    filled: usize,
}

impl<'a> Side<'a> {
    fn new(imp: &'a Impl, tag: &str) -> Result<Side<'a>> {
        Ok(Side {
            imp,
            host: NamedNs::create(tag)?,
            pod: NamedNs::create("pmpod")?,
            filled: 0,
        })
    }

    /// Runs one portmap command inside this side's host namespace; `None` if it failed.
    fn call(&self, command: &str, cid: &str, stdin: &[u8]) -> Result<(f64, bool, String)> {
        let bin = self.imp.plugin("portmap");
        let path = self.imp.dir.display().to_string();
        std::thread::scope(|s| {
            s.spawn(|| -> Result<(f64, bool, String)> {
                ns::enter(&self.host)?;
                let out = run(&Call {
                    bin: &bin,
                    command,
                    container_id: cid,
                    netns: &self.pod.path,
                    ifname: "eth0",
                    path: &path,
                    stdin,
                })?;
                Ok((ms(out.elapsed), out.ok, out.describe()))
            })
            .join()
            .unwrap_or_else(|_| bail!("portmap runner thread panicked"))
        })
    }

    fn must(&self, command: &str, cid: &str, stdin: &[u8]) -> Result<f64> {
        let (t, ok, msg) = self.call(command, cid, stdin)?;
        if !ok {
            bail!("{} portmap {command} {cid}: {msg}", self.imp.label);
        }
        Ok(t)
    }

    /// Real ADDs until `n` containers have a mapping (a few at a time: filling is not timed).
    fn fill_to(&mut self, n: usize) -> Result<()> {
        const WORKERS: usize = 3;
        let from = self.filled;
        let this = &*self;
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..WORKERS)
                .map(|w| {
                    s.spawn(move || -> Result<()> {
                        for i in (from + w..n).step_by(WORKERS) {
                            if stop::requested() {
                                bail!("interrupted");
                            }
                            let stdin = request(&this.pod.path, i, ports(10000 + i, 1));
                            this.must("ADD", &format!("fill{i}"), &stdin)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().unwrap_or_else(|_| bail!("fill worker panicked")))
        })?;
        self.filled = self.filled.max(n);
        Ok(())
    }

    fn probe_request(&self) -> Vec<u8> {
        request(&self.pod.path, 60000, ports(9000, 1))
    }
}

/// Samples of ADD, CHECK, DEL of the probe container (a failing CHECK is not timed).
#[derive(Default)]
struct Samples {
    by_op: [Vec<f64>; 3],
    check_failure: Option<String>,
}

fn one_round(side: &Side, samples: &mut Samples) -> Result<()> {
    let stdin = side.probe_request();
    samples.by_op[0].push(side.must("ADD", "probe", &stdin)?);
    let (t, ok, msg) = side.call("CHECK", "probe", &stdin)?;
    if ok {
        samples.by_op[1].push(t);
    } else {
        samples.check_failure.get_or_insert(msg);
    }
    samples.by_op[2].push(side.must("DEL", "probe", &stdin)?);
    Ok(())
}

/// Alternating rounds on both sides (a missing side stays without samples) after an
/// untimed warm-up round.
fn rounds(sides: [Option<&Side>; 2], runs: usize) -> Result<[Samples; 2]> {
    let mut out = [Samples::default(), Samples::default()];
    for side in sides.iter().flatten() {
        one_round(side, &mut Samples::default())?;
    }
    for _ in 0..runs {
        for (side, s) in sides.iter().zip(out.iter_mut()) {
            if stop::requested() {
                bail!("interrupted");
            }
            if let Some(side) = side {
                one_round(side, s)?;
            }
        }
    }
    Ok(out)
}

/// A plugin's error as one short line: the `msg` of its error JSON, else its first line.
fn one_line(output: &str) -> String {
    let json_msg = output
        .find('{')
        .and_then(|i| {
            serde_json::Deserializer::from_str(&output[i..])
                .into_iter::<Value>()
                .next()
        })
        .and_then(Result::ok)
        .and_then(|v| v["msg"].as_str().map(String::from));
    let text = json_msg.unwrap_or_else(|| output.lines().next().unwrap_or_default().to_string());
    text.chars().filter(|c| *c != '|').take(90).collect()
}

fn ratio(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}x", v / b),
        _ => "n/a".into(),
    }
}

/// Adds the three rows of one level; `base` holds the empty-host medians (rcni, Go) per op.
fn add_rows(report: &mut Report, what: &str, got: [Samples; 2], base: &[[Option<f64>; 2]; 3]) {
    let [r, g] = got;
    for (i, op) in OPS.iter().enumerate() {
        let mut note = format!(
            "vs empty host: rcni {}, Go {}",
            ratio(median(&r.by_op[i]), base[i][0]),
            ratio(median(&g.by_op[i]), base[i][1])
        );
        if i == 1 {
            for (label, s) in [("rcni", &r), ("Go", &g)] {
                if let Some(msg) = &s.check_failure {
                    note.push_str(&format!("; {label} CHECK fails: {}", one_line(msg)));
                }
            }
        }
        report.add_pair(
            FIGURE,
            &format!("{op} {what}"),
            "ms",
            r.by_op[i].clone(),
            g.by_op[i].clone(),
            &note,
        );
    }
}

fn medians(got: &[Samples; 2]) -> [[Option<f64>; 2]; 3] {
    let m = |side: usize, op: usize| median(&got[side].by_op[op]);
    [0, 1, 2].map(|op| [m(0, op), m(1, op)])
}

pub fn measure(report: &mut Report, rcni: &Impl, go: &Impl, quick: bool) -> Result<()> {
    let plan = if quick {
        Plan {
            levels: vec![0, 10, 40],
            big: 300,
            go_big: true,
            runs: 3,
        }
    } else {
        Plan {
            levels: vec![0, 100, 500, 2000],
            big: 5000,
            go_big: false,
            runs: 12,
        }
    };
    let mut r = Side::new(rcni, "pmr")?;
    let mut g = Side::new(go, "pmg")?;
    let mut base = [[None; 2]; 3];
    for &n in &plan.levels {
        eprintln!("rcni-bench: portmap scale: {n} mapped containers");
        r.fill_to(n)?;
        g.fill_to(n)?;
        let got = rounds([Some(&r), Some(&g)], plan.runs)?;
        if n == 0 {
            base = medians(&got);
        }
        add_rows(report, &format!("at {n} mapped containers"), got, &base);
    }
    drop((r, g));

    eprintln!(
        "rcni-bench: portmap scale: beside 1 container with {} mappings",
        plan.big
    );
    let r = Side::new(rcni, "pmrb")?;
    // An empty rcni host measured in the same rounds as the one beside the big container: the
    // levels' hosts were just deleted and the kernel tears them down in the background (RCU
    // heavy, and a DEL waits for a grace period), so level 0's medians from minutes ago would
    // compare different conditions.
    let r_empty = Side::new(rcni, "pmre")?;
    // Go 1.1.1 adds a container's rules one iptables process at a time, so the big container
    // takes Go far longer than a run can wait: without `go_big` rcni is measured alone beside
    // it.
    let g = if plan.go_big {
        Some(Side::new(go, "pmgb")?)
    } else {
        None
    };
    for side in std::iter::once(&r).chain(g.as_ref()) {
        let stdin = request(&side.pod.path, 0, ports(20000, plan.big));
        side.must("ADD", "big", &stdin)?;
    }
    let [beside, empty] = rounds([Some(&r), Some(&r_empty)], plan.runs)?;
    let [_, go_beside] = rounds([None, g.as_ref()], plan.runs)?;
    let base_now = [0, 1, 2].map(|op| [median(&empty.by_op[op]), base[op][1]]);
    let what = format!("beside 1 container with {} mappings", plan.big);
    add_rows(report, &what, [beside, go_beside], &base_now);
    report.notes.push(format!(
        "portmap scale, {what}: rcni's ratio is to an empty host measured in the same rounds, \
         alternating ({} rounds); Go's, when measured, to its level-0 medians.",
        plan.runs
    ));
    if !plan.go_big {
        report.notes.push(format!(
            "portmap scale, {what}: Go not measured (Go 1.1.1 runs one iptables process per \
             rule: adding the 5,000 mappings takes more than 20 minutes on this machine)."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_the_benchmark_range() {
        assert_eq!(address(0), "198.18.0.2/15");
        assert_eq!(address(60000), "198.18.234.98/15");
        assert_eq!(ports(10, 2).as_array().unwrap().len(), 2);
    }

    #[test]
    fn failures_are_one_line() {
        let out = "{\n  \"code\": 999,\n  \"msg\": \"chain | not found\"\n}\n trailing";
        assert_eq!(one_line(out), "chain  not found");
        assert_eq!(one_line("plain\nsecond"), "plain");
    }
}
