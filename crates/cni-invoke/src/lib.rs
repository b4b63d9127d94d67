//! Finding and running CNI plugins (the runtime side of the exec protocol, SC §2.2).
//!
//! Used by the runtime to run chains and by plugins that delegate (IPAM). On Linux, a plugin
//! that is a link to the running multi-call executable is forked instead of executed
//! ([`register_own_plugins`]); everything else is portable.

mod error;
mod exec;
mod find;
#[cfg(target_os = "linux")]
mod forked;
mod invocation;
mod own_plugins;
#[cfg(unix)]
mod pipes;
mod running;

pub use error::InvokeError;
pub use exec::{
    decode_result, exec_raw, exec_with_result, exec_without_result, get_version_info, judge_output,
    ExecOptions,
};
pub use find::find_in_path;
pub use invocation::Invocation;
pub use own_plugins::{is_this_executable, register_own_plugins, OwnPlugins};
