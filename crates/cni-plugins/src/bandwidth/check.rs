//! CHECK: the shaping ADD installed is still there with the configured settings.

use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::tc::{TcHandle, ROOT_TBF_HANDLE};
use cni_linux::Handle;
use cni_plugin::CmdArgs;
use cni_types::CniError;

use super::add::tbf;
use super::conf::{ifb_name, Bandwidth, Limit};
use super::{host_handle, host_veth, netlink_error, required_prev};

/// CHECK of one shaped link: exactly the expected TBF root.
fn verify_tbf(host: &mut Handle, link: &Link, limit: Limit) -> Result<(), CniError> {
    let want = tbf(limit)?;
    let qdiscs = host
        .qdiscs(link.index)
        .map_err(|e| netlink_error("list qdiscs", e))?;
    let found = qdiscs
        .iter()
        .find(|q| q.parent == TcHandle::ROOT && q.handle == ROOT_TBF_HANDLE && q.kind == "tbf")
        .and_then(|q| q.tbf)
        .ok_or_else(|| CniError::internal(format!("bandwidth: no tbf qdisc on {}", link.name)))?;
    if found.rate != want.rate {
        return Err(CniError::internal(format!(
            "Rate doesn't match for {} ({} != {})",
            link.name, found.rate, want.rate
        )));
    }
    if found.buffer != want.buffer {
        return Err(CniError::internal(format!(
            "Burst buffer size doesn't match for {} ({} != {})",
            link.name, found.buffer, want.buffer
        )));
    }
    if found.limit != want.limit {
        return Err(CniError::internal(format!(
            "Limit doesn't match for {} ({} != {})",
            link.name, found.limit, want.limit
        )));
    }
    Ok(())
}

pub(super) fn check(args: &CmdArgs) -> Result<(), CniError> {
    let bw = Bandwidth::parse(&args.conf)?;
    let prev = required_prev(args)?;
    let mut host = host_handle()?;
    let veth = host_veth(args, &prev, &mut host)?;
    if let Some(limit) = bw.ingress {
        verify_tbf(&mut host, &veth, limit)?;
    }
    if let Some(limit) = bw.egress {
        let ifb = ifb_name(&args.conf.name, &args.container_id);
        let link = host
            .link_by_name(&ifb)
            .map_err(|e| netlink_error("get ifb device", e))?;
        verify_tbf(&mut host, &link, limit)?;
    }
    Ok(())
}
