//! tap DEL and CHECK. DEL: IPAM DEL, then the tap in the container; a missing
//! netns or link is success, and both steps run even when one fails. CHECK: IPAM CHECK, the
//! link is a tap with the result's MAC (and on `bridge` when configured), addresses, routes.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::TapConf;
use crate::common::errors::combine;
use crate::common::{sublink, validate};
use crate::netns;

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = TapConf::parse(&args.conf, &args.cni_args()?)?;
    let mut errors = Vec::new();
    if conf.layer3 {
        errors.extend(ipam::ipam_del(args).err());
    }
    errors.extend(sublink::delete_container_link(args).err());
    combine(errors)
}

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = TapConf::parse(&args.conf, &args.cni_args()?)?;
    if conf.layer3 {
        ipam::ipam_check(args)?;
    }
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    sublink::check_container(&ns, &entry, prev, "tun", |h, link| {
        let Some(name) = &conf.bridge else {
            return Ok(());
        };
        let br = h
            .link_by_name(name)
            .map_err(|e| CniError::internal(format!("failed to get bridge {name}: {e}")))?;
        if link.master == Some(br.index) {
            Ok(())
        } else {
            Err(CniError::internal(format!(
                "tap {} is not a port of bridge {name}",
                link.name
            )))
        }
    })
}
