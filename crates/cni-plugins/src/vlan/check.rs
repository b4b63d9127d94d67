//! vlan CHECK: IPAM CHECK, the master and the MTU bound, then the container link
//! (kind vlan, same VLAN id, the configured MTU or else the master's, same MAC) with its
//! addresses and routes.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::VlanConf;
use crate::common::{sublink, validate};
use crate::netns;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VlanConf::parse(&args.conf)?;
    ipam::ipam_check(args)?;
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
    let master = sublink::lookup_master(&mut mh, &conf.master)?;
    sublink::check_mtu_within_master(conf.mtu, &master)?;
    let want_mtu = conf.mtu.unwrap_or(master.mtu);

    sublink::check_container(&ns, &entry, prev, "vlan", |h, link| {
        let details = h
            .virt_details(link.index)
            .map_err(|e| CniError::internal(format!("failed to read {:?}: {e}", link.name)))?;
        if details.vlan_id != Some(conf.vlan_id) {
            return Err(CniError::internal(format!(
                "Error: Container interface {} vlan id {} does not match expected value: {}",
                link.name,
                details.vlan_id.map(|v| v.to_string()).unwrap_or_default(),
                conf.vlan_id
            )));
        }
        if link.mtu != want_mtu {
            return Err(CniError::internal(format!(
                "Error: Container interface {} MTU {} does not match expected value: {want_mtu}",
                link.name, link.mtu
            )));
        }
        Ok(())
    })
}
