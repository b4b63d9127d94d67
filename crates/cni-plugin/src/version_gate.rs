//! Per-command version gates and version reconciliation (Go's `pkg/skel/skel.go`,
//! `pkg/version/reconcile.go` and `pkg/version/plugin.go` in containernetworking/cni).
//!
//! The order and the messages follow the Go skeleton:
//! 1. CHECK needs a config version >= 0.4.0, STATUS and GC >= 1.1.0 (code 1
//!    `config version does not allow X`), and some supported plugin version at least as high
//!    as the config's (code 1 `plugin version does not allow X`). An unparsable version is
//!    code 6 here.
//! 2. Reconciliation: the config's `cniVersion` (empty is `0.1.0`) must equal, as a string, one
//!    of the plugin's versions (code 1 `incompatible CNI versions`).

use cni_types::version::go_list;
use cni_types::{CniError, SpecVersion};

use crate::command::Command;

/// The lowest config version a command is allowed at, if it has a floor.
fn floor(command: Command) -> Option<SpecVersion> {
    match command {
        Command::Check => Some(SpecVersion::V0_4_0),
        Command::Status | Command::Gc => Some(SpecVersion::V1_1_0),
        _ => None,
    }
}

/// Runs the gates and the reconciliation; returns the negotiated version.
pub(crate) fn negotiate(
    command: Command,
    config_version: &str,
    supported: &[SpecVersion],
) -> Result<SpecVersion, CniError> {
    if let Some(min) = floor(command) {
        let v =
            SpecVersion::parse(config_version).map_err(|e| CniError::decoding(e.to_string()))?;
        if v < min {
            return Err(CniError::incompatible_version(format!(
                "config version does not allow {command}"
            )));
        }
        if !supported.iter().any(|p| *p >= v) {
            return Err(CniError::incompatible_version(format!(
                "plugin version does not allow {command}"
            )));
        }
    }
    reconcile(config_version, supported)
}

/// The exact-string match of the config version against the supported list.
fn reconcile(config_version: &str, supported: &[SpecVersion]) -> Result<SpecVersion, CniError> {
    let wanted = if config_version.is_empty() {
        "0.1.0"
    } else {
        config_version
    };
    supported
        .iter()
        .copied()
        .find(|v| v.to_string() == wanted)
        .ok_or_else(|| {
            CniError::incompatible_version("incompatible CNI versions").with_details(format!(
                "config is \"{wanted}\", plugin supports {}",
                go_list(supported)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_types::code;

    const ALL: &[SpecVersion] = &SpecVersion::ALL;

    // CHECK below 0.4.0 is code 1.
    #[test]
    fn check_floor() {
        let e = negotiate(Command::Check, "0.3.1", ALL).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        assert_eq!(e.msg, "config version does not allow CHECK");
        assert_eq!(
            negotiate(Command::Check, "0.4.0", ALL).unwrap(),
            SpecVersion::V0_4_0
        );
    }

    // GC and STATUS below 1.1.0 are code 1.
    #[test]
    fn status_and_gc_floor() {
        for (cmd, name) in [(Command::Gc, "GC"), (Command::Status, "STATUS")] {
            let e = negotiate(cmd, "1.0.0", ALL).unwrap_err();
            assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
            assert_eq!(e.msg, format!("config version does not allow {name}"));
            assert_eq!(negotiate(cmd, "1.1.0", ALL).unwrap(), SpecVersion::V1_1_0);
        }
    }

    // No supported version as high as the config's.
    #[test]
    fn plugin_version_too_low() {
        let old = [SpecVersion::V0_4_0, SpecVersion::V1_0_0];
        let e = negotiate(Command::Status, "1.1.0", &old).unwrap_err();
        assert_eq!(e.msg, "plugin version does not allow STATUS");
        let e = negotiate(Command::Check, "1.1.0", &old).unwrap_err();
        assert_eq!(e.msg, "plugin version does not allow CHECK");
    }

    // An unparsable version at a gated command is a decoding failure.
    #[test]
    fn unparsable_version_at_gate() {
        let e = negotiate(Command::Check, "1.0.0-rc1", ALL).unwrap_err();
        assert_eq!(e.code, code::DECODING_FAILURE);
    }

    // Exact string match; empty means 0.1.0; Go's details format (`Reconciler.CheckRaw`).
    #[test]
    fn reconciliation() {
        let two = [SpecVersion::V1_0_0, SpecVersion::V1_1_0];
        let e = negotiate(Command::Add, "0.9.0", &two).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        assert_eq!(e.msg, "incompatible CNI versions");
        assert_eq!(
            e.details,
            "config is \"0.9.0\", plugin supports [\"1.0.0\" \"1.1.0\"]"
        );
        assert_eq!(
            negotiate(Command::Add, "", ALL).unwrap(),
            SpecVersion::V0_1_0
        );
        let e = negotiate(Command::Del, "", &two).unwrap_err();
        assert!(e.details.starts_with("config is \"0.1.0\""));
        // "0.4" parses as 0.4.0 but is not the same string.
        assert_eq!(
            negotiate(Command::Add, "0.4", ALL).unwrap_err().code,
            code::INCOMPATIBLE_VERSION
        );
        assert_eq!(
            negotiate(Command::Add, "1.0.0-rc1", ALL).unwrap_err().code,
            code::INCOMPATIBLE_VERSION
        );
    }
}
