//! Running one plugin process for a conformance check: exactly the CNI variables given (every
//! inherited `CNI_*` removed), stdin, a time limit, and the raw output kept for the verdict.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A plugin that takes longer than this is killed and the check fails.
const LIMIT: Duration = Duration::from_secs(20);

/// What a plugin did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit code; `None` when killed (by a signal or the time limit).
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// Stdout as one JSON value, if it is exactly that.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(self.stdout.trim()).ok()
    }

    /// The CNI error code of a failure with a well-formed error object on stdout.
    pub fn error_code(&self) -> Option<u64> {
        if self.success() {
            return None;
        }
        let v = self.json()?;
        v.get("msg")?.as_str()?;
        v.get("code")?.as_u64()
    }

    /// A short description for a failed check.
    pub fn describe(&self) -> String {
        let status = match (self.status, self.timed_out) {
            (_, true) => "killed after the time limit".to_string(),
            (Some(c), _) => format!("exit {c}"),
            (None, _) => "killed by a signal".to_string(),
        };
        let out = self.stdout.trim();
        let shown: String = out.chars().take(160).collect();
        if shown.is_empty() {
            format!("{status}, empty stdout")
        } else {
            format!("{status}, stdout {shown}")
        }
    }
}

/// The CNI variables of one call.
#[derive(Debug, Clone, Default)]
pub struct Env(pub BTreeMap<&'static str, String>);

impl Env {
    pub fn command(cmd: &str) -> Self {
        let mut e = Env::default();
        e.0.insert("CNI_COMMAND", cmd.to_string());
        e
    }

    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.0.insert(key, value.into());
        self
    }
}

/// Runs `plugin` with exactly `env` as its CNI variables and `stdin`, in the calling thread's
/// network namespace.
pub fn run(plugin: &Path, env: &Env, stdin: &str) -> Outcome {
    let mut cmd = Command::new(plugin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.0.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                status: None,
                stdout: String::new(),
                stderr: format!("cannot start {}: {e}", plugin.display()),
                timed_out: false,
            }
        }
    };
    // Writing on a thread: a plugin that does not read its stdin must not block us.
    let input = stdin.as_bytes().to_vec();
    let mut pipe = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(p) = pipe.as_mut() {
            let _ = p.write_all(&input);
        }
    });
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) if start.elapsed() < LIMIT => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(_) => break None,
        }
    };
    let _ = writer.join();
    Outcome {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
        timed_out,
    }
}
