//! Running Rust code inside a named network namespace, on a thread of its own.
//!
//! `setns` switches only the calling thread, so the work runs on a fresh thread that
//! enters the namespace first and never returns to the test's threads. If entering
//! fails, the work does not run at all: it must never fall back to the root namespace.

use std::fs::File;
use std::path::PathBuf;
use std::thread;

use anyhow::{anyhow, bail, Context};
use nix::sched::{setns, CloneFlags};

use crate::names::NETNS_RUN_DIR;

/// `/run/netns/<ns>`, after checking `ns` is a plain name (no path tricks, not empty).
pub(crate) fn netns_path(ns: &str) -> anyhow::Result<PathBuf> {
    if ns.is_empty() || ns.contains('/') || ns == "." || ns == ".." {
        bail!("invalid network namespace name {ns:?}");
    }
    Ok(PathBuf::from(NETNS_RUN_DIR).join(ns))
}

/// Moves the calling thread into namespace `ns`. Only call on a thread you own.
pub(crate) fn enter(ns: &str) -> anyhow::Result<()> {
    let path = netns_path(ns)?;
    let handle = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    setns(handle, CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("cannot enter network namespace {}", path.display()))
}

/// Runs `work` on a new thread inside namespace `ns` and returns its result.
pub fn run_in<T, F>(ns: &str, work: F) -> anyhow::Result<T>
where
    T: Send,
    F: FnOnce() -> anyhow::Result<T> + Send,
{
    thread::scope(|scope| {
        scope
            .spawn(|| {
                enter(ns)?;
                work()
            })
            .join()
            .map_err(|_| anyhow!("work inside namespace {ns} panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_are_paths() {
        for bad in ["", "a/b", "..", ".", "/run/netns/x"] {
            assert!(netns_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            netns_path("rcnit-1").unwrap(),
            PathBuf::from("/run/netns/rcnit-1")
        );
    }

    #[test]
    fn missing_namespace_does_not_run_the_work() {
        let ran = std::sync::atomic::AtomicBool::new(false);
        let result = run_in("rcnit-does-not-exist", || {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        });
        assert!(result.is_err());
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
