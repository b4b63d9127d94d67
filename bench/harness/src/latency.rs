//! Figure 2: attachment latency, ADD and DEL separately, per chain, plugins executed directly.
//! (The runtime's own overhead is figure "runtime", in `overhead`.)

use std::path::Path;

use anyhow::Result;

use crate::chain::{self, Attachment, Impl};
use crate::configs::{conflist, port_mapping, ChainKind};
use crate::ns::NamedNs;
use crate::report::Report;
use crate::stats::ms;
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
