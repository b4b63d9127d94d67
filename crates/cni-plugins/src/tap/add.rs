//! tap ADD, as a transaction: make the tap under a temporary name on a thread in
//! the container namespace, set MTU and MAC, rename it, enslave it to `bridge`, then IPAM (or
//! just set it up). A failure deletes the tap and releases the lease.

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::tun::{self, TapSpec};
use cni_linux::Handle;
use cni_plugin::{CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult};

use super::conf::TapConf;
use crate::common::random;
use crate::common::step;
use crate::common::sublink::result_for_one_link;
use crate::netns;

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = TapConf::parse(&args.conf, &args.cni_args()?)?;
    let ns = netns::open_required(&args.netns)?;
    let mut h =
        Handle::in_netns(&ns).or_internal("cannot open netlink in the container namespace")?;
    let mut undo = Undo::new();

    let bridge = match &conf.bridge {
        Some(name) => Some(
            h.link_by_name(name)
                .map_err(|e| CniError::internal(format!("failed to get bridge {name}: {e}")))?,
        ),
        None => None,
    };
    let spec = TapSpec {
        name: random::veth_name().or_internal("cannot read random bytes")?,
        multi_queue: conf.multi_queue,
        vnet_hdr: conf.vnet_hdr(),
        owner: conf.owner,
        group: conf.group,
    };
    let made = {
        let spec = spec.clone();
        ns.run(move || tun::create_tap(&spec))
            .or_internal("cannot enter the container namespace")?
    };
    made.map_err(|e| CniError::internal(format!("failed to create tap: {e}")))?;
    let tap = h
        .link_by_name(&spec.name)
        .or_internal("failed to find the new tap")?;
    let index = tap.index;
    let nsr = &ns;
    undo.push(format!("tap {:?}", args.ifname), move || {
        let mut h = Handle::in_netns(nsr).map_err(|e| e.to_string())?;
        match h.delete_link(index) {
            Err(e) if !e.is_not_found() => Err(format!("failed to delete the tap: {e}")),
            _ => Ok(()),
        }
    });
    step::end("tap", "link")?;
    if let Some(mtu) = conf.mtu {
        h.change_link(&LinkChange::of(index).mtu(mtu))
            .map_err(|e| CniError::internal(format!("failed to set the tap MTU to {mtu}: {e}")))?;
    }
    if let Some(mac) = conf.mac {
        h.change_link(&LinkChange::of(index).mac(mac))
            .map_err(|e| CniError::internal(format!("invalid args {mac} for MAC addr: {e}")))?;
    }
    h.change_link(&LinkChange::of(index).name(&args.ifname))
        .map_err(|e| {
            CniError::internal(format!("failed to rename tap to {:?}: {e}", args.ifname))
        })?;
    if let Some(br) = &bridge {
        h.change_link(&LinkChange::of(index).master(br.index))
            .map_err(|e| {
                CniError::internal(format!(
                    "failed to set tap {} as a port of bridge {}: {e}",
                    args.ifname, br.name
                ))
            })?;
    }
    h.change_link(&LinkChange::of(index).up())
        .or_internal("failed to set tap interface up")?;
    let link = h
        .link_by_index(index)
        .or_internal(&format!("failed to refetch tap {:?}", args.ifname))?;
    step::end("tap", "configured")?;

    let mut result = result_for_one_link(args, "tap", conf.layer3, &link, &ns, true, &mut undo)?;
    step::end("tap", "done")?;
    result.dns = conf.dns;
    undo.commit();
    Ok(result)
}
