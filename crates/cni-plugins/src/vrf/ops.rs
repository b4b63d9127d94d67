//! vrf ADD, DEL and CHECK, all inside the container namespace.

use std::time::{Duration, Instant};

use ipnet::IpNet;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::{Link, LinkSpec};
use cni_linux::rtnl::route::{RouteScope, RT_TABLE_MAIN};
use cni_linux::rtnl::virt::VirtKind;
use cni_linux::{Handle, NetNs};
use cni_plugin::{CmdArgs, ResultExt};
use cni_types::{CniError, CniResult};

use super::conf::{lowest_free, VrfConf};
use crate::common::fault;
use crate::common::undo::Undo;
use crate::netns::{self, Opened};

/// EOPNOTSUPP: the kernel does not know the link kind.
const EOPNOTSUPP: i32 = 95;
/// How long ADD waits for the local routes of re-added IPv6 addresses (Go: about 2.5 s).
const V6_ROUTE_WAIT: Duration = Duration::from_millis(2500);

fn is_vrf(l: &Link) -> bool {
    l.kind.as_deref() == Some("vrf")
}

/// The VRF called `name`, if there is one (a non-VRF link of that name is an error).
fn find_vrf(h: &mut Handle, name: &str) -> Result<Option<(Link, u32)>, CniError> {
    match h.link_by_name(name) {
        Ok(l) if is_vrf(&l) => {
            let table = h
                .virt_details(l.index)
                .or_internal("failed to read the VRF")?
                .vrf_table
                .unwrap_or(0);
            Ok(Some((l, table)))
        }
        Ok(_) => Err(CniError::internal(format!("{name} is not a VRF device"))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(CniError::internal(format!("failed to look up {name}: {e}"))),
    }
}

fn vrf_tables(h: &mut Handle) -> Result<Vec<u32>, CniError> {
    let mut used = Vec::new();
    for l in h.links().or_internal("failed to list links")? {
        if is_vrf(&l) {
            used.extend(
                h.virt_details(l.index)
                    .or_internal("failed to read a VRF")?
                    .vrf_table,
            );
        }
    }
    Ok(used)
}

fn handle(ns: &NetNs) -> Result<Handle, String> {
    Handle::in_netns(ns).map_err(|e| e.to_string())
}

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = VrfConf::parse(&args.conf)?;
    let mut result = args
        .prev_result
        .clone()
        .ok_or_else(|| CniError::invalid_config("missing prevResult from earlier plugin"))?;
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let link = h
        .link_by_name(&args.ifname)
        .map_err(|e| CniError::internal(format!("failed to find {}: {e}", args.ifname)))?;
    if link.master.is_some() {
        return Err(CniError::internal(format!(
            "interface {} already has a master",
            args.ifname
        )));
    }
    let mut undo = Undo::new();

    let (vrf, table) = match find_vrf(&mut h, &conf.vrfname)? {
        Some((vrf, table)) => {
            if conf.table.is_some_and(|t| t != table) {
                return Err(CniError::internal(format!(
                    "VRF {} exists with table {table}, not {}",
                    conf.vrfname,
                    conf.table.unwrap_or_default()
                )));
            }
            (vrf, table)
        }
        None => {
            let table = match conf.table {
                Some(t) => t,
                None => lowest_free(&vrf_tables(&mut h)?),
            };
            let kind = VirtKind::Vrf { table };
            match h.create_virt_link(&LinkSpec::named(&conf.vrfname), kind, None, None) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(EOPNOTSUPP) => {
                    return Err(CniError::internal(format!(
                        "failed to create VRF {}: {e} (the kernel lacks VRF support, \
                         CONFIG_NET_VRF)",
                        conf.vrfname
                    )))
                }
                Err(e) => {
                    return Err(CniError::internal(format!(
                        "failed to create VRF {}: {e}",
                        conf.vrfname
                    )))
                }
            }
            let vrf = h
                .link_by_name(&conf.vrfname)
                .or_internal("failed to find the new VRF")?;
            let (index, nsr) = (vrf.index, &ns);
            undo.push(format!("VRF {}", conf.vrfname), move || {
                handle(nsr)?.delete_link(index).map_err(|e| e.to_string())
            });
            h.set_link_up(vrf.index)
                .or_internal("failed to set the VRF up")?;
            (vrf, table)
        }
    };
    fault::inject("vrf", "vrf")?;

    // What enslaving loses: IPv6 global addresses and the routes in main.
    let v6: Vec<IpNet> = h
        .addresses(Some(link.index))
        .or_internal("failed to list addresses")?
        .into_iter()
        .filter(|a| a.addr.addr().is_ipv6() && a.scope == 0)
        .map(|a| a.addr)
        .collect();
    let mut routes = Vec::new();
    for ipv6 in [false, true] {
        routes.extend(
            h.routes(ipv6, Some(RT_TABLE_MAIN))
                .or_internal("failed to list routes")?
                .into_iter()
                .filter(|r| r.oif == Some(link.index) && r.scope == Some(RouteScope::Universe)),
        );
    }
    h.set_link_master(link.index, Some(vrf.index))
        .map_err(|e| {
            CniError::internal(format!(
                "failed to enslave {} to VRF {}: {e}",
                args.ifname, conf.vrfname
            ))
        })?;
    let (index, nsr) = (link.index, &ns);
    undo.push(
        format!("{} in VRF {}", args.ifname, conf.vrfname),
        move || {
            handle(nsr)?
                .set_link_master(index, None)
                .map_err(|e| e.to_string())
        },
    );
    fault::inject("vrf", "enslaved")?;

    let now: Vec<IpNet> = h
        .addresses(Some(link.index))
        .or_internal("failed to list addresses")?
        .into_iter()
        .map(|a| a.addr)
        .collect();
    for addr in v6.iter().filter(|a| !now.contains(a)) {
        let opts = AddAddressOptions { nodad: true };
        h.add_address(link.index, *addr, opts)
            .map_err(|e| CniError::internal(format!("failed to re-add {addr}: {e}")))?;
    }
    if !v6.is_empty() {
        let deadline = Instant::now() + V6_ROUTE_WAIT;
        loop {
            let local = h
                .routes(true, Some(table))
                .or_internal("failed to list routes")?;
            if v6
                .iter()
                .all(|a| local.iter().any(|r| r.dst.contains(&a.addr())))
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(CniError::internal(
                    "timed out waiting for the IPv6 routes in the VRF table",
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for r in routes {
        let mut moved = r.clone();
        moved.table = Some(table);
        h.replace_route(&moved).map_err(|e| {
            CniError::internal(format!(
                "failed to move route {} to the VRF table: {e}",
                r.dst
            ))
        })?;
    }
    fault::inject("vrf", "done")?;
    undo.commit();
    result.cni_version = args.version;
    Ok(result)
}

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VrfConf::parse(&args.conf)?;
    if args.netns.is_empty() {
        return Ok(());
    }
    let ns = match netns::open(&args.netns)? {
        Opened::Ns(ns) => ns,
        Opened::Gone(_) => return Ok(()),
    };
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let Some((vrf, _)) = find_vrf(&mut h, &conf.vrfname)? else {
        return Ok(());
    };
    match h.link_by_name(&args.ifname) {
        Ok(l) if l.master == Some(vrf.index) => h
            .set_link_master(l.index, None)
            .map_err(|e| CniError::internal(format!("failed to release {}: {e}", l.name)))?,
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to find {}: {e}",
                args.ifname
            )))
        }
    }
    let left = h
        .links()
        .or_internal("failed to list links")?
        .iter()
        .any(|l| l.master == Some(vrf.index));
    if !left {
        h.delete_link(vrf.index).map_err(|e| {
            CniError::internal(format!("failed to delete VRF {}: {e}", conf.vrfname))
        })?;
    }
    Ok(())
}

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = VrfConf::parse(&args.conf)?;
    if args.prev_result.is_none() {
        return Err(CniError::internal("missing prevResult from earlier plugin"));
    }
    let ns = netns::open_required(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let (vrf, _) = find_vrf(&mut h, &conf.vrfname)?
        .ok_or_else(|| CniError::internal(format!("VRF {} not found", conf.vrfname)))?;
    let link = h
        .link_by_name(&args.ifname)
        .map_err(|e| CniError::internal(format!("failed to find {}: {e}", args.ifname)))?;
    if link.master != Some(vrf.index) {
        return Err(CniError::internal(format!(
            "interface {} is not in VRF {}",
            args.ifname, conf.vrfname
        )));
    }
    Ok(())
}
