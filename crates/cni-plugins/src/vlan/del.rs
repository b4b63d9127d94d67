//! vlan DEL: IPAM DEL, then the link in the container. Idempotent and best
//! effort; unlike Go it does not look the master up, so it still works after the master is
//! gone. Like Go's (and like ADD and CHECK), it refuses a config without an IPAM type.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::VlanConf;
use crate::common::errors::combine;
use crate::common::sublink;

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VlanConf::parse(&args.conf)?;
    conf.require_ipam()?;
    let mut errors = vec![];
    errors.extend(ipam::ipam_del(args).err());
    errors.extend(sublink::delete_link_and_record(args).err());
    combine(errors)
}
