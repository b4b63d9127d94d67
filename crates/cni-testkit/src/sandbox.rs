//! The per-test sandbox: a throwaway "host" network namespace, container namespaces,
//! and a temp dir, all removed on drop (also when the test panics).

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use anyhow::{bail, Context};

use crate::in_netns::netns_path;
use crate::names::{is_stale, unique_name, NETNS_RUN_DIR, PREFIX};
use crate::process::{run, PROCESS_TIMEOUT};
use crate::PluginOutput;

/// A network namespace made with `ip netns add`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Netns {
    /// The `ip netns` name, e.g. for `ip -n <name> ...` and the kernel readers of this kit.
    pub name: String,
    /// `/run/netns/<name>`, the value for `CNI_NETNS`.
    pub path: PathBuf,
}

/// Throwaway namespaces and a temp dir for one test.
///
/// ```no_run
/// let sb = cni_testkit::Sandbox::new()?;
/// let c = sb.add_container()?;
/// sb.exec_in(&c.name, ["ip", "link", "set", "lo", "up"])?.assert_success();
/// # anyhow::Ok(())
/// ```
///
/// Everything runs inside the sandbox's namespaces; the root network namespace is never
/// touched. Dropping the sandbox deletes its namespaces (tolerating ones already gone)
/// and its temp dir.
#[derive(Debug)]
pub struct Sandbox {
    host: Netns,
    containers: Mutex<Vec<Netns>>,
    dir: PathBuf,
}

impl Sandbox {
    /// Creates the host namespace (with `lo` up) and the temp dir.
    ///
    /// Also removes namespaces and temp dirs left by earlier test processes that were
    /// killed before their sandboxes could drop.
    pub fn new() -> anyhow::Result<Self> {
        sweep_stale();
        let dir = std::env::temp_dir().join(unique_name());
        fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let host = match add_netns() {
            Ok(host) => host,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, Drop cleans up whatever fails.
        let sandbox = Sandbox {
            host,
            containers: Mutex::new(Vec::new()),
            dir,
        };
        let lo_up = sandbox.exec_host(["ip", "link", "set", "lo", "up"])?;
        require_success(lo_up, "set lo up in the host namespace")?;
        Ok(sandbox)
    }

    /// The host namespace: where plugins run and host-side interfaces live.
    pub fn host(&self) -> &Netns {
        &self.host
    }

    /// The sandbox's temp dir (for data dirs, cache dirs, configs); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates a new, empty container namespace (`lo` is left down, as the kernel makes it).
    pub fn add_container(&self) -> anyhow::Result<Netns> {
        // Hold the lock while creating, so a namespace is never created but left unrecorded.
        let mut containers = self
            .containers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let netns = add_netns()?;
        containers.push(netns.clone());
        Ok(netns)
    }

    /// Names the network namespace of process `pid` (e.g. one a container runtime made in
    /// its own mount namespace) with `ip netns attach`, so that the kernel readers and helpers
    /// of this kit reach it; the name is removed like a container's (the namespace itself lives
    /// as long as its processes).
    pub fn attach_container(&self, pid: u32) -> anyhow::Result<Netns> {
        let mut containers = self
            .containers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let name = unique_name();
        let path = netns_path(&name)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "attach", &name, &pid.to_string()]);
        let out = run(cmd, b"", PROCESS_TIMEOUT)?;
        require_success(out, &format!("attach the network namespace of {pid}"))?;
        let netns = Netns { name, path };
        containers.push(netns.clone());
        Ok(netns)
    }

    /// Deletes a container namespace now (e.g. to test DEL after the container is gone).
    /// Succeeds when something else already deleted it; a namespace that is not (or no
    /// longer) a container of this sandbox is an error and is left alone.
    pub fn remove_container(&self, netns: &Netns) -> anyhow::Result<()> {
        let mut containers = self
            .containers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !containers.contains(netns) {
            bail!("{} is not a container of this sandbox", netns.name);
        }
        delete_netns(&netns.name)?;
        containers.retain(|c| c != netns);
        Ok(())
    }

    /// Runs `argv` inside namespace `ns` with `ip netns exec`.
    /// A non-zero exit is not an error here; check the returned output.
    pub fn exec_in<I, S>(&self, ns: &str, argv: I) -> anyhow::Result<PluginOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        netns_path(ns)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).args(argv);
        run(cmd, b"", PROCESS_TIMEOUT)
    }

    /// [`Sandbox::exec_in`] the host namespace.
    pub fn exec_host<I, S>(&self, argv: I) -> anyhow::Result<PluginOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.exec_in(&self.host.name, argv)
    }

    /// Makes `<dir>/plugins/<name> -> binary` for each name (a multi-call binary
    /// dispatches on the name it is run by) and returns that directory, ready for `CNI_PATH`.
    pub fn link_plugins(
        &self,
        binary: impl AsRef<Path>,
        names: &[&str],
    ) -> anyhow::Result<PathBuf> {
        let binary = binary.as_ref();
        let target = fs::canonicalize(binary)
            .with_context(|| format!("plugin binary {} not found", binary.display()))?;
        let dir = self.dir.join("plugins");
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for name in names {
            if name.is_empty() || name.contains('/') {
                bail!("invalid plugin name {name:?}");
            }
            let link = dir.join(name);
            if link.symlink_metadata().is_ok() {
                fs::remove_file(&link)
                    .with_context(|| format!("cannot replace {}", link.display()))?;
            }
            std::os::unix::fs::symlink(&target, &link)
                .with_context(|| format!("cannot create {}", link.display()))?;
        }
        Ok(dir)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let containers = std::mem::take(
            self.containers
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for netns in containers.iter().rev().chain([&self.host]) {
            if let Err(e) = delete_netns(&netns.name) {
                eprintln!("cni-testkit: {e:#}");
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("cni-testkit: cannot remove {}: {e}", self.dir.display());
            }
        }
    }
}

/// Turns a non-zero exit of a setup command into an error naming `what` failed.
fn require_success(out: PluginOutput, what: &str) -> anyhow::Result<()> {
    if !out.success() {
        bail!("cannot {what}:\n{out}");
    }
    Ok(())
}

fn add_netns() -> anyhow::Result<Netns> {
    let name = unique_name();
    let path = netns_path(&name)?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "add", &name]);
    let out = run(cmd, b"", PROCESS_TIMEOUT)?;
    require_success(out, &format!("create network namespace {name}"))?;
    Ok(Netns { name, path })
}

/// `ip netns del`, succeeding when the namespace is already gone.
fn delete_netns(name: &str) -> anyhow::Result<()> {
    let path = netns_path(name)?;
    if !path.exists() {
        return Ok(());
    }
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "del", name]);
    let out = run(cmd, b"", PROCESS_TIMEOUT)?;
    if !out.success() && path.exists() {
        bail!("cannot delete network namespace {name}:\n{out}");
    }
    Ok(())
}

/// Removes namespaces and temp dirs of this kit whose creating process is gone.
fn sweep_stale() {
    for name in stale_entries(Path::new(NETNS_RUN_DIR)) {
        if let Err(e) = delete_netns(&name) {
            eprintln!("cni-testkit: stale namespace: {e:#}");
        }
    }
    let tmp = std::env::temp_dir();
    for name in stale_entries(&tmp) {
        let _ = fs::remove_dir_all(tmp.join(name));
    }
}

fn stale_entries(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(PREFIX) && is_stale(name))
        .collect()
}
