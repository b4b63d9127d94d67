//! ADD: installs the shaping on the host veth (traffic into the container) and on the IFB
//! (traffic out of it), step by step. Every object is created with "fail if it exists", and
//! an undo is registered only for what this call created: a repeated ADD of a live attachment
//! fails and leaves the first ADD's shaping alone.

use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_add::LinkAdd;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::tc::htb::HtbClassParams;
use cni_linux::rtnl::tc::u32::AddrField;
use cni_linux::rtnl::tc::{TbfParams, TcHandle, ROOT_TBF_HANDLE};
use cni_linux::{Handle, NetlinkError};
use cni_plugin::{CmdArgs, Undo};
use cni_types::{CniError, CniResult, Interface};

use super::conf::{ifb_name, Bandwidth, Limit, Subnets};
use super::{host_handle, host_veth, netlink_error, required_prev};
use crate::common::step;
use crate::common::sublink_record::{self, Record};

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

/// Class `1:48` (Go v1.5.x's `ShapedClassMinorID`): the limited traffic.
pub(super) const SHAPED_CLASS: u16 = 0x30;
/// Class `1:1`: the traffic that is not limited.
pub(super) const UNSHAPED_CLASS: u16 = 1;
/// The unshaped class's rate and ceiling, bytes per second (Go: `UncappedRate`).
pub(super) const UNCAPPED_RATE: u64 = 100_000_000_000;

/// The HTB classes of Go v1.5.x for `limit`: the shaped class (rate, ceiling twice the rate,
/// both buckets the TBF buffer) and the unshaped one (no buckets).
pub(super) fn htb_classes(limit: Limit) -> Result<(HtbClassParams, HtbClassParams), CniError> {
    let t = tbf(limit)?;
    let shaped = HtbClassParams {
        rate: t.rate,
        ceil: t.rate.saturating_mul(2),
        buffer: t.buffer,
        cbuffer: t.buffer,
    };
    let unshaped = HtbClassParams {
        rate: UNCAPPED_RATE,
        ceil: UNCAPPED_RATE,
        buffer: 0,
        cbuffer: 0,
    };
    Ok((shaped, unshaped))
}

/// The default class of the HTB root and the class the subnet filters send to.
pub(super) fn htb_default_and_target(subnets: &Subnets) -> (u16, u16) {
    match subnets {
        Subnets::Shaped(_) => (UNSHAPED_CLASS, SHAPED_CLASS),
        Subnets::Unshaped(_) => (SHAPED_CLASS, UNSHAPED_CLASS),
    }
}

/// Installs the root shaping qdisc `1:` on `link` (TBF, or with subnets the HTB layout whose
/// filters match the peer address `field`); fails if the link has a root qdisc of its own
/// already. On error after the root exists, the root is removed again (classes and filters
/// go with it).
fn add_root_shaping(
    host: &mut Handle,
    link: &Link,
    limit: Limit,
    subnets: Option<&Subnets>,
    field: AddrField,
) -> Result<(), CniError> {
    let exists = |e| create_error("create qdisc", &format!("a root qdisc on {}", link.name), e);
    let Some(subnets) = subnets else {
        return host.add_root_tbf(link.index, &tbf(limit)?).map_err(exists);
    };
    let (shaped, unshaped) = htb_classes(limit)?;
    let (default, target) = htb_default_and_target(subnets);
    host.add_root_htb(link.index, default).map_err(exists)?;
    let rest = (|| -> Result<(), NetlinkError> {
        host.add_htb_class(link.index, SHAPED_CLASS, &shaped)?;
        host.add_htb_class(link.index, UNSHAPED_CLASS, &unshaped)?;
        let class = TcHandle {
            major: 1,
            minor: target,
        };
        for net in subnets.nets() {
            host.add_u32_subnet_filter(link.index, ROOT_TBF_HANDLE, net, field, class)?;
        }
        Ok(())
    })();
    rest.map_err(|e| {
        let _ = host.delete_qdisc(link.index, TcHandle::ROOT);
        netlink_error(&format!("create htb layout on {}", link.name), e)
    })
}

