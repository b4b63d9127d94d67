//! Counts and times of kernel work (netlink exchanges, sysctl reads and writes, threads that
//! enter a namespace), for phase tracing in benchmarks (`RCNI_TRACE_PHASES`). Off unless
//! [`enable`] was called: an instrumented call then pays one relaxed atomic load, nothing else.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One request and its replies on a route netlink socket.
    Netlink = 0,
    /// One sysctl read or write.
    Sysctl = 1,
    /// One short-lived thread that entered a network namespace ([`crate::NetNs::run`]),
    /// including the work it did there.
    NsThread = 2,
}

const KINDS: usize = 3;

static ENABLED: AtomicBool = AtomicBool::new(false);
static COUNTS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
static NANOS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];

/// Starts counting (for the rest of the process).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Calls and nanoseconds of one kind so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub nanos: u64,
}

/// Everything counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub netlink: Tally,
    pub sysctl: Tally,
    pub ns_thread: Tally,
}

pub fn snapshot() -> Snapshot {
    let tally = |k: Kind| Tally {
        calls: COUNTS[k as usize].load(Ordering::Relaxed),
        nanos: NANOS[k as usize].load(Ordering::Relaxed),
    };
    Snapshot {
        netlink: tally(Kind::Netlink),
        sysctl: tally(Kind::Sysctl),
        ns_thread: tally(Kind::NsThread),
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `std::time::Instant`, readable by another
/// process (a benchmark harness) to line its own readings up with a plugin's.
pub fn monotonic_ns() -> i128 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|ts| i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec()))
        .unwrap_or_default()
}

/// Runs `f`, counting and timing it as `kind` when counting is on.
pub(crate) fn timed<T>(kind: Kind, f: impl FnOnce() -> T) -> T {
    if !ENABLED.load(Ordering::Relaxed) {
        return f();
    }
    let started = Instant::now();
    let out = f();
    let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    COUNTS[kind as usize].fetch_add(1, Ordering::Relaxed);
    NANOS[kind as usize].fetch_add(nanos, Ordering::Relaxed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_when_enabled() {
        let before = snapshot();
        timed(Kind::Sysctl, || ());
        // Other tests of this binary may have enabled counting already.
        if before == snapshot() {
            enable();
        }
        let start = snapshot();
        assert_eq!(timed(Kind::Sysctl, || 7), 7);
        let end = snapshot();
        assert_eq!(end.sysctl.calls, start.sysctl.calls + 1);
        assert_eq!(end.netlink, start.netlink);
    }
}
