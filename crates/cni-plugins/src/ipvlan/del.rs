//! ipvlan DEL: IPAM DEL when `ipam.type` is set, then the link in the container.
//! Idempotent and best effort; unlike Go it never resolves the default-route master, so it
//! cannot fail on that look-up.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::IpvlanConf;
use crate::common::errors::combine;
use crate::common::sublink;

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = IpvlanConf::parse(&args.conf)?;
    let mut errors = Vec::new();
    if conf.has_ipam {
        errors.extend(ipam::ipam_del(args).err());
    }
    errors.extend(sublink::delete_link_and_record(args).err());
    combine(errors)
}
