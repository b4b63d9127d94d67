//! sbr DEL and CHECK. DEL removes every rule whose source is an address on
//! `CNI_IFNAME` (only those to `table` when it is set) and, without `table`, flushes the
//! tables those rules pointed to. A missing netns or interface is success.

use std::net::IpAddr;

use cni_linux::rtnl::rule::Rule;
use cni_linux::Handle;
use cni_plugin::{CmdArgs, ResultExt};
use cni_types::CniError;

use super::conf::{ips_of, lock_netns, SbrConf, FIRST_TABLE};
use crate::common::errors::combine;
use crate::netns::{self, Opened};

/// Rules of `h` from one of `addrs` (to `table` when given).
fn our_rules(h: &mut Handle, addrs: &[IpAddr], table: Option<u32>) -> Result<Vec<Rule>, CniError> {
    Ok(h.rules()
        .or_internal("Failed to list all rules to tidy")?
        .into_iter()
        .filter(|r| r.single_source().is_some_and(|s| addrs.contains(&s)))
        .filter(|r| table.is_none_or(|t| r.table == t))
        .collect())
}

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = SbrConf::parse(&args.conf)?;
    if args.netns.as_os_str().is_empty() {
        return Ok(());
    }
    let ns = match netns::open(&args.netns)? {
        Opened::Ns(ns) => ns,
        Opened::Gone(e) => {
            log::info!("DEL: {e}; nothing to tidy");
            return Ok(());
        }
    };
    let _lock = lock_netns(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let link = match h.link_by_name(&args.ifname) {
        Ok(l) => l,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => {
            return Err(CniError::internal(format!(
                "Failed to get link {}: {e}",
                args.ifname
            )))
        }
    };
    let addrs: Vec<IpAddr> = h
        .addresses(Some(link.index))
        .or_internal("Failed to list all addrs")?
        .iter()
        .map(|a| a.addr.addr())
        .collect();
    let mut errors = Vec::new();
    for rule in our_rules(&mut h, &addrs, conf.table)? {
        if let Err(e) = h.delete_rule(&rule) {
            errors.push(CniError::internal(format!(
                "Failed to delete rule {rule:?}: {e}"
            )));
            continue;
        }
        if conf.table.is_none() && rule.table >= FIRST_TABLE {
            let routes = h
                .routes(rule.ipv6, Some(rule.table))
                .or_internal("Unable to list routes")?;
            for r in routes {
                if let Err(e) = h.delete_route(&r) {
                    if !e.is_not_found() {
                        errors.push(CniError::internal(format!(
                            "Failed to delete route {} in table {}: {e}",
                            r.dst, rule.table
                        )));
                    }
                }
            }
        }
    }
    combine(errors)
}

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = SbrConf::parse(&args.conf)?;
    let prev = args
        .prev_result
        .as_ref()
        .ok_or_else(|| CniError::internal("Required prevResult missing"))?;
    let ips = ips_of(prev, &args.ifname)?;
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let addrs: Vec<IpAddr> = ips.iter().map(|i| i.address.addr()).collect();
    let rules = our_rules(&mut h, &addrs, conf.table)?;
    for a in addrs {
        if !rules.iter().any(|r| r.single_source() == Some(a)) {
            return Err(CniError::internal(format!("no source rule for {a}")));
        }
    }
    Ok(())
}
