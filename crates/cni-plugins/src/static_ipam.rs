//! static (Go: containernetworking/plugins `plugins/ipam/static/main.go`): the addresses, routes
//! and DNS written in the config, nothing stored.
//!
//! - ADD answers `ipam.addresses` after the overrides, in Go's order: CNI_ARGS `IP` (a list of
//!   CIDRs) appends, CNI_ARGS `GATEWAY` fills the gateway of every address whose subnet holds
//!   it, `args.cni.ips` replaces, `runtimeConfig.ips` replaces again. Plus `routes` and `dns`.
//! - DEL has nothing to undo; it succeeds for every config ADD would accept (Go does not
//!   decode the config on DEL; rcni refuses the same configs on every command).
//! - CHECK is Go's weak check: a configured address found in `prevResult` must carry the
//!   configured gateway; a configured address missing from `prevResult` is not detected.
//! - STATUS and GC have nothing to do.

use cni_ipam::StaticConfig;
use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

use crate::ipam_shared::{checked_cni_args, config_error, dns, ip_config, ipam_error, routes};

/// The static IPAM plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct StaticIpam;

/// The CNI_ARGS keys static understands.
const KNOWN_ARGS: &[&str] = &["IP", "GATEWAY"];

/// The configuration with the CNI_ARGS overrides applied.
fn load(args: &CmdArgs) -> Result<StaticConfig, CniError> {
    let cni_args = checked_cni_args(args, KNOWN_ARGS)?;
    StaticConfig::parse(&args.stdin, cni_args.get("IP"), cni_args.get("GATEWAY"))
        .map_err(config_error)
}

impl Plugin for StaticIpam {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let config = load(args)?;
        let mut result = CniResult::new(args.version);
        result.routes = routes(&config.routes)?;
        result.dns = dns(config.dns);
        result.ips = config
            .addresses
            .into_iter()
            .map(|a| ip_config(a.address, a.gateway))
            .collect();
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Nothing to undo, but the config is decoded like ADD's so that every plugin refuses
        // the same configs (Go's static skips decoding on DEL).
        load(args).map(drop)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let config = load(args)?;
        let Some(prev) = &args.prev_result else {
            return Err(CniError::invalid_config("Required prevResult missing"));
        };
        let found: Vec<_> = prev
            .ips
            .iter()
            .map(|ip| (ip.address.addr(), ip.gateway))
            .collect();
        config.check(&found).map_err(ipam_error)
    }
}
