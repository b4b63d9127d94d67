//! Figure 5: peak RSS of one ADD (with its IPAM child), binary sizes, processes per operation.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use nix::sys::resource::{getrusage, UsageWho};
use serde_json::Value;

use crate::chain::{request, Attachment, Impl};
use crate::configs::{conflist, port_mapping, ChainKind};
use crate::exec::{command, Call};
use crate::ns::NamedNs;
use crate::report::{Report, Row};

/// Hidden subcommand: run one plugin (env and stdin given as JSON on our stdin) and print the
/// peak RSS in KiB of it and its children. Run in a fresh process so nothing else counts.
pub fn rss_probe() -> Result<()> {
    let spec: Value = serde_json::from_reader(std::io::stdin())?;
    let s = |k: &str| spec[k].as_str().unwrap_or_default().to_string();
    let mut cmd = Command::new(s("bin"));
    for k in [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_PATH",
    ] {
        cmd.env(k, s(k));
    }
    cmd.env("CNI_ARGS", "");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    if let Some(mut i) = child.stdin.take() {
        use std::io::Write;
        let _ = i.write_all(s("stdin").as_bytes());
    }
    child.wait()?;
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    println!("{}", usage.max_rss());
    Ok(())
}

fn rss_of(call: &Call) -> Result<f64> {
    let netns = call.netns.to_str().context("the netns path is not UTF-8")?;
    let spec = serde_json::json!({
        "bin": call.bin.display().to_string(), "CNI_COMMAND": call.command,
        "CNI_CONTAINERID": call.container_id, "CNI_NETNS": netns, "CNI_IFNAME": call.ifname,
        "CNI_PATH": call.path, "stdin": String::from_utf8_lossy(call.stdin),
    });
    let mut child = Command::new(std::env::current_exe()?)
        .arg("__rss")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    if let Some(i) = child.stdin.take() {
        serde_json::to_writer(i, &spec)?;
    }
    let out = child.wait_with_output()?;
    let kib: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("rss probe")?;
    Ok(kib / 1024.0)
}

/// How many programs one plugin run starts (itself included), counted with strace.
fn execs_of(call: &Call, trace: &Path) -> Result<f64> {
    let mut cmd = command(call, Some(Path::new("strace")));
    cmd.args(["-f", "-qq", "-e", "trace=execve", "-o"])
        .arg(trace)
        .arg(call.bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("strace")?;
    if let Some(mut i) = child.stdin.take() {
        use std::io::Write;
        let _ = i.write_all(call.stdin);
    }
    child.wait()?;
    let text = std::fs::read_to_string(trace)?;
    Ok(text
        .lines()
        .filter(|l| l.contains("execve(") && l.trim_end().ends_with("= 0"))
        .count() as f64)
}

/// Peak RSS and exec counts of a bridge ADD and a portmap ADD (portmap after the bridge ADD).
fn per_operation(imp: &Impl, slot: u8, data: &Path, strace: bool) -> Result<[Option<f64>; 4]> {
    let list = conflist(ChainKind::BridgeMasqPortmap, imp.label, slot, data);
    let ns = NamedNs::create("m")?;
    let caps = port_mapping(1);
    let att = Attachment {
        container_id: "rss1",
        netns: &ns.path,
        ifname: "eth0",
        capability_args: &caps,
    };
    let path = imp.dir.display().to_string();
    let plugins = list["plugins"].as_array().cloned().unwrap_or_default();
    let bridge_req = request(&list, &plugins[0], None, &att);
    let bridge_bin = imp.plugin("bridge");
    let call = Call {
        bin: &bridge_bin,
        command: "ADD",
        container_id: "rss1",
        netns: &ns.path,
        ifname: "eth0",
        path: &path,
        stdin: &bridge_req,
    };
    let bridge_rss = rss_of(&call).ok();
    // The RSS probe did the ADD; its result is needed for portmap, so run ADD again (idempotent
    // for host-local would not be: DEL first, then a traced/untimed ADD that keeps its output).
    let del = |req: &[u8]| {
        let _ = crate::exec::run(&Call {
            command: "DEL",
            stdin: req,
            ..call_clone(&call)
        });
    };
    del(&bridge_req);
    let bridge_execs = if strace {
        execs_of(&call, &data.join("trace-bridge")).ok()
    } else {
        None
    };
    del(&bridge_req);
    let out = crate::exec::run(&call)?;
    if !out.ok {
        bail!("bridge ADD failed: {}", out.describe());
    }
    let prev: Value = serde_json::from_slice(&out.stdout)?;
    let pm_req = request(&list, &plugins[1], Some(&prev), &att);
    let pm_bin = imp.plugin("portmap");
    let pm_call = Call {
        bin: &pm_bin,
        stdin: &pm_req,
        ..call_clone(&call)
    };
    let pm_rss = rss_of(&pm_call).ok();
    let pm_execs = if strace {
        execs_of(&pm_call, &data.join("trace-portmap")).ok()
    } else {
        None
    };
    let _ = crate::exec::run(&Call {
        command: "DEL",
        ..call_clone(&pm_call)
    });
    del(&request(&list, &plugins[0], Some(&prev), &att));
    Ok([bridge_rss, pm_rss, bridge_execs, pm_execs])
}

fn call_clone<'a>(c: &Call<'a>) -> Call<'a> {
    Call {
        bin: c.bin,
        command: c.command,
        container_id: c.container_id,
        netns: c.netns,
        ifname: c.ifname,
        path: c.path,
        stdin: c.stdin,
    }
}

fn dir_size(dir: &Path) -> f64 {
    let mut seen = std::collections::HashSet::new();
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::metadata(e.path()).ok())
                .filter(|m| m.is_file())
                // Links to one multi-call binary count once.
                .filter(|m| {
                    use std::os::unix::fs::MetadataExt;
                    seen.insert((m.dev(), m.ino()))
                })
                .map(|m| m.len() as f64)
                .sum::<f64>()
        })
        .unwrap_or(0.0)
        / (1024.0 * 1024.0)
}

pub fn measure(report: &mut Report, rcni: &Impl, go: &Impl, data: &Path) -> Result<()> {
    report.add_row(Row {
        figure: "size",
        item: "all plugins on disk".into(),
        unit: "MiB",
        rcni: Some(dir_size(&rcni.dir)),
        go: Some(dir_size(&go.dir)),
        note: "rcni: one multi-call binary; Go: one binary per plugin".into(),
    });
    let strace = Command::new("strace").arg("-V").output().is_ok();
    let a = per_operation(rcni, 30, data, strace).unwrap_or([None; 4]);
    let b = per_operation(go, 31, data, strace).unwrap_or([None; 4]);
    let items = [
        ("peak RSS, bridge ADD (incl. host-local child)", "MiB"),
        ("peak RSS, portmap ADD", "MiB"),
        ("processes started, bridge ADD", "procs"),
        ("processes started, portmap ADD", "procs"),
    ];
    for (k, (item, unit)) in items.iter().enumerate() {
        report.add_row(Row {
            figure: "resources",
            item: item.to_string(),
            unit,
            rcni: a[k],
            go: b[k],
            note: if !strace && k >= 2 {
                "strace not installed".into()
            } else {
                String::new()
            },
        });
    }
    Ok(())
}