/// Creates the IFB in the container's namespace and moves it to the host's with its
/// attachment as alias in one request, so a killed ADD leaves either an IFB in the container's
/// namespace (it goes with the namespace; DEL removes it, and GC through the attachment's
/// record) or a tagged one in the host's (DEL removes it by name, GC by tag). EEXIST in the host namespace: the attachment is
/// shaped already, and nothing is changed.
fn create_tagged_ifb(host: &mut Handle, args: &CmdArgs, ifb: &LinkAdd<'_>) -> Result<(), CniError> {
    let ns = crate::netns::open_required(&args.netns)?;
    let host_ns = cni_linux::NetNs::current()
        .map_err(|e| CniError::internal(format!("bandwidth: cannot open the host netns: {e}")))?;
    let mut inner = Handle::in_netns(&ns)
        .map_err(|e| netlink_error("cannot open netlink in the container namespace", e))?;
    // An IFB of this name in the container's namespace is a killed ADD's leftover.
    match inner.add_link(ifb) {
        Err(e) if e.is_exists() => {
            inner
                .delete_link_by_name(ifb.name())
                .map_err(|e| netlink_error("remove a leftover IFB", e))?;
            inner.add_link(ifb)
        }
        other => other,
    }
    .map_err(|e| netlink_error("adding link", e))?;
    step::end("bandwidth", "ifb-in-container")?;
    let tag = args.id();
    if let Err(e) = inner.change_link(
        &LinkChange::of_name(ifb.name())
            .netns(&host_ns)
            .alias(tag.comment()),
    ) {
        let _ = inner.delete_link_by_name(ifb.name());
        return Err(create_error(
            "adding link",
            &format!("IFB device {}", ifb.name()),
            e,
        ));
    }
    let link = host
        .link_by_name(ifb.name())
        .map_err(|e| netlink_error("get ifb device", e))?;
    host.change_link(&LinkChange::of(link.index).up())
        .map_err(|e| netlink_error("set ifb up", e))
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
    if let Some(limit) = bw.ingress {
        shape_ingress(&mut host, &veth, limit, bw.subnets.as_ref(), &mut undo)?;
    }
    step::end("bandwidth", "ingress")?;
    if let Some(limit) = bw.egress {
        let ifb = shape_egress(
            args,
            &mut host,
            &veth,
            limit,
            bw.subnets.as_ref(),
            &mut undo,
        )?;
        result.interfaces.push(ifb);
    }
    step::end("bandwidth", "done")?;
    undo.commit();
    Ok(result)
}

/// Into the container: the root qdisc of the host veth (packets to the container, so the
/// peer is their source).
fn shape_ingress(
    host: &mut Handle,
    veth: &Link,
    limit: Limit,
    subnets: Option<&Subnets>,
    undo: &mut Undo<'_>,
) -> Result<(), CniError> {
    add_root_shaping(host, veth, limit, subnets, AddrField::Source)?;
    push_qdisc_undo(
        undo,
        format!("root qdisc on {}", veth.name),
        veth.index,
        TcHandle::ROOT,
    );
    Ok(())
}

/// Out of the container: veth ingress -> redirect -> IFB -> its root qdisc (packets from
/// the container, so the peer is their destination). Returns the IFB as the result lists it.
fn shape_egress(
    args: &CmdArgs,
    host: &mut Handle,
    veth: &Link,
    limit: Limit,
    subnets: Option<&Subnets>,
    undo: &mut Undo<'_>,
) -> Result<Interface, CniError> {
    tbf(limit)?;
    let ifb_link = add_ifb(args, host, veth, subnets.is_some(), undo)?;
    host.add_ingress_qdisc(veth.index).map_err(|e| {
        create_error(
            "create ingress qdisc",
            &format!("an ingress qdisc on {}", veth.name),
            e,
        )
    })?;
    push_qdisc_undo(
        undo,
        format!("ingress qdisc on {}", veth.name),
        veth.index,
        TcHandle::INGRESS,
    );
    step::end("bandwidth", "filter")?;
    // The filter lives in the ingress qdisc just created, the root qdisc on the new IFB:
    // both go with their undo.
    host.add_ingress_redirect(veth.index, ifb_link.index)
        .map_err(|e| netlink_error("add filter", e))?;
    add_root_shaping(host, &ifb_link, limit, subnets, AddrField::Destination)?;
    Ok(Interface {
        mac: ifb_link.mac.map(|m| m.to_string()).unwrap_or_default(),
        name: ifb_link.name,
        ..Interface::default()
    })
}

/// The attachment's IFB in the host namespace, recorded before it exists and undone with
/// the ADD. `htb`: the layout is HTB (per-subnet shaping), not TBF.
fn add_ifb(
    args: &CmdArgs,
    host: &mut Handle,
    veth: &Link,
    htb: bool,
    undo: &mut Undo<'_>,
) -> Result<Link, CniError> {
    let ifb = ifb_name(&args.conf.name, &args.container_id);
    // TBF (Go today) runs with txqlen 0; HTB's class queues take their length from it,
    // so the HTB layout gets the veth's, at least 1000, as Go v1.5.x did.
    let txqlen = if htb { veth.txqlen.max(1000) } else { 0 };
    record_attachment(args, undo)?;
    let request = LinkAdd::ifb(&ifb).mtu(veth.mtu).txqlen(txqlen).up();
    create_tagged_ifb(host, args, &request)?;
    let name = ifb.clone();
    undo.push(format!("IFB {ifb}"), move || {
        let mut h = Handle::new().map_err(|e| e.to_string())?;
        h.delete_link_by_name(&name)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    step::end("bandwidth", "ifb")?;
    host.link_by_name(&ifb)
        .map_err(|e| netlink_error("get ifb device", e))
}

/// The record first: from the IFB's first instant in the container, GC can find it. A
/// record already there is a live attachment's: not this call's to undo.
fn record_attachment(args: &CmdArgs, undo: &mut Undo<'_>) -> Result<(), CniError> {
    let dir = super::record_dir(args)?;
    if sublink_record::write(&dir, super::RECORD, &Record::of(args))? {
        let tag = args.id();
        undo.push("bandwidth record".to_string(), move || {
            sublink_record::remove(&dir, super::RECORD, &tag).map_err(|e| e.msg)
        });
    }
    step::end("bandwidth", "record")
}
