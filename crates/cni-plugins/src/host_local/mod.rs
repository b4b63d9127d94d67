//! host-local (Go: containernetworking/plugins `plugins/ipam/host-local/`): addresses from
//! configured ranges, recorded in a data directory the Go plugin can share. The allocator and the
//! store are `cni-ipam`; this module is the CNI side.
//!
//! - ADD allocates one address per range set for (CNI_CONTAINERID, CNI_IFNAME) and answers an
//!   abbreviated result: `ips` (address and gateway, no interface index), `routes` from the
//!   config, `dns` from `resolvConf`. A repeated ADD of one attachment returns its addresses.
//! - DEL releases the attachment's addresses; nothing to release is success, no netns needed.
//! - CHECK: the addresses of `prevResult` that lie in this network's ranges are still reserved
//!   for the attachment; without any, the attachment must hold at least one address (Go).
//! - STATUS fails with code 50 when the store cannot take a lease or a range set is full.
//! - GC releases every lease of this network whose attachment is not in the valid list.

mod config;

use std::net::IpAddr;

use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

use crate::ipam_shared::{dns, ip_config, ipam_error, routes};
use config::{load, ArgsUse};

/// The host-local IPAM plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostLocal;

/// The allocator and store of the request's network.
fn store(config: &cni_ipam::HostLocalConfig) -> Result<cni_ipam::HostLocal, CniError> {
    cni_ipam::HostLocal::new(config).map_err(ipam_error)
}

impl Plugin for HostLocal {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let config = load(args, ArgsUse::Honour)?;
        // Everything that can fail without touching the store comes first, so a failure
        // never leaves a lease behind.
        let mut result = CniResult::new(args.version);
        result.routes = routes(&config.routes)?;
        if let Some(path) = &config.resolv_conf {
            result.dns = dns(cni_ipam::parse_resolv_conf(path).map_err(ipam_error)?);
        }
        let allocations = store(&config)?
            .allocate(&args.container_id, &args.ifname, &config.requested_ips)
            .map_err(ipam_error)?;
        result.ips = allocations
            .into_iter()
            .map(|a| ip_config(a.address, a.gateway))
            .collect();
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let config = load(args, ArgsUse::Ignore)?;
        let released = store(&config)?
            .release(&args.container_id, &args.ifname)
            .map_err(ipam_error)?;
        log::debug!("released {released:?}");
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let config = load(args, ArgsUse::Honour)?;
        let ipam = store(&config)?;
        let expected: Vec<IpAddr> = args
            .prev_result
            .iter()
            .flat_map(|prev| &prev.ips)
            .map(|ip| ip.address.addr())
            .filter(|addr| ipam.range_sets().iter().any(|set| set.contains(*addr)))
            .collect();
        ipam.check_addresses(&args.container_id, &args.ifname, &expected)
            .map_err(ipam_error)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let config = load(args, ArgsUse::Ignore)?;
        store(&config)?.status().map_err(ipam_error)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        // The skeleton refuses a GC without a valid list before this runs.
        let valid = args.conf.valid_attachments.as_deref().unwrap_or_default();
        let config = load(args, ArgsUse::Ignore)?;
        let released = store(&config)?.gc(valid).map_err(ipam_error)?;
        for lease in &released {
            log::info!("GC released {} ({:?})", lease.ip, lease.owner);
        }
        Ok(())
    }
}
