//! Panics still answer in CNI form, and still clean up.
//!
//! The workspace builds with `panic = "unwind"` (release too), so a panic unwinds through the
//! plugin: every live undo stack ([`crate::Undo`]) is dropped on the way
//! and removes what the failed call created. The hook
//! installed here only logs the message and location (to the log: stderr or a file) and
//! remembers the first location; the runner catches the unwind and answers with the code-999
//! object of [`panic_error`], which names the location but carries no panic text or backtrace.

use std::panic::PanicHookInfo;
use std::sync::Mutex;

use cni_types::CniError;

/// Where the first panic of the process happened (`file:line`), once one has.
static FIRST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// The location of the first panic the hook saw on any thread, if any.
pub(crate) fn first_panic() -> Option<String> {
    FIRST_PANIC
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// Runs `f` (a delegate run in-process) so that a panic inside it is its own: the first-panic
/// record is put back afterwards, as a delegate process's panic would never have touched it.
pub(crate) fn isolated<T>(f: impl FnOnce() -> T) -> T {
    let before = first_panic();
    let out = f();
    *FIRST_PANIC
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = before;
    out
}

/// Installs the hook for the whole process (done by [`crate::run`]).
pub fn install() {
    std::panic::set_hook(Box::new(on_panic));
}

/// The error object answered for a panic at `location`.
pub(crate) fn panic_error(location: &str) -> CniError {
    CniError::internal(format!("internal error: plugin panic at {location}"))
        .with_details("see the plugin log for the panic message")
}

/// Logs and records; never writes stdout, never exits: the unwind does the rest.
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
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("unnamed");
    log::error!("panic on thread {thread:?} at {location}: {message}");
    let mut first = FIRST_PANIC
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    first.get_or_insert(location);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The hook itself is exercised against the real binary (tests of cni-plugins); here the
    // object answered for a panic.
    #[test]
    fn error_object() {
        let e = panic_error("src/x.rs:1");
        assert_eq!(e.code, 999);
        assert!(e.msg.contains("src/x.rs:1"), "{}", e.msg);
        assert!(!e.msg.contains("panicked at"));
        assert!(!e.details.contains("panicked at"));
    }
}
