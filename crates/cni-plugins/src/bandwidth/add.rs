//! ADD: installs the shaping on the host veth (traffic into the container) and on the IFB
//! (traffic out of it), step by step. Every object is created with "fail if it exists", and
//! an undo is registered only for what this call created: a repeated ADD of a live attachment
//! fails and leaves the first ADD's shaping alone.

use cni_linux::rtnl::link::{Link, LinkSpec};
use cni_linux::rtnl::tc::{TbfParams, TcHandle};
use cni_linux::{Handle, NetlinkError};
use cni_plugin::CmdArgs;
use cni_types::{CniError, CniResult, Interface};

use super::conf::{ifb_name, Bandwidth, Limit};
use super::{host_handle, host_veth, netlink_error, required_prev};
use crate::common::fault;
use crate::common::undo::Undo;

pub(super) fn tbf(limit: Limit) -> Result<TbfParams, CniError> {
    TbfParams::from_bits(limit.rate, limit.burst)
        .map_err(|e| CniError::invalid_config(format!("bandwidth: {e}")))
}

/// The error of a create step, with a clear message when the object was already there.
fn create_error(what: &str, existing: &str, e: NetlinkError) -> CniError {
    if e.is_exists() {
        CniError::internal(format!(
            "bandwidth: {what}: {existing} already exists: the attachment is shaped already \
             (DEL it before adding it again)"
        ))
    } else {
        netlink_error(what, e)
    }
}

/// Registers the removal of the qdisc at `parent` of link `index`, which this call created.
fn push_qdisc_undo(undo: &mut Undo<'_>, what: String, index: u32, parent: TcHandle) {
    undo.push(what, move || {
        let mut h = Handle::new().map_err(|e| e.to_string())?;
        h.delete_qdisc(index, parent)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
}

/// Installs the root shaping qdisc `1:` on `link`; fails if the link has a root qdisc of its
/// own already.
fn add_root_shaping(host: &mut Handle, link: &Link, limit: Limit) -> Result<(), CniError> {
    host.add_root_tbf(link.index, &tbf(limit)?)
        .map_err(|e| create_error("create qdisc", &format!("a root qdisc on {}", link.name), e))
}

pub(super) fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let bw = Bandwidth::parse(&args.conf)?;
    let mut result = required_prev(args)?;
    if bw.is_zero() {
        return Ok(result);
    }
    let mut host = host_handle()?;
    let veth = host_veth(args, &result, &mut host)?;
    let mut undo = Undo::new();

    // Into the container: the root qdisc of the host veth.
    if let Some(limit) = bw.ingress {
        add_root_shaping(&mut host, &veth, limit)?;
        push_qdisc_undo(
            &mut undo,
            format!("root qdisc on {}", veth.name),
            veth.index,
            TcHandle::ROOT,
        );
    }
    fault::inject("bandwidth", "ingress")?;

    // Out of the container: veth ingress -> redirect -> IFB -> its root qdisc.
    if let Some(limit) = bw.egress {
        tbf(limit)?;
        let ifb = ifb_name(&args.conf.name, &args.container_id);
        let spec = LinkSpec {
            mtu: Some(veth.mtu),
            ..LinkSpec::named(&ifb)
        };
        host.create_ifb(&spec, 0)
            .map_err(|e| create_error("adding link", &format!("IFB device {ifb}"), e))?;
        let name = ifb.clone();
        undo.push(format!("IFB {ifb}"), move || {
            let mut h = Handle::new().map_err(|e| e.to_string())?;
            h.delete_link_by_name(&name)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let ifb_link = host
            .link_by_name(&ifb)
            .map_err(|e| netlink_error("get ifb device", e))?;
        host.add_ingress_qdisc(veth.index).map_err(|e| {
            create_error(
                "create ingress qdisc",
                &format!("an ingress qdisc on {}", veth.name),
                e,
            )
        })?;
        push_qdisc_undo(
            &mut undo,
            format!("ingress qdisc on {}", veth.name),
            veth.index,
            TcHandle::INGRESS,
        );
        fault::inject("bandwidth", "filter")?;
        // The filter lives in the ingress qdisc just created, the root qdisc on the new IFB:
        // both go with their undo.
        host.add_ingress_redirect(veth.index, ifb_link.index)
            .map_err(|e| netlink_error("add filter", e))?;
        add_root_shaping(&mut host, &ifb_link, limit)?;
        result.interfaces.push(Interface {
            name: ifb,
            mac: ifb_link.mac.map(|m| m.to_string()).unwrap_or_default(),
            ..Interface::default()
        });
    }
    fault::inject("bandwidth", "done")?;
    undo.commit();
    Ok(result)
}
