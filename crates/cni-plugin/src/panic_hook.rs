//! A panic hook that still answers in CNI form: a code-999 error object on stdout, then exit 1.
//!
//! Release builds use `panic = "abort"`, so nothing runs after the hook: it writes and flushes
//! stdout itself and exits. The panic message and location go to the log (stderr or file);
//! stdout gets no panic text, only the location in `details`.

use std::io::Write;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicUsize, Ordering};

use cni_types::{pretty_json, CniError, SpecVersion};

/// Index into [`SpecVersion::ALL`] of the request's version, `usize::MAX` while unknown.
static REQUEST_VERSION: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Remembers the negotiated version so a later panic is stamped with it.
pub(crate) fn set_request_version(version: SpecVersion) {
    if let Some(i) = SpecVersion::ALL.iter().position(|v| *v == version) {
        REQUEST_VERSION.store(i, Ordering::Relaxed);
    }
}

fn request_version() -> SpecVersion {
    SpecVersion::ALL
        .get(REQUEST_VERSION.load(Ordering::Relaxed))
        .copied()
        .unwrap_or(SpecVersion::CURRENT)
}

/// Installs the hook for the whole process (done by [`crate::run`]).
pub fn install() {
    std::panic::set_hook(Box::new(on_panic));
}

/// The error object printed for a panic.
pub(crate) fn panic_error(location: &str) -> CniError {
    CniError::internal("internal error: the plugin panicked")
        .with_details(format!("at {location}; see the plugin log for the message"))
}

fn on_panic(info: &PanicHookInfo<'_>) {
    let location = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_else(|| "unknown location".into());
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    log::error!("panic at {location}: {message}");
    let mut err = panic_error(&location);
    err.cni_version = Some(request_version().to_string());
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(pretty_json(&err).as_bytes());
    let _ = out.flush();
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The hook itself is exercised against the real binary (tests of cni-plugins); here the
    // object it prints and the version stamp.
    #[test]
    fn error_object_and_stamp() {
        let e = panic_error("src/x.rs:1");
        assert_eq!(e.code, 999);
        assert!(!e.details.contains("panicked at"));
        set_request_version(SpecVersion::V0_2_0);
        assert_eq!(request_version(), SpecVersion::V0_2_0);
    }
}
