//! Running a plugin process: environment, stdin, captured output, timeout, and decoding of the
//! result or the error (as libcni's `pkg/invoke/raw_exec.go` and `pkg/invoke/exec.go`). A plugin
//! runs in its own process group; a timeout kills the group, so a delegated IPAM plugin it started
//! dies with it.

use std::io::{ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cni_types::{CniError, CniResult, SpecVersion, VersionInfo};

use crate::error::InvokeError;
use crate::invocation::Invocation;

/// How a plugin is run.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Kill the plugin after this long (libcni has no timeout of its own).
    pub timeout: Option<Duration>,
    /// Start from an empty environment instead of the caller's (libcni inherits it).
    pub clear_env: bool,
    /// Extra variables, set after the CNI ones.
    pub extra_env: Vec<(String, String)>,
    /// Copy the plugin's stderr to ours when it succeeds (delegates' logs reach the caller).
    pub forward_stderr: bool,
    /// How often "text file busy" is retried, one second apart (libcni: 6 attempts in all).
    pub busy_attempts: u32,
    /// Descriptors the plugin inherits (a lock it must hold until it exits, such as a pod
    /// sandbox's): they stay close-on-exec in this process, so no other child gets them, and
    /// a copy is passed to this plugin alone (and through it to the delegates it starts).
    pub pass_fds: Vec<Arc<OwnedFd>>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            timeout: None,
            clear_env: false,
            extra_env: Vec::new(),
            forward_stderr: true,
            busy_attempts: 6,
            pass_fds: Vec::new(),
        }
    }
}

/// Output of a finished plugin.
struct Finished {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn plugin_name(plugin: &Path) -> String {
    plugin.display().to_string()
}

/// The error for a plugin that could not be started.
fn spawn_error(plugin: &Path, source: std::io::Error) -> InvokeError {
    InvokeError::Spawn {
        plugin: plugin_name(plugin),
        source,
    }
}

/// Time left until `deadline`; `None` means no deadline.
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn spawn(
    plugin: &Path,
    inv: &Invocation,
    stdin: &OwnedFd,
    opts: &ExecOptions,
    deadline: Option<Instant>,
) -> Result<Child, InvokeError> {
    let mut attempt = 0;
    loop {
        let mut cmd = Command::new(plugin);
        if opts.clear_env {
            cmd.env_clear();
        }
        cmd.envs(inv.env())
            .envs(opts.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(
                stdin.try_clone().map_err(|e| spawn_error(plugin, e))?,
            ))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so a timeout kills the delegates it started too.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if !opts.pass_fds.is_empty() {
            pass_fds(&mut cmd, &opts.pass_fds).map_err(|e| spawn_error(plugin, e))?;
        }
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            // The binary is being replaced: wait and retry, as libcni does, but fail for real
            // once the attempts (or the time) are used up.
            Err(e)
                if e.kind() == ErrorKind::ExecutableFileBusy
                    && attempt + 1 < opts.busy_attempts =>
            {
                attempt += 1;
                let pause = Duration::from_secs(1);
                if remaining(deadline).is_some_and(|left| left < pause) {
                    return Err(timeout(plugin, opts));
                }
                thread::sleep(pause);
            }
            Err(source) => return Err(spawn_error(plugin, source)),
        }
    }
}

/// Gives the command a close-on-exec copy of each descriptor, whose flag is cleared in the
/// child only, between fork and exec (the copies in this process close with the command).
#[cfg(unix)]
fn pass_fds(cmd: &mut Command, fds: &[Arc<OwnedFd>]) -> std::io::Result<()> {
    use command_fds::CommandFdExt;
    let copies = fds
        .iter()
        .map(|fd| fd.try_clone())
        .collect::<std::io::Result<Vec<OwnedFd>>>()?;
    cmd.preserved_fds(copies);
    Ok(())
}

#[cfg(not(unix))]
fn pass_fds(_: &mut Command, _: &[Arc<OwnedFd>]) -> std::io::Result<()> {
    Err(ErrorKind::Unsupported.into())
}

