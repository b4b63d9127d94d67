//! Figure "host-local scale": host-local ADD, CHECK and DEL run directly (the IPAM plugin as its
//! own process) against a store that already holds N leases in the one range, rcni and Go side
//! by side in the same run, alternating which goes first. Each implementation has its own data
//! directory, filled with the same N lease files (as Go writes them) and a `last_reserved_ip.0`
//! after the last, so round-robin starts at a free address for both. Every ADD is followed by
//! its CHECK and DEL, so the count stays N throughout.

use std::net::Ipv4Addr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::chain::Impl;
use crate::exec::{run, Call};
use crate::report::{Report, Row};
use crate::stats::{median, ms};
use crate::stop;

pub const FIGURE: &str = "host-local scale";
const NETWORK: &str = "hlscale";
const SUBNET_BASE: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 0);
const OPS: [&str; 3] = ["ADD", "CHECK", "DEL"];

/// Lease counts and timed rounds per count.
pub fn plan(quick: bool) -> (Vec<usize>, usize) {
    if quick {
        (vec![0, 100, 1_000], 5)
    } else {
        (vec![0, 1_000, 10_000], 40)
    }
}

fn config(data_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "ipam": {
            "type": "host-local",
            "dataDir": data_dir.display().to_string(),
            "ranges": [[{"subnet": format!("{SUBNET_BASE}/16")}]]
        }
    })
}

/// Writes `count` leases the way Go does (`<id>\r\n<ifname>`, mode 0600) from .0.2 upwards,
/// and the round-robin hint after the last.
fn populate(data_dir: &Path, count: usize) -> Result<()> {
    let dir = data_dir.join(NETWORK);
    std::fs::create_dir_all(&dir)?;
    let base = u32::from(SUBNET_BASE) + 2;
    for i in 0..count {
        let addr = Ipv4Addr::from(base + i as u32);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(addr.to_string()))
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, format!("pre{i}\r\neth0").as_bytes())
            })
            .with_context(|| format!("lease {addr}"))?;
    }
    if count > 0 {
        let last = Ipv4Addr::from(base + count as u32 - 1);
        std::fs::write(dir.join("last_reserved_ip.0"), last.to_string())?;
    }
    Ok(())
}

/// One implementation at one lease count.
struct Store {
    imp: Impl,
    data_dir: PathBuf,
    conf: Value,
}

impl Store {
    fn call(&self, command: &str, cid: &str, stdin: &[u8]) -> Result<(f64, Vec<u8>)> {
        let bin = self.imp.plugin("host-local");
        let path = self.imp.dir.display().to_string();
        let out = run(&Call {
            bin: &bin,
            command,
            container_id: cid,
            // host-local never enters it; it only has to be given.
            netns: Path::new("/run/netns/rcni-bench-none"),
            ifname: "eth0",
            path: &path,
            stdin,
        })?;
        if !out.ok {
            bail!(
                "{} host-local {command} failed: {}",
                self.imp.label,
                out.describe()
            );
        }
        Ok((ms(out.elapsed), out.stdout))
    }

    /// ADD, CHECK (with the ADD's result as prevResult), DEL; their times.
    fn round(&self, cid: &str) -> Result<[f64; 3]> {
        let stdin = serde_json::to_vec(&self.conf)?;
        let (add, result) = self.call("ADD", cid, &stdin)?;
        let mut with_prev = self.conf.clone();
        with_prev["prevResult"] = serde_json::from_slice(&result)?;
        let (check, _) = self.call("CHECK", cid, &serde_json::to_vec(&with_prev)?)?;
        let (del, _) = self.call("DEL", cid, &stdin)?;
        Ok([add, check, del])
    }
}

/// samples[op][count index][0 = rcni, 1 = Go]
type Samples = Vec<Vec<[Vec<f64>; 2]>>;

pub fn measure(
    report: &mut Report,
    rcni: &Impl,
    go: &Impl,
    quick: bool,
    work: &Path,
) -> Result<()> {
    let (counts, rounds) = plan(quick);
    let mut samples: Samples = vec![vec![[Vec::new(), Vec::new()]; counts.len()]; OPS.len()];
    // stores[count index][0 = rcni, 1 = Go]
    let mut stores = Vec::new();
    for &count in &counts {
        let pair = [rcni, go]
            .into_iter()
            .map(|imp| -> Result<Store> {
                let data_dir = work.join(format!("hlscale-{}-{count}", imp.label));
                let _ = std::fs::remove_dir_all(&data_dir);
                populate(&data_dir, count)?;
                Ok(Store {
                    imp: imp.clone(),
                    conf: config(&data_dir),
                    data_dir,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        stores.push(pair);
    }
    // Untimed warm-up: page cache, and rcni's owner index built from the Go-written files.
    for store in stores.iter().flatten() {
        store.round("warmup")?;
    }
    // Every round visits every count, so a change in machine load hits all of them alike.
    for r in 0..rounds {
        stop::check()?;
        for k in 0..counts.len() {
            let c = (k + r) % counts.len();
            let order = if (r + k) % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let times = stores[c][which].round(&format!("s{r}"))?;
                for (op, t) in times.into_iter().enumerate() {
                    samples[op][c][which].push(t);
                }
            }
        }
    }
    for store in stores.iter().flatten() {
        let _ = std::fs::remove_dir_all(&store.data_dir);
    }
    for (op, name) in OPS.iter().enumerate() {
        let base = [0, 1].map(|i| median(&samples[op][0][i]));
        for (c, &count) in counts.iter().enumerate() {
            let [r, g] = std::mem::take(&mut samples[op][c]);
            let growth = |i: usize, s: &[f64]| match (median(s), base[i]) {
                (Some(v), Some(b)) if b > 0.0 => format!("{:.2}x", v / b),
                _ => "n/a".into(),
            };
            let note = format!(
                "vs 0 leases: rcni {}, Go {} (target: rcni within 1.30x)",
                growth(0, &r),
                growth(1, &g)
            );
            report.add_pair(
                FIGURE,
                &format!("{name} at {count} leases"),
                "ms",
                r,
                g,
                &note,
            );
        }
    }
    report.notes.push(format!(
        "host-local scale: the IPAM plugin alone, {rounds} rounds, each running ADD+CHECK+DEL at \
         every lease count ({counts:?}) for rcni and Go in alternating order, each on its own \
         store of Go-format leases in one /16 range."
    ));
    Ok(())
}

/// The row a caller may add when the figure could not run.
pub fn failed_row(e: &anyhow::Error) -> Row {
    Row {
        figure: FIGURE,
        item: "not measured".into(),
        unit: "ms",
        rcni: None,
        go: None,
        note: format!("{e:#}"),
    }
}
