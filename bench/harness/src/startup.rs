//! Figure 1: process start to answer, `CNI_COMMAND=VERSION`, A/B alternating.

use std::path::Path;

use anyhow::Result;

use crate::chain::Impl;
use crate::exec::{run, Call};
use crate::report::Report;
use crate::stats::ms;
use crate::stop;

fn version_ms(bin: &Path) -> Result<Option<f64>> {
    let out = run(&Call {
        bin,
        command: "VERSION",
        container_id: "",
        netns: Path::new(""),
        ifname: "",
        path: "",
        stdin: br#"{"cniVersion":"1.0.0"}"#,
    })?;
    Ok(out.ok.then(|| ms(out.elapsed)))
}

pub fn measure(report: &mut Report, rcni: &Impl, go: &Impl, runs: usize) -> Result<()> {
    for plugin in ["loopback", "bridge", "host-local"] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..runs {
            stop::check()?;
            // Alternate which goes first so drift hits both alike.
            let order = if i % 2 == 0 { [rcni, go] } else { [go, rcni] };
            for imp in order {
                if let Some(t) = version_ms(&imp.plugin(plugin))? {
                    if imp.label == "rcni" {
                        a.push(t)
                    } else {
                        b.push(t)
                    }
                }
            }
        }
        let note = if a.is_empty() {
            "rcni has no such plugin yet"
        } else {
            ""
        };
        report.add_pair("startup", &format!("VERSION {plugin}"), "ms", a, b, note);
    }
    let floor: Vec<f64> = (0..runs)
        .map(|_| {
            version_ms(Path::new("/bin/true"))
                .ok()
                .flatten()
                .unwrap_or(0.0)
        })
        .collect();
    report.add_pair(
        "startup",
        "process floor (/bin/true)",
        "ms",
        floor.clone(),
        floor,
        "same binary",
    );
    Ok(())
}
