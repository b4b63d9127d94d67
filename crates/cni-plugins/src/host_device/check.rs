//! host-device CHECK: IPAM CHECK when addressed, then the device named in `prevResult`, its
//! MAC, addresses and routes in the container.

use cni_linux::Handle;
use cni_plugin::{ipam, CmdArgs, ResultExt};
use cni_types::CniError;

use super::conf::HostDeviceConf;
use crate::common::validate;
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = HostDeviceConf::parse(&args.conf)?;
    if conf.layer3 {
        ipam::ipam_check(args)?;
    }
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let link = h.link_by_name(&args.ifname).map_err(|_| {
        CniError::internal(format!(
            "Container Interface name in prevResult: {} not found",
            args.ifname
        ))
    })?;
    validate::check_mac(&entry, &link)?;
    validate::expected_ips(&mut h, &args.ifname, &prev.ips)?;
    validate::expected_routes(&mut h, &prev.routes)
}
