//! A started plugin process, executed or forked, and its output pipes: waiting, polling and
//! killing work the same for both.

use std::fs::File;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// A plugin process with the read ends of its stdout and stderr.
pub(crate) struct Started {
    pub process: Running,
    pub stdout: File,
    pub stderr: File,
}

pub(crate) enum Running {
    /// Started with `exec` by `std::process::Command`.
    Exec(Child),
    /// A forked copy of this executable ([`crate::forked`]); `status` once it was reaped.
    Forked {
        pid: Pid,
        status: Option<ExitStatus>,
    },
}

impl Running {
    /// The exit status if the process has exited (reaping it), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self {
            Running::Exec(child) => child.try_wait(),
            Running::Forked { pid, status } => {
                if status.is_none() {
                    *status = reap(*pid, Some(WaitPidFlag::WNOHANG))?;
                }
                Ok(*status)
            }
        }
    }

    /// Waits for the exit.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match self {
            Running::Exec(child) => child.wait(),
            Running::Forked { pid, status } => loop {
                if let Some(done) = *status {
                    return Ok(done);
                }
                *status = reap(*pid, None)?;
            },
        }
    }

    /// Kills the plugin's whole process group (the plugin and every child it started that did
    /// not leave the group), then reaps the plugin. The plugin is not reaped before the kill,
    /// so its pid, which is the group id, cannot have been reused.
    pub fn kill_group(&mut self) {
        let pid = match self {
            Running::Exec(child) => i32::try_from(child.id()).ok().map(Pid::from_raw),
            Running::Forked { pid, status: None } => Some(*pid),
            Running::Forked { .. } => None,
        };
        if let Some(pid) = pid {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        if let Running::Exec(child) = self {
            let _ = child.kill();
        }
        let _ = self.wait();
    }
}

/// `waitpid`, its answer as the `ExitStatus` std would report.
fn reap(pid: Pid, flags: Option<WaitPidFlag>) -> io::Result<Option<ExitStatus>> {
    loop {
        return match waitpid(pid, flags) {
            Ok(WaitStatus::Exited(_, code)) => Ok(Some(ExitStatus::from_raw((code & 0xff) << 8))),
            Ok(WaitStatus::Signaled(_, signal, core)) => Ok(Some(ExitStatus::from_raw(
                signal as i32 | if core { 0x80 } else { 0 },
            ))),
            // Not exited yet (WNOHANG), or stopped or continued: still running.
            Ok(_) if flags.is_some() => Ok(None),
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => Err(e.into()),
        };
    }
}
