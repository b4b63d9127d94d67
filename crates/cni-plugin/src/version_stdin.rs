//! Reading stdin for VERSION without ever hanging.
//!
//! Go does not read stdin for VERSION at all. We read it to echo the caller's `cniVersion`,
//! but a caller may leave stdin open without writing (a shell over ssh, a probe script), so the
//! read gives up after [`WAIT`]. poll(2) waits in the same thread: no helper thread, no extra
//! scheduling on a busy node.

use std::io::{self, IsTerminal};
use std::time::Duration;

/// How long VERSION waits for stdin to deliver its data and end.
pub(crate) const WAIT: Duration = Duration::from_millis(500);
/// VERSION only needs `{"cniVersion":"..."}`; more than this is not read.
pub(crate) const LIMIT: usize = 64 * 1024;

/// What stdin delivered within [`WAIT`] (nothing for a terminal).
#[cfg(unix)]
pub(crate) fn read() -> Vec<u8> {
    use std::fs::File;
    use std::os::fd::AsFd;

    let stdin = io::stdin();
    if stdin.is_terminal() {
        return Vec::new();
    }
    // An unbuffered handle of our own, so poll(2) sees every byte not yet read.
    match stdin.as_fd().try_clone_to_owned() {
        Ok(fd) => read_with_deadline(File::from(fd)),
        Err(_) => Vec::new(),
    }
}

/// Reads `file` until end of file, [`LIMIT`] bytes or [`WAIT`], whichever comes first.
#[cfg(unix)]
fn read_with_deadline(mut file: std::fs::File) -> Vec<u8> {
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::time::Instant;

    use nix::errno::Errno;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    let deadline = Instant::now() + WAIT;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while buf.len() < LIMIT {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO);
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => break, // timed out
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    buf.truncate(LIMIT);
    buf
}

/// Without poll(2) we cannot bound the wait, so VERSION answers without reading.
#[cfg(not(unix))]
pub(crate) fn read() -> Vec<u8> {
    let _ = (WAIT, LIMIT, io::stdin().is_terminal());
    Vec::new()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    fn pipe() -> (std::fs::File, std::fs::File) {
        let (r, w) = nix::unistd::pipe().unwrap();
        (std::fs::File::from(r), std::fs::File::from(w))
    }

    #[test]
    fn reads_until_eof() {
        let (r, mut w) = pipe();
        w.write_all(br#"{"cniVersion":"0.4.0"}"#).unwrap();
        drop(w);
        assert_eq!(read_with_deadline(r), br#"{"cniVersion":"0.4.0"}"#);
    }

    // A writer that never closes: what arrived is returned once the wait is over.
    #[test]
    fn gives_up_on_an_open_silent_pipe() {
        let (r, mut w) = pipe();
        w.write_all(b"{}").unwrap();
        let start = Instant::now();
        assert_eq!(read_with_deadline(r), b"{}");
        let waited = start.elapsed();
        // poll(2) counts whole milliseconds.
        assert!(
            waited + Duration::from_millis(5) >= WAIT && waited < WAIT * 10,
            "{waited:?}"
        );
        drop(w);
    }
}
