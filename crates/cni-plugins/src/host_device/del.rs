//! host-device DEL.
//!
//! IPAM DEL first and always (also when the namespace is gone: the lease must not leak),
//! then the device: down, renamed to a temporary name in the container, moved to the host,
//! renamed to its host name (the state file's, else the alias, as Go) and given back its MTU
//! and former alias; then the state file goes. A missing namespace or device is success.

use cni_linux::{Handle, NetNs};
use cni_plugin::{ipam, CmdArgs, ResultExt};
use cni_types::CniError;

use super::conf::HostDeviceConf;
use super::restore::return_to_host;
use super::state::Saved;
use crate::common::errors::combine;
use crate::netns::{self, Opened};

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