fn timeout(plugin: &Path, opts: &ExecOptions) -> InvokeError {
    InvokeError::Timeout {
        plugin: plugin_name(plugin),
        after: opts.timeout.unwrap_or_default(),
    }
}

/// Kills the plugin's whole process group (the plugin and every child it started that did
/// not leave the group), then reaps the plugin. The plugin is not reaped before the kill, so
/// its pid, which is the group id, cannot have been reused.
fn kill_group(child: &mut Child) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs the plugin to completion and collects its output. One deadline, set before the
/// spawn, covers everything: retries of a busy binary, writing stdin, reading output until
/// every holder of the pipes closed them (a delegate that inherited them included), and the
/// exit. When it passes, the process group is killed.
fn run(
    plugin: &Path,
    inv: &Invocation,
    stdin: &[u8],
    opts: &ExecOptions,
) -> Result<Finished, InvokeError> {
    let deadline = opts.timeout.map(|t| Instant::now() + t);
    let pipe = crate::pipes::prefilled_stdin(stdin).map_err(|e| spawn_error(plugin, e))?;
    let mut child = spawn(plugin, inv, &pipe.read, opts, deadline)?;
    // Only the plugin holds the read end now: a plugin that exits early breaks our writes.
    drop(pipe.read);
    let (Some(child_out), Some(child_err)) = (child.stdout.take(), child.stderr.take()) else {
        kill_group(&mut child);
        return Err(spawn_error(
            plugin,
            std::io::Error::other("plugin pipes missing"),
        ));
    };
    let outputs = match crate::pipes::exchange(
        pipe.write,
        stdin,
        pipe.written,
        child_out,
        child_err,
        deadline,
    ) {
        Ok(o) => o,
        Err(source) => {
            kill_group(&mut child);
            return Err(spawn_error(plugin, source));
        }
    };
    let Some(crate::pipes::Output { stdout, stderr }) = outputs else {
        kill_group(&mut child);
        return Err(timeout(plugin, opts));
    };
    let status = wait_until(&mut child, deadline).ok_or_else(|| timeout(plugin, opts))?;
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// How often [`wait_until`] yields the CPU to an exiting child before it starts sleeping.
const EXIT_YIELDS: u32 = 16;

/// Waits for a child that has closed its output (so it is normally exiting already); at the
/// deadline its group is killed and `None` returned.
///
/// The last close of the child's pipes happens a few steps before it becomes a zombie, and the
/// wake-up it causes often runs us first (about every second run under load): yielding lets
/// the child finish its exit on this CPU, where a sleep costs at least the timer slack and
/// another wake-up. A child still running after the yields is waited for with growing sleeps.
fn wait_until(child: &mut Child, deadline: Option<Instant>) -> Option<ExitStatus> {
    let Some(deadline) = deadline else {
        return child.wait().ok();
    };
    let mut yields = 0;
    let mut pause = Duration::from_micros(50);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if yields < EXIT_YIELDS => {
                yields += 1;
                thread::yield_now();
            }
            Ok(None) if Instant::now() < deadline => {
                thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                pause = (pause * 2).min(Duration::from_millis(5));
            }
            _ => {
                kill_group(child);
                return None;
            }
        }
    }
}

