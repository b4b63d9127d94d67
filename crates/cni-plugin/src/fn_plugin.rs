//! A [`Plugin`] made of functions, one per command: a plugin whose commands live in their own
//! files (`add.rs`, `del.rs`, `check.rs`) lists them in one [`FnPlugin`] value instead of
//! writing an `impl Plugin` that only forwards.
//!
//! ```
//! use cni_plugin::{CmdArgs, FnPlugin};
//! use cni_types::{CniError, CniResult};
//!
//! fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
//!     Ok(CniResult::new(args.version))
//! }
//! fn nothing(_: &CmdArgs) -> Result<(), CniError> {
//!     Ok(())
//! }
//!
//! /// ADD, DEL and CHECK from these functions; STATUS ready and GC a no-op, as the trait's
//! /// defaults; a `status: ...` line before `..` would replace one.
//! pub const PLUGIN: FnPlugin = FnPlugin {
//!     gc: nothing,
//!     ..FnPlugin::new(add, nothing, nothing)
//! };
//! ```

use cni_types::{CniError, CniResult};

use crate::cmd_args::CmdArgs;
use crate::plugin::Plugin;
use crate::repair::{RepairAnswer, RepairMode};

/// The function of a command that answers with nothing but success or an error.
pub type Callback = fn(&CmdArgs) -> Result<(), CniError>;

/// A plugin's commands as functions. Every spec version is supported and the about line is
/// empty, as the trait's defaults (a registry of plugins can add its own line).
#[derive(Debug, Clone, Copy)]
pub struct FnPlugin {
    pub add: fn(&CmdArgs) -> Result<CniResult, CniError>,
    pub del: Callback,
    pub check: Callback,
    pub status: Callback,
    pub gc: Callback,
    pub repair: fn(&CmdArgs, RepairMode) -> Result<RepairAnswer, CniError>,
}

impl FnPlugin {
    /// ADD, DEL and CHECK from `add`, `del` and `check`; STATUS, GC and rcni's repair as the
    /// trait's defaults (ready, nothing to collect, no rules owned).
    pub const fn new(
        add: fn(&CmdArgs) -> Result<CniResult, CniError>,
        del: Callback,
        check: Callback,
    ) -> FnPlugin {
        FnPlugin {
            add,
            del,
            check,
            status: ready,
            gc: nothing_to_collect,
            repair: no_rules,
        }
    }
}

fn ready(_: &CmdArgs) -> Result<(), CniError> {
    Ok(())
}

fn nothing_to_collect(_: &CmdArgs) -> Result<(), CniError> {
    Ok(())
}

fn no_rules(_: &CmdArgs, _: RepairMode) -> Result<RepairAnswer, CniError> {
    Ok(RepairAnswer::OwnsNoRules)
}

impl Plugin for FnPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        (self.add)(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        (self.del)(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        (self.check)(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        (self.status)(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        (self.gc)(args)
    }

    fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
        (self.repair)(args, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Command;

    fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(CniResult::new(args.version))
    }
    fn refuse(_: &CmdArgs) -> Result<(), CniError> {
        Err(CniError::invalid_config("refused"))
    }

    // Each command runs its own function; the ones not given answer as the trait's defaults.
    #[test]
    fn commands_run_their_functions() {
        let plugin = FnPlugin {
            gc: refuse,
            ..FnPlugin::new(add, refuse, refuse)
        };
        let args = CmdArgs::new(Command::Add, br#"{"cniVersion":"1.1.0","name":"n"}"#).unwrap();
        assert!(plugin.add(&args).is_ok());
        assert!(plugin.del(&args).is_err());
        assert!(plugin.check(&args).is_err());
        assert!(plugin.gc(&args).is_err());
        assert!(plugin.status(&args).is_ok());
        assert_eq!(
            plugin.repair(&args, RepairMode::Look).unwrap(),
            RepairAnswer::OwnsNoRules
        );
        assert!(plugin.about().is_empty());
    }
}
