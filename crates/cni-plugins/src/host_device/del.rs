//! host-device DEL and CHECK.
//!
//! DEL: IPAM DEL first and always (also when the namespace is gone: the lease must not leak),
//! then the device: down, renamed to a temporary name in the container, moved to the host,
//! renamed to its host name (the state file's, else the alias, as Go) and given back its MTU
//! and former alias; then the state file goes. A missing namespace or device is success.

use cni_linux::{Handle, NetNs};
use cni_plugin::{ipam, CmdArgs, ResultExt};
use cni_types::CniError;

use super::add::temp_name;
use super::conf::HostDeviceConf;
use super::state::Saved;
use crate::common::errors::combine;
use crate::common::validate;
use crate::netns::{self, Opened};

/// Brings the device back to `host_ns`: the first of `names` found in the container is set
/// down, renamed to a temporary name and moved; on the host it gets `saved`'s name, MTU and
/// alias. Finds it on the host under one of `names` too (a move that never happened).
pub fn return_to_host(
    ns: &NetNs,
    host_ns: &NetNs,
    saved: &Saved,
    names: &[&str],
) -> Result<bool, CniError> {
    let mut container =
        Handle::in_netns(ns).or_internal("cannot open netlink in the container namespace")?;
    let mut host = Handle::in_netns(host_ns).or_internal("cannot open netlink")?;
    let found = names.iter().find_map(|n| container.link_by_name(n).ok());
    let host_name = match found {
        Some(link) => {
            let temp = temp_name()?;
            container
                .set_link_down(link.index)
                .or_internal(&format!("failed to set {:?} down", link.name))?;
            container
                .rename_link(link.index, &temp)
                .or_internal(&format!("failed to rename {:?}", link.name))?;
            if let Err(e) = container.move_link_to_netns(link.index, host_ns) {
                let _ = container.rename_link(link.index, &link.name);
                return Err(CniError::internal(format!(
                    "failed to move {:?} to the host namespace: {e}",
                    link.name
                )));
            }
            temp
        }
        None => match names.iter().find(|n| host.link_by_name(n).is_ok()) {
            Some(n) => n.to_string(),
            None => return Ok(false),
        },
    };
    let link = host
        .link_by_name(&host_name)
        .or_internal(&format!("failed to find {host_name:?} on the host"))?;
    let mut errors = Vec::new();
    if let Err(e) = host.rename_link(link.index, &saved.name) {
        errors.push(CniError::internal(format!(
            "failed to restore {host_name:?} to its original name {:?}: {e}",
            saved.name
        )));
    }
    if saved.mtu != 0 && link.mtu != saved.mtu {
        if let Err(e) = host.set_link_mtu(link.index, saved.mtu) {
            errors.push(CniError::internal(format!(
                "failed to restore the MTU {} of {:?}: {e}",
                saved.mtu, saved.name
            )));
        }
    }
    if let Err(e) = host.set_link_alias(link.index, &saved.alias) {
        errors.push(CniError::internal(format!(
            "failed to restore the alias of {:?}: {e}",
            saved.name
        )));
    }
    combine(errors).map(|_| true)
}

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = HostDeviceConf::parse(&args.conf)?;
    let mut errors = Vec::new();
    if conf.layer3 {
        errors.extend(ipam::ipam_del(args).err());
    }
    errors.extend(device_back(args, &conf).err());
    combine(errors)
}

fn device_back(args: &CmdArgs, conf: &HostDeviceConf) -> Result<(), CniError> {
    let saved = Saved::read(&conf.data_dir, &args.container_id, &args.ifname);
    let gone = |why: &str| {
        log::info!("DEL: {why}; nothing to move back");
        Saved::remove(&conf.data_dir, &args.container_id, &args.ifname)
    };
    if args.netns.as_os_str().is_empty() {
        return gone("no CNI_NETNS");
    }
    let ns = match netns::open(&args.netns)? {
        Opened::Ns(ns) => ns,
        Opened::Gone(e) => return gone(&e.to_string()),
    };
    let mut container =
        Handle::in_netns(&ns).or_internal("cannot open netlink in the container namespace")?;
    let link = match container.link_by_name(&args.ifname) {
        Ok(l) => l,
        Err(e) if e.is_not_found() => {
            return Saved::remove(&conf.data_dir, &args.container_id, &args.ifname)
        }
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to find {:?}: {e}",
                args.ifname
            )))
        }
    };
    let saved = match saved {
        Some(s) => s,
        // Go's record: the alias holds the host name (an ADD by the Go plugin, or a lost file).
        None => Saved {
            name: link
                .alias
                .clone()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| {
                    CniError::internal(format!(
                        "{:?} has neither a state file nor an alias naming its host device",
                        args.ifname
                    ))
                })?,
            mtu: 0,
            alias: String::new(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
        },
    };
    let host_ns = NetNs::current().or_internal("cannot open the host namespace")?;
    return_to_host(&ns, &host_ns, &saved, &[&args.ifname])?;
    Saved::remove(&conf.data_dir, &args.container_id, &args.ifname)
}

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = HostDeviceConf::parse(&args.conf)?;
    if conf.layer3 {
        ipam::ipam_check(args)?;
    }
    let (prev, entry) = validate::prev_container_entry(args)?;
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let link = h.link_by_name(&args.ifname).map_err(|_| {
        CniError::internal(format!(
            "Container Interface name in prevResult: {} not found",
            args.ifname
        ))
    })?;
    validate::check_mac(&entry, &link)?;
    validate::expected_ips(&mut h, &args.ifname, &prev.ips)?;
    validate::expected_routes(&mut h, &prev.routes)
}
