//! Finding and running CNI plugins (the runtime side of the exec protocol; libcni's `pkg/invoke`).
//!
//! Used by the runtime to run chains and by plugins that delegate (IPAM).

mod error;
mod exec;
mod find;
mod invocation;
#[cfg(unix)]
mod pipes;

pub use error::InvokeError;
pub use exec::{
    decode_result, exec_raw, exec_with_result, exec_without_result, get_version_info, judge_output,
    ExecOptions,
};
pub use find::find_in_path;
pub use invocation::{Invocation, RCNI_REPAIR, RCNI_REPAIR_LOOK};
