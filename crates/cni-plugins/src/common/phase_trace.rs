//! Phase timestamps for benchmarks: with `RCNI_TRACE_PHASES=<file>` in its environment, a
//! plugin appends one JSON line per [`mark`] to that file (never to stdout, which carries only
//! the result): its pid, plugin name, `CNI_COMMAND`, the phase that just ended, the
//! `CLOCK_MONOTONIC` time in nanoseconds, and the cumulative kernel work counted by
//! [`cni_linux::counters`] (netlink exchanges, sysctl accesses, namespace threads, each with
//! calls and nanoseconds). `bench/run` subtracts consecutive lines to get each phase's time and
//! takes its own clock reading before the spawn as the start of the first one (exec and
//! loader start). A delegated IPAM plugin inherits the variable and writes its own lines.
//!
//! Unset, [`mark`] costs one look at an already-initialised `OnceLock`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming the trace file.
pub const TRACE_ENV: &str = "RCNI_TRACE_PHASES";

struct Tracer {
    file: Mutex<File>,
    prefix: String,
}

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

fn tracer() -> Option<&'static Tracer> {
    TRACER
        .get_or_init(|| {
            let path = std::env::var_os(TRACE_ENV).filter(|p| !p.is_empty())?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()?;
            cni_linux::counters::enable();
            let plugin = std::env::args_os()
                .next()
                .and_then(|a| {
                    std::path::Path::new(&a)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                })
                .unwrap_or_default();
            let command = std::env::var("CNI_COMMAND").unwrap_or_default();
            let prefix = format!(
                r#"{{"pid":{},"plugin":{},"command":{}"#,
                std::process::id(),
                serde_json::Value::from(plugin),
                serde_json::Value::from(command)
            );
            Some(Tracer {
                file: Mutex::new(file),
                prefix,
            })
        })
        .as_ref()
}

/// Records that `phase` just ended. Write errors are ignored: tracing never fails a plugin.
pub fn mark(phase: &str) {
    if matches!(TRACER.get(), Some(None)) {
        return;
    }
    // Read before the first call opens the file, so the open is not charged to `phase`.
    let now = cni_linux::counters::monotonic_ns();
    let Some(t) = tracer() else { return };
    let c = cni_linux::counters::snapshot();
    let line = format!(
        "{},\"phase\":{},\"t_ns\":{now},\"netlink\":{},\"netlink_ns\":{},\"sysctl\":{},\"sysctl_ns\":{},\"ns_thread\":{},\"ns_thread_ns\":{}}}\n",
        t.prefix,
        serde_json::Value::from(phase),
        c.netlink.calls,
        c.netlink.nanos,
        c.sysctl.calls,
        c.sysctl.nanos,
        c.ns_thread.calls,
        c.ns_thread.nanos,
    );
    if let Ok(mut f) = t.file.lock() {
        // One write per line: O_APPEND keeps lines of concurrent processes whole.
        let _ = f.write_all(line.as_bytes());
    }
}
