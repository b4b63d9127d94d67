//! The trait every plugin implements.

use std::fmt::Display;

use cni_types::{CniError, CniResult, SpecVersion};

use crate::cmd_args::CmdArgs;
use crate::repair::{RepairAnswer, RepairMode};

/// A CNI plugin: one callback per command. The runner has already validated the environment,
/// parsed the config, gated and negotiated the version when a callback runs.
///
/// Errors are [`CniError`]s and are printed unchanged. Untyped failures should become code 999
/// ([`CniError::internal`], or [`ResultExt::or_internal`]), as the Go skeleton does.
pub trait Plugin {
    /// ADD. The result is printed in `args.version`. A plugin that changes nothing
    /// result-relevant returns `args.prev_result` unchanged.
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError>;

    /// DEL: idempotent and best effort.
    fn del(&self, args: &CmdArgs) -> Result<(), CniError>;

    /// CHECK (only reached at config versions >= 0.4.0).
    fn check(&self, args: &CmdArgs) -> Result<(), CniError>;

    /// STATUS (only reached at >= 1.1.0). Default: ready.
    fn status(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    /// GC (only reached at >= 1.1.0). Default: nothing to collect.
    fn gc(&self, _args: &CmdArgs) -> Result<(), CniError> {
        Ok(())
    }

    /// rcni's repair ([`crate::repair`]): the nf_tables rules this plugin's ADD made for the
    /// attachment that are missing now, put back unless `mode` only looks. Default: the
    /// plugin makes no rules.
    fn repair(&self, _args: &CmdArgs, _mode: RepairMode) -> Result<RepairAnswer, CniError> {
        Ok(RepairAnswer::OwnsNoRules)
    }

    /// The spec versions this plugin speaks. Default: all seven.
    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL.to_vec()
    }

    /// One line printed on stderr when run without `CNI_COMMAND`, e.g.
    /// `CNI loopback plugin (rcni 0.1.0)`. Empty: a missing command is a code-4 error instead.
    fn about(&self) -> String {
        String::new()
    }
}

/// Turns any displayable error into a [`CniError`].
pub trait ResultExt<T> {
    /// Code 999 (internal), message `context: error`.
    fn or_internal(self, context: &str) -> Result<T, CniError>;
    /// The given code, message `context: error`.
    fn or_code(self, code: u32, context: &str) -> Result<T, CniError>;
}

impl<T, E: Display> ResultExt<T> for Result<T, E> {
    fn or_internal(self, context: &str) -> Result<T, CniError> {
        self.or_code(cni_types::code::INTERNAL, context)
    }

    fn or_code(self, code: u32, context: &str) -> Result<T, CniError> {
        self.map_err(|e| {
            if context.is_empty() {
                CniError::new(code, e.to_string())
            } else {
                CniError::new(code, format!("{context}: {e}"))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Untyped errors become code 999 carrying the error text, as in Go's skeleton.
    #[test]
    fn untyped_errors_are_internal() {
        let r: Result<(), std::io::Error> = Err(std::io::Error::other("disk on fire"));
        let e = r.or_internal("writing lease").unwrap_err();
        assert_eq!(e.code, 999);
        assert_eq!(e.msg, "writing lease: disk on fire");
        let r: Result<(), String> = Err("x".into());
        assert_eq!(r.or_code(11, "").unwrap_err().msg, "x");
    }
}
