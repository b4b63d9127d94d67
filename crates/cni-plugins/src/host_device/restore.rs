//! Moving a device between the container and the host under a temporary name: what DEL does
//! and what a failed ADD undoes.

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, NetNs};
use cni_plugin::ResultExt;
use cni_types::CniError;

use super::state::Saved;
use crate::common::errors::combine;
use crate::common::random;

/// A temporary host name: `hd` and 8 random hex digits.
pub fn temp_name() -> Result<String, CniError> {
    let b = random::bytes::<4>().or_internal("cannot read random bytes")?;
    Ok(format!(
        "hd{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

/// Brings the device back to `host_ns`: the first of `names` found in the container is set
/// down, renamed to a temporary name and moved; on the host it gets `saved`'s name, MTU and
/// alias. Finds it on the host under one of `names` too (a move that never happened).
pub fn return_to_host(
    ns: &NetNs,
    host_ns: &NetNs,
    saved: &Saved,
    names: &[&str],
) -> Result<bool, CniError> {
    let mut container =
        Handle::in_netns(ns).or_internal("cannot open netlink in the container namespace")?;
    let mut host = Handle::in_netns(host_ns).or_internal("cannot open netlink")?;
    let found = names.iter().find_map(|n| container.link_by_name(n).ok());
    let host_name = match found {
        Some(link) => {
            let temp = temp_name()?;
            container
                .change_link(&LinkChange::of(link.index).down())
                .or_internal(&format!("failed to set {:?} down", link.name))?;
            container
                .change_link(&LinkChange::of(link.index).name(&temp))
                .or_internal(&format!("failed to rename {:?}", link.name))?;
            if let Err(e) = container.change_link(&LinkChange::of(link.index).netns(host_ns)) {
                let _ = container.change_link(&LinkChange::of(link.index).name(&link.name));
                return Err(CniError::internal(format!(
                    "failed to move {:?} to the host namespace: {e}",
                    link.name
                )));
            }
            temp
        }
        None => match names.iter().find(|n| host.link_by_name(n).is_ok()) {
            Some(n) => n.to_string(),
            None => return Ok(false),
        },
    };
    let link = host
        .link_by_name(&host_name)
        .or_internal(&format!("failed to find {host_name:?} on the host"))?;
    let mut errors = Vec::new();
    if let Err(e) = host.change_link(&LinkChange::of(link.index).name(&saved.name)) {
        errors.push(CniError::internal(format!(
            "failed to restore {host_name:?} to its original name {:?}: {e}",
            saved.name
        )));
    }
    if saved.mtu != 0 && link.mtu != saved.mtu {
        if let Err(e) = host.change_link(&LinkChange::of(link.index).mtu(saved.mtu)) {
            errors.push(CniError::internal(format!(
                "failed to restore the MTU {} of {:?}: {e}",
                saved.mtu, saved.name
            )));
        }
    }
    if let Err(e) = host.change_link(&LinkChange::of(link.index).alias(&saved.alias)) {
        errors.push(CniError::internal(format!(
            "failed to restore the alias of {:?}: {e}",
            saved.name
        )));
    }
    combine(errors).map(|_| true)
}
