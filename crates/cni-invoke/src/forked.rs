//! Starting a plugin of this executable with `fork` and no `exec` ([`crate::own_plugins`]).
//!
//! The child is set up as `std::process::Command` sets up an executed plugin: its own process
//! group, the stdin pipe as fd 0 and fresh pipes as fd 1 and 2, descriptors marked
//! close-on-exec closed (an `exec` would close them), no blocked signals, and the environment
//! the plugin would have been given. It then runs the plugin as its main and ends with
//! `_exit`, so nothing of the parent's code after the fork ever runs in it. Only called when
//! this process has a single thread, so no lock can be held by a thread that is gone in the
//! child.
//!
//! One of the two places with unsafe code (the other is cni-linux's tun ioctls): `fork` has
//! no safe binding, and the child closes descriptors it knows only by number.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};

use nix::fcntl::OFlag;
use nix::libc;
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
use nix::unistd::{dup2_stderr, dup2_stdin, dup2_stdout, fork, pipe2, setpgid, ForkResult, Pid};

use crate::exec::ExecOptions;
use crate::invocation::Invocation;
use crate::own_plugins::OwnPlugins;
use crate::running::{Running, Started};

/// The exit code of a child whose plugin runner panicked past its own `catch_unwind` (the
/// code Rust gives a process that panics in `main`).
const PANICKED: i32 = 101;
/// The exit code of a child whose descriptors could not be set up (as a shell's "cannot
/// execute").
const SETUP_FAILED: i32 = 126;

/// The environment changes that turn ours into the plugin's.
struct ChildEnv {
    clear: bool,
    set: Vec<(OsString, OsString)>,
}

impl ChildEnv {
    fn new(inv: &Invocation, opts: &ExecOptions) -> Self {
        let cni = inv
            .env()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let extra = opts
            .extra_env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        ChildEnv {
            clear: opts.clear_env,
            set: cni.into_iter().chain(extra).collect(),
        }
    }

    /// Applies the changes to this (single-threaded, forked) process.
    fn apply(&self) {
        if self.clear {
            for (name, _) in std::env::vars_os() {
                std::env::remove_var(name);
            }
        }
        for (name, value) in &self.set {
            std::env::set_var(name, value);
        }
    }
}

/// Forks a child that runs the plugin `name` of `own` with `stdin` as its standard input.
pub(crate) fn spawn(
    own: &OwnPlugins,
    name: &str,
    inv: &Invocation,
    stdin: &OwnedFd,
    opts: &ExecOptions,
) -> io::Result<Started> {
    let (out_read, out_write) = pipe2(OFlag::O_CLOEXEC)?;
    let (err_read, err_write) = pipe2(OFlag::O_CLOEXEC)?;
    let env = ChildEnv::new(inv, opts);
    // Whatever sits in our stdout buffer would otherwise be written again by the child.
    let _ = io::stdout().flush();
    // SAFETY: this process has a single thread (checked by the caller), so the child inherits
    // no lock held by another thread; the child ends with `_exit` and never returns here.
    match unsafe { fork() }? {
        ForkResult::Child => {
            let code = catch_unwind(AssertUnwindSafe(|| {
                run_child(own, name, stdin, &out_write, &err_write, &env)
            }))
            .unwrap_or(PANICKED);
            // SAFETY: ends the child without running anything of the parent's (no atexit
            // handlers, no destructors); the plugin's output was written and flushed.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            // Also set here: a kill right after the fork must reach the group even if the
            // child has not run yet (the same race std handles for `process_group`).
            let _ = setpgid(child, child);
            Ok(Started {
                process: Running::Forked {
                    pid: child,
                    status: None,
                },
                stdout: File::from(out_read),
                stderr: File::from(err_read),
            })
        }
    }
}

/// The child's side: descriptors, signals and environment as after an `exec`, then the
/// plugin. Returns the exit code.
fn run_child(
    own: &OwnPlugins,
    name: &str,
    stdin: &OwnedFd,
    stdout: &OwnedFd,
    stderr: &OwnedFd,
    env: &ChildEnv,
) -> i32 {
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    let wired = dup2_stdin(stdin)
        .and(dup2_stdout(stdout))
        .and(dup2_stderr(stderr));
    if wired.is_err() {
        return SETUP_FAILED;
    }
    close_cloexec_descriptors();
    // The name `ps` and `/proc/PID/comm` show, as an exec of the plugin's path would set it.
    if let Ok(comm) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&comm);
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    env.apply();
    let code = (own.run)(name);
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    code
}

/// Closes every descriptor above stderr marked close-on-exec, as an `exec` would: the child
/// must not keep, say, the write end of another pipe or the parent's sockets open longer than
/// an executed plugin would (descriptors without the flag are inherited either way).
///
/// The descriptors are probed up to the size of the descriptor table (`FDSize` in
/// `/proc/self/status`, 64 for a small process): listing `/proc/self/fd` instead creates a
/// dentry per descriptor that the kernel has to invalidate again when the child is reaped.
fn close_cloexec_descriptors() {
    let table_size = crate::own_plugins::proc_self_status_field("FDSize:").unwrap_or(1024);
    for fd in 3..table_size {
        // SAFETY: F_GETFD and close on a number; a number that is not open fails F_GETFD.
        // Nothing in this child uses the descriptors closed here.
        unsafe {
            let flags = libc::fcntl(fd as RawFd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC != 0 {
                libc::close(fd as RawFd);
            }
        }
    }
}
