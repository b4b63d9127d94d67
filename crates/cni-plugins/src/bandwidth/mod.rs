//! bandwidth (PL §1.15): a chained plugin that shapes an attachment's traffic with token-bucket
//! (TBF) qdiscs in the host namespace, on the host end of the container's veth.
//!
//! - Ingress (into the container): a TBF root qdisc `1:` on the host veth.
//! - Egress (out of the container): an IFB device named by [`conf::ifb_name`], with a TBF root
//!   qdisc; the host veth gets an ingress qdisc and a u32 match-all filter redirecting every
//!   packet to the IFB.
//! - ADD needs `prevResult` (unless nothing is shaped) and returns it, with the IFB appended to
//!   `interfaces`. DEL deletes the IFB and needs no netns. CHECK compares the TBF settings.
//!   STATUS and GC are no-ops, as in Go. Versions from 0.3.0.
//!
//! Deliberate differences from the Go plugin:
//! - invalid input is code 7 (Go: 999); rates below 8 bit/s and bursts below 8 bits are refused
//!   (Go divides by zero or asks the kernel for an empty bucket);
//! - a failed ADD removes what it created (Go leaves it until DEL);
//! - `prevResult` is required even when nothing is shaped (Go cannot print a missing result
//!   either);
//! - the TBF root is installed with replace semantics, so a repeated ADD does not fail;
//! - the redirect filter carries one mirred action (Go's netlink library sends the same
//!   redirect twice);
//! - DEL does not validate the limits (it only needs the network name and container ID), but
//!   refuses a key of the wrong type, as Go and every rcni plugin do;
//! - GC cannot tell which `bwp…` devices belong to this network (the name is a hash of the
//!   network name and the container ID), so it removes nothing, like Go.

pub mod conf;

use cni_linux::rtnl::link::{Link, LinkSpec};
use cni_linux::rtnl::tc::{TbfParams, TcHandle, ROOT_TBF_HANDLE};
use cni_linux::{Handle, NetlinkError};
use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult, Interface, SpecVersion};

use crate::common::fault;
use crate::netns;
use conf::{ifb_name, Bandwidth, Limit};

/// The bandwidth plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct BandwidthPlugin;

fn netlink_error(what: &str, e: NetlinkError) -> CniError {
    CniError::internal(format!("bandwidth: {what}: {e}"))
}

fn host_handle() -> Result<Handle, CniError> {
    Handle::new().map_err(|e| netlink_error("cannot open a netlink socket", e))
}

/// The host end of the container interface's veth, which must be listed in `prevResult` as a
/// host interface (found as Go finds it: through the container link's peer index).
fn host_veth(args: &CmdArgs, prev: &CniResult, host: &mut Handle) -> Result<Link, CniError> {
    if prev.interfaces.is_empty() {
        return Err(CniError::invalid_config(
            "bandwidth: no interfaces provided",
        ));
    }
    let ns = netns::open_required(&args.netns)?;
    let ifname = args.ifname.clone();
    let peer = ns
        .run(move || -> Result<Option<u32>, NetlinkError> {
            let link = Handle::new()?.link_by_name(&ifname)?;
            Ok(link.link.filter(|_| link.kind.as_deref() == Some("veth")))
        })
        .map_err(|e| CniError::invalid_netns(format!("bandwidth: {e}")))?;
    let peer = match peer {
        Ok(Some(index)) if index > 0 => index,
        Ok(_) => {
            return Err(CniError::internal(format!(
                "container interface {} has no veth peer",
                args.ifname
            )))
        }
        Err(e) => {
            return Err(CniError::internal(format!(
                "container interface {} has no veth peer: {e}",
                args.ifname
            )))
        }
    };
    let link = host.link_by_index(peer).map_err(|_| {
        CniError::internal(format!("veth peer with index {peer} is not in host ns"))
    })?;
    if prev
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == link.name)
    {
        Ok(link)
    } else {
        Err(CniError::internal(
            "no veth peer of container interface found in host ns",
        ))
    }
}

fn tbf(limit: Limit) -> Result<TbfParams, CniError> {
    TbfParams::from_bits(limit.rate, limit.burst)
        .map_err(|e| CniError::invalid_config(format!("bandwidth: {e}")))
}

