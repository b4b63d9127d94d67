//! Feeding a plugin's stdin and collecting its stdout and stderr on the calling thread with
//! `poll(2)`, until every holder of the pipes has closed them (a delegate that inherited them
//! included) or a deadline passes.
//!
//! One thread instead of a writer and two readers: every hand-off between threads is a
//! wake-up, and on a loaded machine each wake-up can wait for a time slice, which cost more
//! than the plugin's own work. For the same reason stdin is filled before
//! the plugin starts ([`prefilled_stdin`]): a plugin never waits for us to be scheduled again
//! to read its config.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{ChildStderr, ChildStdout};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// What the plugin wrote.
pub(crate) struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Makes one of our fresh pipe ends non-blocking. A new pipe has no status flags besides its
/// access mode, which F_SETFL ignores, so no F_GETFL is needed first (one system call less
/// per pipe end, three per plugin run).
fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Reads what is there; `false` once the pipe reached end of file (or broke).
fn drain(r: &mut impl Read, into: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A read error means the pipe broke; what was read so far is all there is.
            Err(_) => return false,
        }
    }
}

/// Writes what the pipe takes; `false` once everything is written or the plugin closed its
/// stdin (a plugin may exit without reading it; a broken pipe is fine).
fn feed(w: &mut impl Write, input: &[u8], written: &mut usize) -> bool {
    while *written < input.len() {
        match w.write(&input[*written..]) {
            Ok(n) => *written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    false
}

/// The poll timeout for what is left until `deadline`, rounded up to whole milliseconds;
/// `None` once it has passed.
fn timeout(deadline: Option<Instant>) -> Option<PollTimeout> {
    let Some(d) = deadline else {
        return Some(PollTimeout::NONE);
    };
    let left = d.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    let ms = left
        .as_millis()
        .saturating_add(u128::from(left < Duration::from_millis(1)));
    Some(PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX))
}

/// The plugin's stdin: a pipe holding as much of the input as it takes without blocking (all
/// of it for any real config, pipes take 64 KiB).
pub(crate) struct Stdin {
    /// The end the plugin reads (blocking, as a plugin expects).
    pub read: OwnedFd,
    /// The end we write the rest to (non-blocking), `None` once everything is in the pipe:
    /// then the pipe is closed and the plugin reads the input and end of file on its own.
    pub write: Option<File>,
    /// How much of the input is in the pipe.
    pub written: usize,
}

/// A new stdin pipe for the plugin, filled with what of `input` it takes.
pub(crate) fn prefilled_stdin(input: &[u8]) -> std::io::Result<Stdin> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let mut write = File::from(write);
    set_nonblocking(write.as_fd())?;
    let mut written = 0;
    let more = feed(&mut write, input, &mut written);
    Ok(Stdin {
        read,
        write: more.then_some(write),
        written,
    })
}

/// Writes the rest of `input` (from `written` on) to `stdin`, then closes it, while reading
/// `stdout` and `stderr` to end of file. `None` when `deadline` passed first.
pub(crate) fn exchange(
    stdin: Option<File>,
    input: &[u8],
    mut written: usize,
    mut stdout: ChildStdout,
    mut stderr: ChildStderr,
    deadline: Option<Instant>,
) -> std::io::Result<Option<Output>> {
    set_nonblocking(stdout.as_fd())?;
    set_nonblocking(stderr.as_fd())?;
    let mut stdin = stdin.filter(|_| written < input.len());
    let mut out = Output {
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open || stdin.is_some() {
        let Some(wait) = timeout(deadline) else {
            return Ok(None);
        };
        let (ready_in, ready_out, ready_err) = {
            let mut fds = Vec::with_capacity(3);
            if let Some(i) = &stdin {
                fds.push(PollFd::new(i.as_fd(), PollFlags::POLLOUT));
            }
            if out_open {
                fds.push(PollFd::new(stdout.as_fd(), PollFlags::POLLIN));
            }
            if err_open {
                fds.push(PollFd::new(stderr.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, wait) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let mut ready = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()));
            (
                stdin.is_some() && ready.next().unwrap_or(false),
                out_open && ready.next().unwrap_or(false),
                err_open && ready.next().unwrap_or(false),
            )
        };
        if ready_in {
            let more = stdin.as_mut().is_some_and(|i| feed(i, input, &mut written));
            if !more {
                stdin = None;
            }
        }
        if ready_out {
            out_open = drain(&mut stdout, &mut out.stdout);
        }
        if ready_err {
            err_open = drain(&mut stderr, &mut out.stderr);
        }
    }
    Ok(Some(out))
}
