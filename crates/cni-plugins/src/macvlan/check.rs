//! macvlan CHECK: IPAM CHECK, the master and the MTU bound, then the container link
//! (kind macvlan, same mode, same MAC) with its addresses and routes.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::{mode_name, MacvlanConf};
use crate::common::{sublink, validate};
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = MacvlanConf::parse(&args.conf, &args.cni_args()?)?;
    if conf.layer3 {
        ipam::ipam_check(args)?;
    }
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
    let master = sublink::resolve_master(&mut mh, conf.master.as_deref())?;
    sublink::check_mtu_within_master(conf.mtu, &master)?;

    sublink::check_container(&ns, &entry, prev, "macvlan", |h, link| {
        let details = h
            .virt_details(link.index)
            .map_err(|e| CniError::internal(format!("failed to read {:?}: {e}", link.name)))?;
        match details.macvlan_mode {
            Some(mode) if mode == conf.mode => Ok(()),
            other => Err(CniError::internal(format!(
                "Container macvlan mode {} does not match expected value: {}",
                other.map(mode_name).unwrap_or("unknown"),
                mode_name(conf.mode)
            ))),
        }
    })
}
