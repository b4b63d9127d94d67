//! The lab's evidence record: what every plugin run consumed and answered, tied to the
//! operation that caused it, plus the facts a reader needs to reproduce the run (kernel
//! release, the raw network config and its SHA-256, every binary's resolved path, SHA-256 and
//! VERSION answer).
//!
//! Plugins are traced without changing the runtime: the lab's runtime searches a directory of
//! small `sh` wrappers, one per plugin, each of which keeps the stdin, the `CNI_*` environment,
//! the netns inode, stdout, stderr, exit status and start/end times of one run in a directory
//! of its own, then hands the real plugin's answer back unchanged. `CNI_PATH` points at the
//! wrappers too, so IPAM plugins a main plugin delegates to are traced as well.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One plugin run as the wrapper saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// The plugin as the runtime found it (the wrapper's name).
    pub plugin: String,
    /// The real binary the wrapper ran.
    pub path: String,
    pub env: BTreeMap<String, String>,
    pub container_id: String,
    pub netns: String,
    /// Inode of `CNI_NETNS` when the plugin started; `None` when the path did not exist.
    pub netns_inode: Option<u64>,
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
    pub exit_status: Option<i32>,
    pub duration_ms: Option<f64>,
    /// When the wrapper started, in nanoseconds since the Unix epoch.
    pub start_unix_ns: u128,
}

/// The calls one lab operation caused, in the order they started.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    pub label: String,
    pub calls: Vec<Call>,
}

/// A binary that ran, identified.
#[derive(Debug, Clone, Serialize)]
pub struct Binary {
    pub plugin: String,
    pub path: String,
    pub resolved_path: String,
    pub sha256: String,
    /// The raw VERSION answer (stdout), parsed when it is JSON.
    pub version: Value,
}

/// The network config as given and as the lab ran it (with its scratch `dataDir`).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigRecord {
    pub source: String,
    pub raw: String,
    pub sha256: String,
    pub as_run: String,
    pub as_run_sha256: String,
}

/// The whole record, written by `--record FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub kernel_release: String,
    pub bin_dir: String,
    pub config: Option<ConfigRecord>,
    pub binaries: Vec<Binary>,
    pub operations: Vec<Operation>,
}

/// Wraps a plugin directory and collects the wrappers' traces per operation.
pub struct Tracer {
    dir: PathBuf,
    calls: PathBuf,
    pub record: Record,
}

impl Tracer {
    /// Writes one wrapper per executable in `real_dir` into `<scratch>/traced-bin`.
    pub fn new(real_dir: &Path, scratch: &Path) -> Result<Tracer, String> {
        let dir = scratch.join("traced-bin");
        let calls = scratch.join("calls");
        for d in [&dir, &calls] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let entries =
            std::fs::read_dir(real_dir).map_err(|e| format!("{}: {e}", real_dir.display()))?;
        for entry in entries.flatten() {
            let real = entry.path();
            let executable = std::fs::metadata(&real)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !executable {
                continue;
            }
            let wrapper = dir.join(entry.file_name());
            std::fs::write(&wrapper, wrapper_script(&real, &calls))
                .map_err(|e| format!("{}: {e}", wrapper.display()))?;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
        }
        Ok(Tracer {
            dir,
            calls,
            record: Record {
                kernel_release: kernel_release(),
                bin_dir: real_dir.display().to_string(),
                config: None,
                binaries: Vec::new(),
                operations: Vec::new(),
            },
        })
    }

    /// The directory the runtime should search.
    pub fn bin_dir(&self) -> &Path {
        &self.dir
    }

