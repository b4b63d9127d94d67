//! vrf DEL: releases the interface from the VRF and deletes the VRF when no interface is left
//! in it. Succeeds when the namespace, the interface or the VRF is already gone.

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::Handle;
use cni_plugin::{CmdArgs, ResultExt};
use cni_types::CniError;

use super::conf::VrfConf;
use super::device::find_vrf;
use crate::netns::{self, Opened};

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VrfConf::parse(&args.conf)?;
    if args.netns.as_os_str().is_empty() {
        return Ok(());
    }
    let ns = match netns::open(&args.netns)? {
        Opened::Ns(ns) => ns,
        Opened::Gone(_) => return Ok(()),
    };
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let Some((vrf, _)) = find_vrf(&mut h, &conf.vrfname)? else {
        return Ok(());
    };
    match h.link_by_name(&args.ifname) {
        Ok(l) if l.master == Some(vrf.index) => h
            .change_link(&LinkChange::of(l.index).nomaster())
            .map_err(|e| CniError::internal(format!("failed to release {}: {e}", l.name)))?,
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to find {}: {e}",
                args.ifname
            )))
        }
    }
    let left = h
        .links()
        .or_internal("failed to list links")?
        .iter()
        .any(|l| l.master == Some(vrf.index));
    if !left {
        h.delete_link(vrf.index).map_err(|e| {
            CniError::internal(format!("failed to delete VRF {}: {e}", conf.vrfname))
        })?;
    }
    Ok(())
}
