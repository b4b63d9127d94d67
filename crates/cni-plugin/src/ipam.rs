//! Delegation to another plugin, above all IPAM (SPEC.md, Section 4: Plugin Delegation).
//!
//! The delegate is looked up in `CNI_PATH` and run with the same `CNI_*` values and the complete
//! request config the calling plugin received; only `CNI_COMMAND` may differ.
//! [`ipam_add_with_undo`] gives ADD its undo: if the caller's ADD fails after the IPAM ADD
//! succeeded, its undo stack runs the IPAM DEL so the lease is released.
//!
//! A delegate that is this very executable runs in-process ([`in_process`]), with the same
//! answer, files and error codes as when it is executed.

mod in_process;

use std::path::PathBuf;

use cni_invoke::{decode_result, exec_raw, find_in_path, ExecOptions, InvokeError};
use cni_types::{CniError, CniResult};

use crate::cmd_args::CmdArgs;
use crate::command::Command;
use crate::undo::Undo;

pub use in_process::{register as register_in_process, Resolver};

/// Runs `command` of the plugin `plugin_type` (in-process when it is this executable) and
/// returns where it was found and its stdout.
fn run_delegate(
    plugin_type: &str,
    command: Command,
    args: &CmdArgs,
) -> Result<(PathBuf, Vec<u8>), InvokeError> {
    let plugin = find_in_path(plugin_type, &args.path_dirs())?;
    let invocation = args.invocation(command);
    let opts = ExecOptions::default();
    let out = in_process::run(&plugin, plugin_type, &invocation, &args.stdin, &opts)
        .unwrap_or_else(|| exec_raw(&plugin, &invocation, &args.stdin, &opts))?;
    Ok((plugin, out))
}

/// Runs ADD of the plugin `plugin_type` and returns its result (parsed at the request version
/// when it carries none).
pub fn delegate_add(plugin_type: &str, args: &CmdArgs) -> Result<CniResult, CniError> {
    run_delegate(plugin_type, Command::Add, args)
        .and_then(|(plugin, out)| decode_result(&plugin, &out, args.version))
        .map_err(|e| e.to_cni_error())
}

/// Runs DEL, CHECK, STATUS or GC of the plugin `plugin_type`; its output is ignored.
pub fn delegate(plugin_type: &str, command: Command, args: &CmdArgs) -> Result<(), CniError> {
    run_delegate(plugin_type, command, args)
        .map(|_| ())
        .map_err(|e| e.to_cni_error())
}

/// `ipam.type`, code 7 when the config has none.
fn ipam_type(args: &CmdArgs) -> Result<&str, CniError> {
    if args.conf.ipam_type.is_empty() {
        return Err(CniError::invalid_config(
            "missing IPAM plugin type (\"ipam\": {\"type\": ...})",
        ));
    }
    Ok(&args.conf.ipam_type)
}

/// IPAM ADD. Prefer [`ipam_add_with_undo`] when more work follows that can fail.
pub fn ipam_add(args: &CmdArgs) -> Result<CniResult, CniError> {
    delegate_add(ipam_type(args)?, args)
}

/// IPAM DEL.
pub fn ipam_del(args: &CmdArgs) -> Result<(), CniError> {
    delegate(ipam_type(args)?, Command::Del, args)
}

/// IPAM CHECK.
pub fn ipam_check(args: &CmdArgs) -> Result<(), CniError> {
    delegate(ipam_type(args)?, Command::Check, args)
}

/// IPAM STATUS.
pub fn ipam_status(args: &CmdArgs) -> Result<(), CniError> {
    delegate(ipam_type(args)?, Command::Status, args)
}

/// IPAM STATUS when the config names an IPAM plugin; ready otherwise (L2-only configs of
/// bridge, macvlan, ipvlan: the Go plugins behave the same way).
pub fn ipam_status_if_configured(args: &CmdArgs) -> Result<(), CniError> {
    if args.conf.ipam_type.is_empty() {
        return Ok(());
    }
    ipam_status(args)
}

/// IPAM GC.
pub fn ipam_gc(args: &CmdArgs) -> Result<(), CniError> {
    delegate(ipam_type(args)?, Command::Gc, args)
}

/// Checks, when the config names an IPAM plugin, that its type is a valid name found in
/// `CNI_PATH`. A main plugin calls it before its first change, so a bad `ipam.type` (a path,
/// a missing plugin) changes nothing (code 7 for a bad name, as the lookup answers).
pub fn locate_if_configured(args: &CmdArgs) -> Result<(), CniError> {
    if args.conf.ipam_type.is_empty() {
        return Ok(());
    }
    find_in_path(&args.conf.ipam_type, &args.path_dirs())
        .map(|_| ())
        .map_err(|e| e.to_cni_error())
}

/// IPAM GC when the config names an IPAM plugin; nothing otherwise. Main plugins pass GC on
/// so the leases of attachments that are not valid are released (Go's main plugins do not
/// implement GC at all).
pub fn ipam_gc_if_configured(args: &CmdArgs) -> Result<(), CniError> {
    if args.conf.ipam_type.is_empty() {
        return Ok(());
    }
    ipam_gc(args)
}

/// IPAM ADD as a step of a transactional ADD: the lease is released (IPAM DEL) by `undo`
/// when the ADD fails later.
///
/// ```no_run
/// # use cni_plugin::{ipam, CmdArgs, Undo};
/// # fn configure(_: &cni_types::CniResult) -> Result<(), cni_types::CniError> { Ok(()) }
/// # fn add(args: &CmdArgs) -> Result<cni_types::CniResult, cni_types::CniError> {
/// let mut undo = Undo::new();
/// let lease = ipam::ipam_add_with_undo(args, &mut undo)?;
/// configure(&lease)?; // on error the stack drops and the lease is released
/// undo.commit();
/// Ok(lease)
/// # }
/// ```
pub fn ipam_add_with_undo<'a>(
    args: &'a CmdArgs,
    undo: &mut Undo<'a>,
) -> Result<CniResult, CniError> {
    let result = ipam_add(args)?;
    undo.push("IPAM lease", || ipam_del(args).map_err(|e| e.msg));
    Ok(result)
}

#[cfg(test)]
mod tests;
