//! ptp CHECK: IPAM CHECK, then the container veth from `prevResult`, its addresses, the routes
//! and the attachment's `ipMasq` rules; and rcni's repair of those rules.

use cni_linux::Handle;
use cni_plugin::{ipam, CmdArgs, RepairAnswer, RepairMode, ResultExt};
use cni_types::CniError;

use super::PtpConf;
use crate::common::attachment_rules::{self, Rules};
use crate::common::validate;
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    // The config is decoded first, as on ADD and DEL, so a wrong-typed key is code 7 here too.
    let conf = PtpConf::parse(&args.conf)?;
    let ns = netns::open_required(&args.netns)?;
    ipam::ipam_check(args)?;
    let prev = args
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::internal("ptp: Required prevResult missing"))?;
    let container_entry = validate::container_entry(args, prev)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    validate::container_veth(&mut h, &container_entry)?;
    validate::expected_ips(&mut h, &args.ifname, &prev.ips)?;
    validate::expected_routes(&mut h, &prev.routes)?;
    attachment_rules::check("ptp", args, &rules(&conf))
}

/// The rules ADD made: `ipMasq`.
fn rules(conf: &PtpConf) -> Rules<'static> {
    Rules {
        ip_masq: conf.ip_masq,
        spoofcheck_bridge: None,
    }
}

/// rcni's repair of the rules CHECK looks at.
pub fn repair(args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
    let conf = PtpConf::parse(&args.conf)?;
    attachment_rules::repair(args, &rules(&conf), mode)
}
