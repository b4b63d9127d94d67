//! host-device ADD, as a transaction: record what DEL must restore, rename the
//! device to a temporary host name with its host name as alias, move it into the container,
//! rename it to `CNI_IFNAME` there and set it up, then IPAM. A failure after the move brings
//! the device back under its name, MTU and alias and releases the lease.

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, NetNs};
use cni_plugin::{CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult};

use super::conf::{find_device, HostDeviceConf};
use super::restore::{return_to_host, temp_name};
use super::state::Saved;
use crate::common::step;
use crate::common::sublink::result_for_one_link;
use crate::netns;

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = HostDeviceConf::parse(&args.conf)?;
    // Before the device moves: a bad IPAM type must change nothing.
    cni_plugin::ipam::locate_if_configured(args)?;
    let ns = netns::open_required(&args.netns)?;
    let host_ns = NetNs::current().or_internal("cannot open the host namespace")?;
    let mut host = Handle::new().or_internal("cannot open netlink")?;
    let dev = find_device(&mut host, &conf.selector)?;
    let mut undo = Undo::new();

    let saved = Saved {
        name: dev.name.clone(),
        mtu: dev.mtu,
        alias: dev.alias.clone().unwrap_or_default(),
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
    };
    saved.write(&conf.data_dir)?;
    let dir = conf.data_dir.clone();
    let (cid, ifname) = (args.container_id.clone(), args.ifname.clone());
    undo.push("the host-device state file", move || {
        Saved::remove(&dir, &cid, &ifname).map_err(|e| e.msg)
    });
    step::end("host-device", "state")?;

    let temp = temp_name()?;
    host.change_link(&LinkChange::of(dev.index).down())
        .or_internal(&format!("failed to set {:?} down", dev.name))?;
    host.change_link(&LinkChange::of(dev.index).name(&temp).alias(&saved.name))
        .map_err(|e| CniError::internal(format!("failed to rename {:?}: {e}", dev.name)))?;
    {
        let (ns, host_ns, saved, temp) = (&ns, &host_ns, saved.clone(), temp.clone());
        undo.push(
            format!("moving {:?} into the container", saved.name),
            move || {
                return_to_host(ns, host_ns, &saved, &[&saved.ifname, &temp])
                    .map(|_| ())
                    .map_err(|e| e.msg)
            },
        );
    }
    host.change_link(&LinkChange::of(dev.index).netns(&ns))
        .map_err(|e| {
            CniError::internal(format!(
                "failed to move {:?} to the container namespace: {e}",
                dev.name
            ))
        })?;
    let mut container =
        Handle::in_netns(&ns).or_internal("cannot open netlink in the container namespace")?;
    let moved = container
        .link_by_name(&temp)
        .or_internal(&format!("failed to find {temp:?} in the container"))?;
    container
        .change_link(&LinkChange::of(moved.index).name(&args.ifname))
        .map_err(|e| {
            CniError::internal(format!(
                "failed to rename {temp:?} to {:?}: {e}",
                args.ifname
            ))
        })?;
    container
        .change_link(&LinkChange::of(moved.index).up())
        .or_internal(&format!("failed to set {:?} up", args.ifname))?;
    let link = container
        .link_by_index(moved.index)
        .or_internal(&format!("failed to find {:?}", args.ifname))?;
    step::end("host-device", "moved")?;

    let result = result_for_one_link(
        args,
        "host-device",
        conf.layer3,
        &link,
        &ns,
        false,
        &mut undo,
    )?;
    step::end("host-device", "done")?;
    undo.commit();
    Ok(result)
}