/// What a failing ADD has to take back.
#[derive(Default)]
struct Created {
    root_tbf: Option<u32>,
    ingress_qdisc: Option<u32>,
    ifb: Option<String>,
}

impl Created {
    fn undo(self, host: &mut Handle) {
        if let Some(index) = self.ingress_qdisc {
            if let Err(e) = host.delete_qdisc(index, TcHandle::INGRESS) {
                log::warn!("bandwidth: undo: cannot delete the ingress qdisc: {e}");
            }
        }
        if let Some(index) = self.root_tbf {
            if let Err(e) = host.delete_qdisc(index, TcHandle::ROOT) {
                log::warn!("bandwidth: undo: cannot delete the TBF qdisc: {e}");
            }
        }
        if let Some(name) = self.ifb {
            if let Err(e) = host.delete_link_by_name(&name) {
                log::warn!("bandwidth: undo: cannot delete {name}: {e}");
            }
        }
    }
}

/// Installs the shaping; records each step in `created`. Returns the IFB interface, if any.
fn shape(
    host: &mut Handle,
    veth: &Link,
    bw: &Bandwidth,
    ifb: &str,
    created: &mut Created,
) -> Result<Option<Interface>, CniError> {
    if let Some(limit) = bw.ingress {
        host.replace_root_tbf(veth.index, &tbf(limit)?)
            .map_err(|e| netlink_error("create qdisc", e))?;
        created.root_tbf = Some(veth.index);
    }
    fault::inject("bandwidth", "ingress")?;
    let Some(limit) = bw.egress else {
        return Ok(None);
    };
    let params = tbf(limit)?;
    let spec = LinkSpec {
        mtu: Some(veth.mtu),
        ..LinkSpec::named(ifb)
    };
    host.create_ifb(&spec, 0)
        .map_err(|e| netlink_error("adding link", e))?;
    created.ifb = Some(ifb.to_string());
    let ifb_link = host
        .link_by_name(ifb)
        .map_err(|e| netlink_error("get ifb device", e))?;
    host.add_ingress_qdisc(veth.index)
        .map_err(|e| netlink_error("create ingress qdisc", e))?;
    created.ingress_qdisc = Some(veth.index);
    fault::inject("bandwidth", "filter")?;
    host.add_ingress_redirect(veth.index, ifb_link.index)
        .map_err(|e| netlink_error("add filter", e))?;
    host.replace_root_tbf(ifb_link.index, &params)
        .map_err(|e| netlink_error("create ifb qdisc", e))?;
    fault::inject("bandwidth", "done")?;
    Ok(Some(Interface {
        name: ifb.to_string(),
        mac: ifb_link.mac.map(|m| m.to_string()).unwrap_or_default(),
        ..Interface::default()
    }))
}

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

fn required_prev(args: &CmdArgs) -> Result<CniResult, CniError> {
    args.prev_result
        .clone()
        .ok_or_else(|| CniError::invalid_config("must be called as chained plugin"))
}

impl Plugin for BandwidthPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let bw = Bandwidth::parse(&args.conf)?;
        let mut result = required_prev(args)?;
        if bw.is_zero() {
            return Ok(result);
        }
        let mut host = host_handle()?;
        let veth = host_veth(args, &result, &mut host)?;
        let ifb = ifb_name(&args.conf.name, &args.container_id);
        let mut created = Created::default();
        match shape(&mut host, &veth, &bw, &ifb, &mut created) {
            Ok(iface) => {
                result.interfaces.extend(iface);
                Ok(result)
            }
            Err(e) => {
                created.undo(&mut host);
                Err(e)
            }
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Types are checked like ADD's, so every command refuses the same configs.
        conf::check_types(&args.conf)?;
        let ifb = ifb_name(&args.conf.name, &args.container_id);
        host_handle()?
            .delete_link_by_name(&ifb)
            .map_err(|e| netlink_error(&format!("delete {ifb}"), e))?;
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
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

    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .filter(|v| *v >= SpecVersion::V0_3_0)
            .collect()
    }

    fn about(&self) -> String {
        crate::about("bandwidth")
    }
}
