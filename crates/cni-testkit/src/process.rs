//! Running a child process with stdin, a deadline, and captured stdout/stderr.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::PluginOutput;

/// How long any child process may run before it is killed and the call fails.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `cmd` to completion, feeding it `stdin`, killing it after `timeout`.
pub(crate) fn run(
    mut cmd: Command,
    stdin: &[u8],
    timeout: Duration,
) -> anyhow::Result<PluginOutput> {
    let program = format!("{cmd:?}");
    // Own process group, so a timeout kills the child and everything it started.
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;

    // Pipes are drained on their own threads so a chatty child never blocks on a full pipe.
    let mut input = child.stdin.take().context("child stdin")?;
    let stdin = stdin.to_vec();
    let writer = thread::spawn(move || {
        // A child that exits without reading its stdin closes the pipe: not our error.
        let _ = input.write_all(&stdin);
    });
    let stdout = drain(child.stdout.take().context("child stdout")?);
    let stderr = drain(child.stderr.take().context("child stderr")?);

    let status = wait_with_deadline(&mut child, timeout);
    let _ = writer.join();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let Some(status) = status? else {
        bail!("{program} did not finish within {timeout:?}; stderr:\n{stderr}");
    };
    Ok(PluginOutput {
        status: exit_code(status),
        stdout,
        stderr,
    })
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// `Ok(None)` when the deadline passed (the child's process group is then killed and
/// the child reaped).
fn wait_with_deadline(child: &mut Child, timeout: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("waiting for child")? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn captures_streams_status_and_stdin() {
        let out = run(sh("cat; echo err >&2; exit 3"), b"hello", PROCESS_TIMEOUT).unwrap();
        assert_eq!(out.status, 3);
        assert_eq!(out.stdout, "hello");
        assert_eq!(out.stderr, "err\n");
    }

    #[test]
    fn kills_a_child_past_its_deadline() {
        let started = Instant::now();
        let err = run(sh("sleep 30; echo never"), b"", Duration::from_millis(200)).unwrap_err();
        assert!(err.to_string().contains("did not finish"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn missing_program_is_an_error() {
        assert!(run(Command::new("/nonexistent/prog"), b"", PROCESS_TIMEOUT).is_err());
    }
}
