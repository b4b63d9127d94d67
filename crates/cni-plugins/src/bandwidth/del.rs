//! DEL: removes the attachment's IFB (its qdisc goes with it; the host veth's qdiscs go with
//! the veth). Needs neither the netns nor valid limits.

use cni_plugin::CmdArgs;
use cni_types::CniError;

use super::conf::ifb_name;
use super::{host_handle, netlink_error};

pub(super) fn del(args: &CmdArgs) -> Result<(), CniError> {
    let ifb = ifb_name(&args.conf.name, &args.container_id);
    host_handle()?
        .delete_link_by_name(&ifb)
        .map_err(|e| netlink_error(&format!("delete {ifb}"), e))?;
    Ok(())
}
