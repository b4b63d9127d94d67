//! Finding VRF devices in the container namespace.

use cni_linux::rtnl::link::Link;
use cni_linux::{Handle, NetNs};
use cni_plugin::ResultExt;
use cni_types::CniError;

fn is_vrf(l: &Link) -> bool {
    l.kind.as_deref() == Some("vrf")
}

/// The VRF called `name` and its table, if there is one (a non-VRF link of that name is an
/// error).
pub fn find_vrf(h: &mut Handle, name: &str) -> Result<Option<(Link, u32)>, CniError> {
    match h.link_by_name(name) {
        Ok(l) if is_vrf(&l) => {
            let table = h
                .virt_details(l.index)
                .or_internal("failed to read the VRF")?
                .vrf_table
                .unwrap_or(0);
            Ok(Some((l, table)))
        }
        Ok(_) => Err(CniError::internal(format!("{name} is not a VRF device"))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(CniError::internal(format!("failed to look up {name}: {e}"))),
    }
}

/// The tables of every VRF in the namespace.
pub fn vrf_tables(h: &mut Handle) -> Result<Vec<u32>, CniError> {
    let mut used = Vec::new();
    for l in h.links().or_internal("failed to list links")? {
        if is_vrf(&l) {
            used.extend(
                h.virt_details(l.index)
                    .or_internal("failed to read a VRF")?
                    .vrf_table,
            );
        }
    }
    Ok(used)
}

/// A netlink handle in `ns`, for undo actions (which report errors as text).
pub fn handle_in(ns: &NetNs) -> Result<Handle, String> {
    Handle::in_netns(ns).map_err(|e| e.to_string())
}
