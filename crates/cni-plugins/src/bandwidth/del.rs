//! DEL and GC. DEL removes the attachment's IFB by its name (its qdisc goes with it; the host
//! veth's qdiscs go with the veth), and a killed ADD's IFB still in the container's namespace;
//! it needs neither the netns nor valid limits; then the attachment's record. GC removes the
//! IFBs of the network whose alias names an attachment missing from the valid list, and, in
//! the recorded namespace of each such attachment, the IFB a killed ADD left there.

use cni_attribution::AttachmentId;
use cni_linux::Handle;
use cni_plugin::CmdArgs;
use cni_types::CniError;

use super::conf::ifb_name;
use super::{host_handle, netlink_error};
use crate::common::sublink::gc_recorded_links;
use crate::common::sublink_record;
use crate::netns::{self, Opened};

pub(super) fn del(args: &CmdArgs) -> Result<(), CniError> {
    let ifb = ifb_name(&args.conf.name, &args.container_id);
    host_handle()?
        .delete_link_by_name(&ifb)
        .map_err(|e| netlink_error(&format!("delete {ifb}"), e))?;
    // A vanished or unusable namespace took any IFB inside it along.
    if !args.netns.as_os_str().is_empty() {
        if let Ok(Opened::Ns(ns)) = netns::open(&args.netns) {
            if let Ok(mut inner) = Handle::in_netns(&ns) {
                inner
                    .delete_link_by_name(&ifb)
                    .map_err(|e| netlink_error(&format!("delete {ifb} in the container"), e))?;
            }
        }
    }
    let owner = args.id();
    sublink_record::remove(&super::record_dir(args)?, super::RECORD, &owner)
}

pub(super) fn gc(args: &CmdArgs) -> Result<(), CniError> {
    // The runner refuses a GC without a valid list before it gets here.
    let valid: &[AttachmentId] = args.conf.valid_attachments.as_deref().unwrap_or_default();
    let network = &args.conf.name;
    let net_prefix = AttachmentId::network_prefix(network);
    let keep: Vec<String> = valid.iter().map(|a| a.prefix()).collect();
    let mut host = host_handle()?;
    let links = host
        .links_of_kind("ifb")
        .map_err(|e| netlink_error("list ifb links", e))?;
    let mut errors = Vec::new();
    for link in links {
        let Some(alias) = link.alias.as_deref() else {
            continue;
        };
        let stale =
            alias.starts_with(&net_prefix) && !keep.iter().any(|k| alias.starts_with(k.as_str()));
        if stale {
            if let Err(e) = host.delete_link_by_name(&link.name) {
                errors.push(netlink_error(&format!("delete {}", link.name), e));
            }
        }
    }
    // IFBs killed ADDs left in containers (not moved yet: no alias, the attachment's name).
    let dir = super::record_dir(args)?;
    let recorded = gc_recorded_links(args, &dir, super::RECORD, |record, link| {
        link.kind.as_deref() == Some("ifb")
            && link.name == ifb_name(&record.id.network, &record.id.container_id)
    });
    errors.extend(recorded.err());
    crate::common::errors::combine(errors)
}
