//! The plugin side: every command is one request to the daemon (see `wire.rs`).

use std::path::Path;

use cni_plugin::CmdArgs;
use cni_types::{code, CniError, CniResult};

use super::conf::DhcpConf;
use super::lease::Lease;
use super::wire::{call, CallError, LeaseRequest, Request, Response};

/// The attachment of an ADD or CHECK, whose namespace must exist (code 3 when it is gone,
/// 8 when the path is not a network namespace), checked here so the daemon is never asked to
/// enter something else.
fn attachment(args: &CmdArgs, conf: &DhcpConf) -> Result<LeaseRequest, CniError> {
    crate::netns::open_required(&args.netns)?;
    // The daemon may run in another working directory.
    let netns = std::path::absolute(&args.netns).map_err(|e| {
        CniError::new(
            code::INVALID_NETNS,
            format!("cannot make {:?} an absolute path: {e}", args.netns),
        )
    })?;
    // The daemon is asked in JSON: a path that is not UTF-8 cannot be sent.
    cni_types::netns_text(&netns)?;
    Ok(LeaseRequest {
        key: args.id(),
        netns,
        params: conf.params.clone(),
    })
}

/// One request; `unreachable` is the code for a daemon that is not there.
fn ask(socket: &str, request: &Request, unreachable: u32) -> Result<Option<Lease>, CniError> {
    match call(Path::new(socket), request) {
        Ok(Response::Ok { lease }) => Ok(lease),
        Ok(Response::Error(e)) => Err(e),
        Err(e @ CallError::Unreachable { .. }) => Err(CniError::new(unreachable, e.to_string())),
        Err(e) => Err(CniError::new(code::IO_FAILURE, e.to_string())),
    }
}

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = DhcpConf::parse(&args.conf.raw, &args.args)?;
    let request = Request::Allocate(attachment(args, &conf)?);
    let lease = ask(&conf.socket, &request, code::TRY_AGAIN_LATER)?
        .ok_or_else(|| CniError::internal("dhcp daemon answered ADD without a lease"))?;
    // A lease that makes no result is the daemon answering badly, as an unreadable answer is.
    lease.to_result(&conf.params, args.version).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("the dhcp daemon at {} answered badly: {e}", conf.socket),
        )
    })
}

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = DhcpConf::parse(&args.conf.raw, &args.args)?;
    ask(
        &conf.socket,
        &Request::Release { key: args.id() },
        code::TRY_AGAIN_LATER,
    )
    .map(drop)
}

/// The daemon must hold a live lease for the attachment, and a `prevResult` with addresses
/// must contain its address.
pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = DhcpConf::parse(&args.conf.raw, &args.args)?;
    let request = Request::Check(attachment(args, &conf)?);
    let lease = ask(&conf.socket, &request, code::TRY_AGAIN_LATER)?
        .ok_or_else(|| CniError::internal("dhcp daemon answered CHECK without a lease"))?;
    if let Some(prev) = &args.prev_result {
        let found = prev.ips.iter().any(|ip| ip.address.addr() == lease.address);
        if !prev.ips.is_empty() && !found {
            return Err(CniError::internal(format!(
                "dhcp: the lease is for {}, which prevResult does not list",
                lease.address
            )));
        }
    }
    Ok(())
}

/// Ready when the daemon answers; code 50 when it does not.
pub fn status(args: &CmdArgs) -> Result<(), CniError> {
    let conf = DhcpConf::parse(&args.conf.raw, &args.args)?;
    ask(&conf.socket, &Request::Status, code::PLUGIN_NOT_AVAILABLE).map(drop)
}

pub fn gc(args: &CmdArgs) -> Result<(), CniError> {
    let conf = DhcpConf::parse(&args.conf.raw, &args.args)?;
    let request = Request::Gc {
        network: args.conf.name.clone(),
        valid: args.valid_attachments().to_vec(),
    };
    ask(&conf.socket, &request, code::TRY_AGAIN_LATER).map(drop)
}