fn tail(bytes: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim();
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

/// Turns a non-zero exit into the plugin's error (with libcni's `RawExec.pluginErr` texts).
fn failure(plugin: &Path, f: &Finished) -> InvokeError {
    let status = match f.status.code() {
        Some(c) => format!("exit status {c}"),
        None => format!("{}", f.status),
    };
    let stdout = String::from_utf8_lossy(&f.stdout);
    let error = if !stdout.trim().is_empty() {
        CniError::from_json(&f.stdout).unwrap_or_else(|e| {
            CniError::new(
                cni_types::code::UNKNOWN,
                format!(
                    "netplugin failed but error parsing its diagnostic message {:?}: {e}",
                    stdout.trim()
                ),
            )
        })
    } else if !f.stderr.is_empty() {
        CniError::new(
            cni_types::code::UNKNOWN,
            format!("netplugin failed: {:?}: {status}", tail(&f.stderr, 1024)),
        )
    } else {
        CniError::new(
            cni_types::code::UNKNOWN,
            format!("netplugin failed with no error message: {status}"),
        )
    };
    InvokeError::Plugin {
        plugin: plugin_name(plugin),
        status,
        error: Box::new(error),
        stderr: tail(&f.stderr, 512),
    }
}

/// Runs a plugin and returns its stdout on success.
pub fn exec_raw(
    plugin: &Path,
    inv: &Invocation,
    stdin: &[u8],
    opts: &ExecOptions,
) -> Result<Vec<u8>, InvokeError> {
    let f = run(plugin, inv, stdin, opts)?;
    judge_output(plugin, f.status, f.stdout, f.stderr, opts)
}

/// Judges what a finished plugin left, exactly as [`exec_raw`] does: its stdout on success
/// (stderr forwarded when asked), its error otherwise. Also used for a plugin that was run
/// in-process instead of executed, so both answer the same.
pub fn judge_output(
    plugin: &Path,
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    opts: &ExecOptions,
) -> Result<Vec<u8>, InvokeError> {
    let f = Finished {
        status,
        stdout,
        stderr,
    };
    if !f.status.success() {
        return Err(failure(plugin, &f));
    }
    if opts.forward_stderr && !f.stderr.is_empty() {
        let _ = std::io::stderr().write_all(&f.stderr);
    }
    Ok(f.stdout)
}

/// Parses a plugin's successful ADD output (as libcni's `fixupResultVersion`): a result without
/// `cniVersion` is read as `config_version`.
pub fn decode_result(
    plugin: &Path,
    out: &[u8],
    config_version: SpecVersion,
) -> Result<CniResult, InvokeError> {
    CniResult::from_slice(out, config_version).map_err(|source| InvokeError::BadResult {
        plugin: plugin_name(plugin),
        source,
    })
}

/// Runs ADD (or any command that answers with a result) and parses the result: a result
/// without `cniVersion` is read as `config_version`.
pub fn exec_with_result(
    plugin: &Path,
    inv: &Invocation,
    stdin: &[u8],
    config_version: SpecVersion,
    opts: &ExecOptions,
) -> Result<CniResult, InvokeError> {
    let out = exec_raw(plugin, inv, stdin, opts)?;
    decode_result(plugin, &out, config_version)
}

/// Runs DEL, CHECK, STATUS or GC: success output is ignored (as libcni's
/// `ExecPluginWithoutResult`).
pub fn exec_without_result(
    plugin: &Path,
    inv: &Invocation,
    stdin: &[u8],
    opts: &ExecOptions,
) -> Result<(), InvokeError> {
    exec_raw(plugin, inv, stdin, opts).map(|_| ())
}

/// Asks a plugin which versions it supports (as libcni's `GetVersionInfo` in `pkg/invoke/exec.go`).
pub fn get_version_info(plugin: &Path, opts: &ExecOptions) -> Result<VersionInfo, InvokeError> {
    let inv = Invocation {
        command: "VERSION".into(),
        netns: "dummy".into(),
        ifname: "dummy".into(),
        path: "dummy".into(),
        ..Default::default()
    };
    let stdin = format!("{{\"cniVersion\":\"{}\"}}", SpecVersion::CURRENT);
    match exec_raw(plugin, &inv, stdin.as_bytes(), opts) {
        Ok(out) => VersionInfo::decode(&out).map_err(|e| InvokeError::BadVersionInfo {
            plugin: plugin_name(plugin),
            reason: e.to_string(),
        }),
        Err(InvokeError::Plugin { error, .. }) if error.msg == "unknown CNI_COMMAND: VERSION" => {
            Ok(VersionInfo::legacy())
        }
        Err(e) => Err(e),
    }
}
