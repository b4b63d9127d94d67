//! Running the IPAM plugins (host-local, static) of the real `rcni-plugins` binary, and the Go
//! reference plugins, as a runtime does. IPAM plugins touch no network namespace, so no sandbox
//! is needed: each call runs with exactly the CNI environment it is given and nothing else.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cni_testkit::{PluginCall, PluginOutput};

/// A `CNI_NETNS` that does not exist: IPAM plugins never open it.
pub const NO_NETNS: &str = "/var/run/netns/rcni-ipam-test-no-such-netns";

/// A directory of links named after the IPAM plugins, pointing to the binary cargo built.
pub struct Plugins {
    dir: tempfile::TempDir,
}

impl Plugins {
    pub fn new() -> Plugins {
        let dir = tempfile::tempdir().unwrap();
        let target = std::fs::canonicalize(crate::common::BIN).unwrap();
        for name in ["host-local", "static"] {
            std::os::unix::fs::symlink(&target, dir.path().join(name)).unwrap();
        }
        Plugins { dir }
    }

    /// The CNI_PATH directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of one plugin (argv[0] selects it).
    pub fn plugin(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A call for the attachment (`cid`, `ifname`) with `stdin`.
    pub fn call(&self, command: &str, cid: &str, ifname: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command)
            .container_id(cid)
            .netns(NO_NETNS)
            .ifname(ifname)
            .path(self.dir())
            .stdin(stdin)
    }

    /// A call without attachment variables (STATUS, GC).
    pub fn bare_call(&self, command: &str, stdin: &str) -> PluginCall {
        PluginCall::new(command).path(self.dir()).stdin(stdin)
    }
}

/// Runs `binary` with exactly the call's environment and stdin.
pub fn run(binary: &Path, call: &PluginCall) -> PluginOutput {
    let mut child = Command::new(binary)
        .env_clear()
        .envs(call.env_vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    // Configs are small: writing all of stdin before reading cannot deadlock. A plugin that
    // rejects its environment exits without reading stdin (broken pipe).
    let mut stdin = child.stdin.take().unwrap();
    if let Err(e) = stdin.write_all(call.stdin.as_bytes()) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    PluginOutput {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The Go reference plugin `name`, or `None` (with a message) when it is not installed.
pub fn go_plugin(name: &str) -> Option<PathBuf> {
    let found = cni_testkit::go_plugins_dir()
        .map(|dir| dir.join(name))
        .filter(|p| p.is_file());
    if found.is_none() {
        eprintln!(
            "skipped: Go {name} not found in {} (package containernetworking-plugins)",
            cni_testkit::GO_PLUGINS_DIR
        );
    }
    found
}

/// The files of a network directory: name -> content.
pub fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap())
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The lease files of a network directory (names that are addresses): address -> content.
pub fn leases(dir: &Path) -> std::collections::BTreeMap<String, String> {
    files(dir)
        .into_iter()
        .filter(|(name, _)| name.parse::<std::net::IpAddr>().is_ok())
        .map(|(name, content)| (name, String::from_utf8(content).unwrap()))
        .collect()
}

/// The addresses (without prefix) of a 0.3.0+ result's `ips`.
pub fn addresses(result: &serde_json::Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("no ips in {result}"))
        .iter()
        .map(|ip| {
            let a = ip["address"].as_str().unwrap();
            a.split('/').next().unwrap().to_string()
        })
        .collect()
}
