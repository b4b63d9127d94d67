//! What a finished process left behind, with the checks tests make on it.

use std::fmt;

/// Exit status, stdout and stderr of a process run by [`crate::Sandbox::run_plugin`],
/// [`crate::Sandbox::exec_in`] or [`crate::Sandbox::exec_host`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginOutput {
    /// Exit code; `128 + signal` when the process was killed by a signal.
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl PluginOutput {
    /// True when the process exited with status 0.
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// Stdout parsed as JSON (a CNI result, or the error object of a failed call).
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.stdout)
            .map_err(|e| anyhow::anyhow!("stdout is not JSON ({e}):\n{self}"))
    }

    /// The CNI error `code` from stdout when the process failed; `None` on success
    /// or when stdout holds no error object with a numeric code.
    pub fn error_code(&self) -> Option<u64> {
        if self.success() {
            return None;
        }
        self.json().ok()?.get("code")?.as_u64()
    }

    /// Panics, showing status, stdout and stderr, unless the process exited with 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "process failed:\n{self}");
        self
    }
}

/// Asserts a failure with CNI error `code`, a non-empty message and a clean stdout (one JSON
/// object, no Rust panic text or backtrace), and returns the error object.
#[track_caller]
pub fn assert_cni_error(out: &PluginOutput, code: u64) -> serde_json::Value {
    assert!(!out.success(), "expected failure:\n{out}");
    assert_clean_stdout(out);
    let v = out.json().unwrap();
    assert_eq!(v["code"], code, "{out}");
    assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{out}");
    v
}

/// No panic message or backtrace on stdout.
#[track_caller]
pub fn assert_clean_stdout(out: &PluginOutput) {
    for bad in [
        "panicked at",
        "stack backtrace",
        "RUST_BACKTRACE",
        "RCNI_TEST_PANIC",
    ] {
        assert!(!out.stdout.contains(bad), "stdout contains {bad:?}:\n{out}");
    }
}

/// Success with nothing on stdout (DEL, CHECK, STATUS, GC).
#[track_caller]
pub fn assert_silent_success(out: &PluginOutput) {
    out.assert_success();
    assert_eq!(out.stdout, "", "{out}");
}

impl fmt::Display for PluginOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(status: i32, stdout: &str) -> PluginOutput {
        PluginOutput {
            status,
            stdout: stdout.into(),
            stderr: "some log".into(),
        }
    }

    #[test]
    fn error_code_only_for_failures_with_a_code() {
        let err = r#"{"cniVersion":"1.0.0","code":7,"msg":"bad"}"#;
        assert_eq!(out(1, err).error_code(), Some(7));
        assert_eq!(out(0, err).error_code(), None);
        assert_eq!(out(1, "not json").error_code(), None);
        assert_eq!(out(1, r#"{"msg":"x"}"#).error_code(), None);
    }

    #[test]
    fn json_parses_stdout() {
        assert_eq!(out(0, r#"{"a":1}"#).json().unwrap()["a"], 1);
        assert!(out(0, "").json().is_err());
    }

    #[test]
    fn assert_success_message_shows_both_streams() {
        let failed = out(3, "the-stdout");
        let panic = std::panic::catch_unwind(|| {
            failed.assert_success();
        })
        .unwrap_err();
        let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("the-stdout"), "{msg}");
        assert!(msg.contains("some log"), "{msg}");
        assert!(msg.contains("exit status: 3"), "{msg}");
        out(0, "").assert_success();
    }
}
