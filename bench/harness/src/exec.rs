//! Running one plugin process with the CNI environment and timing it, spawn to exit.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// One plugin run.
pub struct Call<'a> {
    pub bin: &'a Path,
    pub command: &'a str,
    pub container_id: &'a str,
    /// CNI_NETNS, set as its bytes.
    pub netns: &'a Path,
    pub ifname: &'a str,
    /// CNI_PATH.
    pub path: &'a str,
    pub stdin: &'a [u8],
}

pub struct Outcome {
    pub elapsed: Duration,
    pub ok: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Outcome {
    pub fn describe(&self) -> String {
        format!(
            "{} {}",
            String::from_utf8_lossy(&self.stdout).trim(),
            String::from_utf8_lossy(&self.stderr).trim()
        )
    }
}

/// The command for `call`, without stdio set up (also used under strace and the RSS probe).
pub fn command(call: &Call, program: Option<&Path>) -> Command {
    let mut cmd = Command::new(program.unwrap_or(call.bin));
    cmd.env("CNI_COMMAND", call.command)
        .env("CNI_CONTAINERID", call.container_id)
        .env("CNI_NETNS", call.netns)
        .env("CNI_IFNAME", call.ifname)
        .env("CNI_ARGS", "")
        .env("CNI_PATH", call.path);
    cmd
}

/// Runs and times `call`. The clock covers spawn, the plugin's work and its exit.
pub fn run(call: &Call) -> Result<Outcome> {
    let mut cmd = command(call, None);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("spawning {}", call.bin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading; that is its business.
        let _ = stdin.write_all(call.stdin);
    }
    let out = child.wait_with_output()?;
    let elapsed = started.elapsed();
    Ok(Outcome {
        elapsed,
        ok: out.status.success(),
        stdout: out.stdout,
        stderr: out.stderr,
    })
}
