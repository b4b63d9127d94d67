//! Helpers shared by the `rcni` command-line tests, kept once here instead of once per file.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

use cni_testkit::etcd::Etcd;
use cni_testkit::{is_root, run_command, PluginOutput, Sandbox};
use serde_json::Value;

/// A real etcd in a sandbox's host namespace (dropped, so killed, before the namespace
/// goes), for the commands that keep their objects in etcd.
pub struct EtcdHost {
    pub etcd: Etcd,
    pub sb: Sandbox,
}

impl EtcdHost {
    /// `None` (the test is skipped) without root.
    pub fn new() -> Option<EtcdHost> {
        if !is_root() {
            eprintln!("skipped: needs root to create network namespaces");
            return None;
        }
        let sb = Sandbox::new().unwrap();
        let etcd = Etcd::start(sb.host(), sb.dir()).unwrap();
        Some(EtcdHost { etcd, sb })
    }

    /// `rcni ARGS` in the host namespace with `stdin`, no etcd endpoints taken from the
    /// caller's environment.
    pub fn run_rcni(&self, args: &[&str], stdin: &str) -> PluginOutput {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.sb.host().name])
            .arg(env!("CARGO_BIN_EXE_rcni"))
            .args(args)
            .env_remove("RCNI_ETCD_ENDPOINTS");
        run_command(cmd, stdin.as_bytes()).unwrap()
    }
}

/// `rcni <args>` inside the sandbox's host namespace (so the plugins it runs see only that),
/// with the test's conf dir, plugin dir and cache, and no CNI variables from the caller's
/// environment. Callers add what else they need.
pub fn rcni_in_host(
    sb: &Sandbox,
    confdir: &Path,
    plugins: &Path,
    cache: &Path,
    args: &[&str],
) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &sb.host().name])
        .arg(env!("CARGO_BIN_EXE_rcni"))
        .args(["--cache-dir", &cache.display().to_string()])
        .args(args)
        .env("NETCONFPATH", confdir)
        .env("CNI_PATH", plugins)
        .env_remove("CNI_ARGS")
        .env_remove("CAP_ARGS")
        .env_remove("CNI_IFNAME");
    c
}

/// Runs `cmd` without CNI_PATH to its end: its pid, exit code and stdout as JSON (`what`
/// and both streams in the panic when stdout is not JSON).
pub fn run_json(cmd: &mut Command, what: &str) -> (u32, i32, Value) {
    let child = cmd
        .env_remove("CNI_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (pid, out.status.code().unwrap_or(-1), v)
}

/// The lease files host-local keeps in `dir` (named by address, all in 198.18.0.0/15),
/// sorted; none when the directory is missing.
pub fn lease_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("198."))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
