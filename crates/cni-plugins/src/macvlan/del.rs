//! macvlan DEL: IPAM DEL when `ipam.type` is set, then the link in the container.
//! Idempotent and best effort: an empty or vanished netns or a missing link is success, and
//! both steps run even when one fails (Go stops after a failed IPAM DEL). The master is not
//! looked up, so DEL works after it is gone.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::MacvlanConf;
use crate::common::errors::combine;
use crate::common::sublink;

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = MacvlanConf::parse(&args.conf, &args.cni_args()?)?;
    let mut errors = Vec::new();
    if conf.layer3 {
        errors.extend(ipam::ipam_del(args).err());
    }
    errors.extend(sublink::delete_link_and_record(args).err());
    combine(errors)
}