    /// Files the calls made since the last operation under `label`, and identifies any
    /// binary not seen before.
    pub fn operation(&mut self, label: impl Into<String>) -> &Operation {
        let mut calls: Vec<Call> = std::fs::read_dir(&self.calls)
            .map(|rd| rd.flatten().filter_map(|e| read_call(&e.path())).collect())
            .unwrap_or_default();
        if let Ok(rd) = std::fs::read_dir(&self.calls) {
            for e in rd.flatten() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        calls.sort_by_key(|c| c.start_unix_ns);
        for c in &calls {
            if !self.record.binaries.iter().any(|b| b.path == c.path) {
                let b = identify(&c.plugin, &c.path, &self.record.binaries);
                self.record.binaries.push(b);
            }
        }
        self.record.operations.push(Operation {
            label: label.into(),
            calls,
        });
        self.record.operations.last().expect("just pushed")
    }

    /// The text summary of the record.
    pub fn summary(&self) -> Vec<String> {
        let r = &self.record;
        let calls: usize = r.operations.iter().map(|o| o.calls.len()).sum();
        let failed: usize = r
            .operations
            .iter()
            .flat_map(|o| &o.calls)
            .filter(|c| c.exit_status != Some(0))
            .count();
        let mut lines = vec![format!("kernel {}", r.kernel_release)];
        if let Some(c) = &r.config {
            lines.push(format!(
                "network config {} sha256 {} (as run: sha256 {})",
                c.source, c.sha256, c.as_run_sha256
            ));
        }
        lines.push(format!(
            "{calls} plugin runs over {} operations ({failed} exited non-zero), each with stdin, CNI_* env, netns inode, stdout, stderr, exit status and duration",
            r.operations.len()
        ));
        for b in &r.binaries {
            let versions = b
                .version
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_else(|| "no VERSION answer".into());
            lines.push(format!(
                "{} = {} sha256 {} versions {versions}",
                b.plugin, b.resolved_path, b.sha256
            ));
        }
        lines
    }
}

/// The wrapper: records, runs the real plugin with the recorded stdin, replays its answer.
fn wrapper_script(real: &Path, calls: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    format!(
        r#"#!/bin/sh
# rcni lab tracer: keeps what this plugin run consumed and answered, then replays it.
d=$(mktemp -d {calls}/call.XXXXXXXX) || exit 97
date +%s%N > "$d/start"
printf %s {real} > "$d/path"
env -0 > "$d/env"
cat > "$d/stdin"
if [ -n "$CNI_NETNS" ]; then stat -L -c %i "$CNI_NETNS" > "$d/netns_inode" 2>/dev/null; fi
t0=$(date +%s%N)
{real} < "$d/stdin" > "$d/stdout" 2> "$d/stderr"
rc=$?
t1=$(date +%s%N)
echo $((t1 - t0)) > "$d/duration_ns"
echo $rc > "$d/status"
cat "$d/stdout"
cat "$d/stderr" >&2
exit $rc
"#,
        calls = q(calls),
        real = q(real),
    )
}

fn read_call(dir: &Path) -> Option<Call> {
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let num = |f: &str| text(f).trim().parse::<u128>().ok();
    let env: BTreeMap<String, String> = std::fs::read(dir.join("env"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            k.starts_with("CNI_")
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect();
    let path = text("path");
    Some(Call {
        plugin: Path::new(&path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        container_id: env.get("CNI_CONTAINERID").cloned().unwrap_or_default(),
        netns: env.get("CNI_NETNS").cloned().unwrap_or_default(),
        env,
        path,
        netns_inode: text("netns_inode").trim().parse().ok(),
        stdin: text("stdin"),
        stdout: text("stdout"),
        stderr: text("stderr"),
        exit_status: text("status").trim().parse().ok(),
        duration_ms: num("duration_ns").map(|ns| ns as f64 / 1e6),
        start_unix_ns: num("start")?,
    })
}

/// Resolved path, SHA-256 and the VERSION answer of one binary. A multi-call binary behind
/// several names is hashed once (`known` already has its resolved path).
fn identify(plugin: &str, path: &str, known: &[Binary]) -> Binary {
    let resolved = std::fs::canonicalize(path)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("unresolved: {e}"));
    let sha256 = match known.iter().find(|b| b.resolved_path == resolved) {
        Some(b) => b.sha256.clone(),
        None => std::fs::read(path)
            .map(|b| sha256_hex(&b))
            .unwrap_or_else(|e| format!("unreadable: {e}")),
    };
    Binary {
        plugin: plugin.to_string(),
        path: path.to_string(),
        resolved_path: resolved,
        sha256,
        version: version_answer(path),
    }
}

fn version_answer(path: &str) -> Value {
    let out = Command::new(path)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&o.stdout).into_owned())),
        Err(e) => Value::String(format!("not run: {e}")),
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_text() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_traced_run_keeps_stdin_env_and_answer() {
        let tmp = std::env::temp_dir().join(format!("rcni-tracer-unit-{}", std::process::id()));
        let real = tmp.join("real");
        std::fs::create_dir_all(&real).unwrap();
        let plugin = real.join("echoer");
        std::fs::write(&plugin, "#!/bin/sh\ncat\necho oops >&2\nexit 3\n").unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut t = Tracer::new(&real, &tmp).unwrap();
        let out = Command::new(t.bin_dir().join("echoer"))
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "c1")
            .env("OTHER", "x")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"{\"a\":1}")?;
                c.wait_with_output()
            })
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"{\"a\":1}");
        let op = t.operation("one").clone();
        std::fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(op.calls.len(), 1);
        let c = &op.calls[0];
        assert_eq!(c.stdin, "{\"a\":1}");
        assert_eq!(c.stdout, "{\"a\":1}");
        assert_eq!(c.stderr, "oops\n");
        assert_eq!(c.exit_status, Some(3));
        assert_eq!(c.container_id, "c1");
        assert_eq!(c.env.get("CNI_COMMAND").map(String::as_str), Some("ADD"));
        assert!(!c.env.contains_key("OTHER"));
        assert!(c.duration_ms.is_some());
        assert_eq!(t.record.binaries.len(), 1);
        assert_eq!(t.record.binaries[0].sha256.len(), 64);
    }
}
