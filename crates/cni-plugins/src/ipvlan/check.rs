//! ipvlan CHECK: IPAM CHECK when set, the master, then the container link (kind
//! ipvlan, same mode, same MAC) with its addresses and routes.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::{mode_name, IpvlanConf};
use crate::common::{sublink, validate};
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = IpvlanConf::parse(&args.conf)?;
    if conf.has_ipam {
        ipam::ipam_check(args)?;
    }
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    if let Some(name) = &conf.master {
        let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
        sublink::lookup_master(&mut mh, name)?;
    }
    sublink::check_container(&ns, &entry, prev, "ipvlan", |h, link| {
        let details = h
            .virt_details(link.index)
            .map_err(|e| CniError::internal(format!("failed to read {:?}: {e}", link.name)))?;
        match details.ipvlan_mode {
            Some(mode) if mode == conf.mode => Ok(()),
            other => Err(CniError::internal(format!(
                "Container IPVlan mode {} does not match expected value: {}",
                other.map(mode_name).unwrap_or("unknown"),
                mode_name(conf.mode)
            ))),
        }
    })
}
