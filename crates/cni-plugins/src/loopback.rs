//! loopback (Go: containernetworking/plugins `plugins/main/loopback/loopback.go`): brings `lo` up
//! in the container's namespace.
//!
//! - ADD sets `lo` up and reports it like the Go plugin: interface `lo` with MAC
//!   `00:00:00:00:00:00` and `sandbox` = CNI_NETNS, plus the first IPv4 and the first IPv6
//!   address of `lo` (interface 0). A `prevResult` is passed through unchanged. `lo` carrying a
//!   non-loopback address is an error. CNI_IFNAME is ignored.
//! - DEL sets `lo` down; an empty CNI_NETNS or a namespace that is gone is success.
//! - CHECK verifies `lo` is up. STATUS and GC have nothing to do.

use std::net::IpAddr;

use cni_linux::rtnl::addr::Address;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, NetNs};
use cni_plugin::{CmdArgs, Plugin, ResultExt};
use cni_types::{CniError, CniResult, Interface, IpConfig};

use crate::netns::{self, Opened};

/// The loopback plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loopback;

const LO: &str = "lo";
const LO_MAC: &str = "00:00:00:00:00:00";

/// A netlink handle inside `ns` and the index of its `lo`.
fn lo_in(ns: &NetNs) -> Result<(Handle, cni_linux::rtnl::link::Link), CniError> {
    let mut h = Handle::in_netns(ns).or_internal("cannot open netlink in the namespace")?;
    let lo = h.link_by_name(LO).or_internal("cannot find lo")?;
    Ok((h, lo))
}

/// The first address of each family; fails on any non-loopback address.
fn loopback_addresses(addrs: &[Address]) -> Result<Vec<IpConfig>, CniError> {
    if let Some(bad) = addrs.iter().find(|a| !a.addr.addr().is_loopback()) {
        return Err(CniError::internal(format!(
            "loopback interface found with non-loopback address \"{}\"",
            bad.addr.addr()
        )));
    }
    let first = |v4: bool| addrs.iter().find(|a| a.addr.addr().is_ipv4() == v4);
    Ok([first(true), first(false)]
        .into_iter()
        .flatten()
        .map(|a| IpConfig {
            interface: Some(0),
            address: a.addr,
            gateway: None::<IpAddr>,
        })
        .collect())
}

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let ns = netns::open_required(&args.netns)?;
        let (mut h, lo) = lo_in(&ns)?;
        h.change_link(&LinkChange::of(lo.index).up())
            .or_internal("cannot set lo up")?;
        let addrs = h
            .addresses(Some(lo.index))
            .or_internal("cannot list the addresses of lo")?;
        let ips = loopback_addresses(&addrs)?;
        if let Some(prev) = &args.prev_result {
            return Ok(prev.clone());
        }
        let mut result = CniResult::new(args.version);
        result.interfaces.push(Interface {
            name: LO.into(),
            mac: LO_MAC.into(),
            sandbox: args.sandbox()?.to_string(),
            ..Interface::default()
        });
        result.ips = ips;
        Ok(result)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        if args.netns.as_os_str().is_empty() {
            return Ok(());
        }
        let ns = match netns::open(&args.netns)? {
            Opened::Ns(ns) => ns,
            Opened::Gone(e) => {
                log::info!("DEL: nothing to do, {e}");
                return Ok(());
            }
        };
        let (mut h, lo) = lo_in(&ns)?;
        h.change_link(&LinkChange::of(lo.index).down())
            .or_internal("cannot set lo down")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let ns = netns::open_required(&args.netns)?;
        let (_, lo) = lo_in(&ns)?;
        if !lo.up {
            return Err(CniError::internal("loopback interface is down"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Address {
        Address {
            index: 1,
            addr: s.parse().unwrap(),
            scope: 254,
            tentative: false,
            dad_failed: false,
        }
    }

    // The first address of each family, interface 0.
    #[test]
    fn first_address_per_family() {
        let ips = loopback_addresses(&[addr("::1/128"), addr("127.0.0.1/8"), addr("127.0.0.2/8")])
            .unwrap();
        let got: Vec<String> = ips.iter().map(|i| i.address.to_string()).collect();
        assert_eq!(got, ["127.0.0.1/8", "::1/128"]);
        assert!(ips
            .iter()
            .all(|i| i.interface == Some(0) && i.gateway.is_none()));
        assert!(loopback_addresses(&[]).unwrap().is_empty());
    }

    // lo with a non-loopback address is an error.
    #[test]
    fn rejects_non_loopback_address() {
        let e = loopback_addresses(&[addr("127.0.0.1/8"), addr("198.18.0.1/8")]).unwrap_err();
        assert_eq!(e.code, 999);
        assert_eq!(
            e.msg,
            "loopback interface found with non-loopback address \"198.18.0.1\""
        );
    }
}
