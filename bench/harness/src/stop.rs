//! Ctrl-C and SIGTERM: turn them into a flag the benchmark loops check, so every guard drops
//! and the namespaces are removed.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SigSet, Signal};

static STOP: AtomicBool = AtomicBool::new(false);

/// Blocks SIGINT/SIGTERM for this thread (and threads it starts) and waits for them on a
/// dedicated thread. Call first thing in `main`.
pub fn install() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    if set.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        if set.wait().is_ok() {
            eprintln!("rcni-bench: interrupted, cleaning up");
            STOP.store(true, Ordering::SeqCst);
        }
    });
}

pub fn requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Fails when a stop was requested, so `?` unwinds to the guards.
pub fn check() -> anyhow::Result<()> {
    if requested() {
        anyhow::bail!("interrupted");
    }
    Ok(())
}
