//! CHECK: the shaping ADD installed is still there with the configured settings.

use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::tc::{TcHandle, ROOT_TBF_HANDLE};
use cni_linux::Handle;
use cni_plugin::CmdArgs;
use cni_types::CniError;

use cni_linux::rtnl::tc::u32::{subnet_matches, subnet_priority_protocol, AddrField};

use super::add::{htb_classes, htb_default_and_target, tbf, SHAPED_CLASS, UNSHAPED_CLASS};
use super::conf::{ifb_name, Bandwidth, Limit, Subnets};
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

/// CHECK of one link shaped by subnet: the HTB root with its default class, the two classes
/// of Go v1.5.x, and one u32 filter per subnet sending it to the right class. `fields` lists
/// the address fields accepted for the match (on the host veth rcni matches the source, Go
/// v1.5.x the destination).
fn verify_htb(
    host: &mut Handle,
    link: &Link,
    limit: Limit,
    subnets: &Subnets,
    fields: &[AddrField],
) -> Result<(), CniError> {
    let fail = |what: String| {
        Err(CniError::internal(format!(
            "bandwidth: {}: {what}",
            link.name
        )))
    };
    let (default, target) = htb_default_and_target(subnets);
    let qdiscs = host
        .qdiscs(link.index)
        .map_err(|e| netlink_error("list qdiscs", e))?;
    let Some(root) = qdiscs
        .iter()
        .find(|q| q.parent == TcHandle::ROOT && q.handle == ROOT_TBF_HANDLE && q.kind == "htb")
    else {
        return fail("no htb root qdisc 1:".into());
    };
    if root.htb_default != Some(u32::from(default)) {
        return fail(format!(
            "Default class does not match ({:?} != {default})",
            root.htb_default
        ));
    }
    let (shaped, unshaped) = htb_classes(limit)?;
    let classes = host
        .htb_classes(link.index)
        .map_err(|e| netlink_error("list classes", e))?;
    if classes.len() != 2 {
        return fail(format!(
            "Number of htb classes does not match ({} != 2)",
            classes.len()
        ));
    }
    for (minor, want) in [(SHAPED_CLASS, shaped), (UNSHAPED_CLASS, unshaped)] {
        let handle = TcHandle { major: 1, minor };
        match classes.iter().find(|c| c.handle == handle) {
            // The kernel reports a class right under the qdisc with parent "root".
            Some(c) if c.parent != TcHandle::ROOT && c.parent != ROOT_TBF_HANDLE => {
                return fail(format!("class 1:{minor:x} is not under 1:"))
            }
            // The kernel keeps no bucket below its minimum: only rates are compared for 1:1.
            Some(c) if minor == UNSHAPED_CLASS => {
                if (c.params.rate, c.params.ceil) != (want.rate, want.ceil) {
                    return fail(format!(
                        "Rate does not match for the uncapped class ({} != {})",
                        c.params.rate, want.rate
                    ));
                }
            }
            Some(c) if c.params != want => {
                return fail(format!(
                    "shaped class 1:{minor:x} does not match ({:?} != {want:?})",
                    c.params
                ))
            }
            Some(_) => {}
            None => return fail(format!("no htb class 1:{minor:x}")),
        }
    }
    let filters = host
        .u32_filters(link.index, ROOT_TBF_HANDLE)
        .map_err(|e| netlink_error("list filters", e))?;
    let class = TcHandle {
        major: 1,
        minor: target,
    };
    if filters.len() != subnets.nets().len() {
        return fail(format!(
            "Number of subnet filters does not match ({} != {})",
            filters.len(),
            subnets.nets().len()
        ));
    }
    for net in subnets.nets() {
        let (priority, protocol) = subnet_priority_protocol(net);
        let found = filters.iter().any(|f| {
            f.priority == priority
                && f.protocol == protocol
                && f.class == Some(class)
                && fields
                    .iter()
                    .any(|&fl| f.matches == subnet_matches(net, fl))
        });
        if !found {
            return fail(format!("no filter sending {net} to class 1:{target:x}"));
        }
    }
    Ok(())
}

pub(super) fn check(args: &CmdArgs) -> Result<(), CniError> {
    let bw = Bandwidth::parse(&args.conf)?;
    let prev = required_prev(args)?;
    let mut host = host_handle()?;
    let veth = host_veth(args, &prev, &mut host)?;
    if let Some(limit) = bw.ingress {
        match &bw.subnets {
            None => verify_tbf(&mut host, &veth, limit)?,
            Some(subnets) => verify_htb(
                &mut host,
                &veth,
                limit,
                subnets,
                &[AddrField::Source, AddrField::Destination],
            )?,
        }
    }
    if let Some(limit) = bw.egress {
        let ifb = ifb_name(&args.conf.name, &args.container_id);
        let link = host
            .link_by_name(&ifb)
            .map_err(|e| netlink_error("get ifb device", e))?;
        match &bw.subnets {
            None => verify_tbf(&mut host, &link, limit)?,
            Some(subnets) => {
                verify_htb(&mut host, &link, limit, subnets, &[AddrField::Destination])?
            }
        }
    }
    Ok(())
}
