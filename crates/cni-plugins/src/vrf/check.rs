//! vrf CHECK: the VRF exists and the interface is in it.

use cni_linux::Handle;
use cni_plugin::{CmdArgs, ResultExt};
use cni_types::CniError;

use super::conf::VrfConf;
use super::device::find_vrf;
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VrfConf::parse(&args.conf)?;
    if args.prev_result.is_none() {
        return Err(CniError::internal("missing prevResult from earlier plugin"));
    }
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let (vrf, _) = find_vrf(&mut h, &conf.vrfname)?
        .ok_or_else(|| CniError::internal(format!("VRF {} not found", conf.vrfname)))?;
    let link = h
        .link_by_name(&args.ifname)
        .map_err(|e| CniError::internal(format!("failed to find {}: {e}", args.ifname)))?;
    if link.master != Some(vrf.index) {
        return Err(CniError::internal(format!(
            "interface {} is not in VRF {}",
            args.ifname, conf.vrfname
        )));
    }
    Ok(())
}
