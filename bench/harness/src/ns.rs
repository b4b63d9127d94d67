//! Throwaway network namespaces for the benchmark, and entering the bench's "host" namespace.
//!
//! Every namespace is created with `ip netns add` under a unique `rcnib-` name and removed when
//! its guard drops, so an error or Ctrl-C (see `stop`) leaves nothing behind. The harness moves
//! its own threads into the bench host namespace; the machine's root namespace is never changed.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique namespace name for this run.
pub fn unique(tag: &str) -> String {
    format!(
        "rcnib-{}-{tag}{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A named namespace, deleted on drop.
pub struct NamedNs {
    pub name: String,
    pub path: PathBuf,
}

impl NamedNs {
    pub fn create(tag: &str) -> Result<NamedNs> {
        let name = unique(tag);
        run_ip(&["netns", "add", &name])?;
        let ns = NamedNs {
            path: PathBuf::from(format!("/run/netns/{name}")),
            name,
        };
        run_ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for NamedNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn run_ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The `ip` commands run with `-batch`, fed on stdin, in `netns` when given.
pub fn ip_batch(netns: Option<&str>, lines: &str) -> Result<()> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    let mut child = cmd
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running ip -batch")?;
    child
        .stdin
        .take()
        .context("ip stdin")?
        .write_all(lines.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("ip -batch: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Moves the calling thread into `ns`. Children and threads started afterwards inherit it.
pub fn enter(ns: &NamedNs) -> Result<()> {
    let f = File::open(&ns.path).with_context(|| format!("opening {}", ns.path.display()))?;
    setns(f, CloneFlags::CLONE_NEWNET).context("setns into the bench host namespace")?;
    Ok(())
}

/// Names of links in the current namespace whose name starts with `prefix` (leftover checks).
pub fn links_with_prefix(prefix: &str) -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["-j", "link", "show"]).output() else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str())
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect()
}
