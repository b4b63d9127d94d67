//! ptp CHECK: IPAM CHECK, then the container veth from `prevResult`, its addresses and the routes.

use cni_linux::Handle;
use cni_plugin::{ipam, CmdArgs, ResultExt};
use cni_types::CniError;

use crate::common::validate;
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    // The config is decoded first, as on ADD and DEL, so a wrong-typed key is code 7 here too.
    let conf = super::PtpConf::parse(&args.conf)?;
    let ns = netns::open_required(&args.netns)?;
    ipam::ipam_check(args)?;
    let prev = args
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::internal("ptp: Required prevResult missing"))?;
    let container_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns)
        .cloned()
        .unwrap_or_default();
    if container_entry.sandbox != args.netns {
        return Err(CniError::internal(format!(
            "Sandbox in prevResult {} doesn't match configured netns: {}",
            container_entry.sandbox, args.netns
        )));
    }
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    validate::veth_interface(&mut h, &container_entry, true)?;
    validate::expected_ips(&mut h, &args.ifname, &prev.ips)?;
    validate::expected_routes(&mut h, &prev.routes)?;
    crate::repair::check_rules("ptp", args, conf.ip_masq, None)
}
