//! The CNI plugin skeleton (SPEC.md, Section 2: Execution Protocol; Go's `pkg/skel/skel.go`):
//! a [`Plugin`] trait and the runner that turns environment and stdin into a callback, and the
//! callback's outcome into stdout and an exit code, with the Go skeleton's validation order,
//! codes and messages.
//!
//! ```no_run
//! use cni_plugin::{CmdArgs, Plugin};
//! use cni_types::{CniError, CniResult};
//!
//! struct Noop;
//! impl Plugin for Noop {
//!     fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
//!         Ok(args.prev_result.clone().unwrap_or_else(|| CniResult::new(args.version)))
//!     }
//!     fn del(&self, _: &CmdArgs) -> Result<(), CniError> { Ok(()) }
//!     fn check(&self, _: &CmdArgs) -> Result<(), CniError> { Ok(()) }
//! }
//!
//! std::process::exit(cni_plugin::run(&Noop));
//! ```
//!
//! - [`run`] for `main`; [`run_with`] for tests (environment, stdin, stdout, stderr as seams);
//!   [`run_by_config_type`] for a multi-call executable run under its own name, which picks
//!   the plugin by the config's `type` (rcni's [`repair`] commands arrive that way).
//! - [`FnPlugin`]: a plugin written as one function per command, without an `impl Plugin`.
//! - [`Undo`]: the undo stack that makes an ADD transactional; [`ipam`]: delegation to the
//!   IPAM plugin, with [`ipam::ipam_add_with_undo`] releasing the lease when the ADD fails
//!   later.
//! - [`logger`]: `log` output to stderr or `RCNI_LOG_FILE`, level from `RCNI_LOG`.
//!
//! No Linux-specific code lives here.

mod cmd_args;
mod command;
mod env;
mod env_vars;
mod fn_plugin;
pub mod ipam;
pub mod logger;
mod own_netns;
pub mod panic_hook;
mod plugin;
pub mod repair;
mod runner;
pub mod undo;
mod version_gate;
mod version_stdin;

pub use cmd_args::CmdArgs;
pub use command::Command;
pub use env::{Env, ProcessEnv};
pub use fn_plugin::{Callback, FnPlugin};
pub use plugin::{Plugin, ResultExt};
pub use repair::{RepairAnswer, RepairMode};
pub use runner::{run, run_by_config_type, run_with};
pub use undo::Undo;

pub use cni_types::{CniError, CniResult, SpecVersion};
