//! vrf ADD, as a transaction: a VRF it created is deleted and the interface released again
//! when a later step fails. Steps: find or create the VRF, note what enslaving will drop
//! (IPv6 global addresses, the interface's routes in main), enslave, add the addresses back and
//! wait for their local routes, move the routes to the VRF's table.

use std::time::{Duration, Instant};

use ipnet::IpNet;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_add::{LinkAdd, LinkKind};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::route::{Route, RouteScope, RT_TABLE_MAIN};
use cni_linux::{Handle, NetNs};
use cni_plugin::{CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult};

use super::conf::{lowest_free, VrfConf};
use super::device::{find_vrf, handle_in, vrf_tables};
use crate::common::step;
use crate::netns;

/// EOPNOTSUPP: the kernel does not know the link kind.
const EOPNOTSUPP: i32 = 95;
/// How long ADD waits for the local routes of re-added IPv6 addresses (Go: about 2.5 s).
const V6_ROUTE_WAIT: Duration = Duration::from_millis(2500);

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

    let (vrf, table) = ensure_vrf(&mut h, &ns, &conf, &mut undo)?;
    step::end("vrf", "vrf")?;
    let dropped = Dropped::read(&mut h, &link)?;
    enslave(&mut h, &ns, &link, &vrf, &conf.vrfname, &mut undo)?;
    step::end("vrf", "enslaved")?;
    restore_ipv6(&mut h, &link, &dropped.ipv6, table)?;
    move_routes(&mut h, dropped.routes, table)?;
    step::end("vrf", "done")?;
    undo.commit();
    result.cni_version = args.version;
    Ok(result)
}

/// The VRF `conf` names and its table: the existing one (its table must match a configured
/// one), or a new one with the configured table or the lowest free one, deleted on undo.
fn ensure_vrf<'a>(
    h: &mut Handle,
    ns: &'a NetNs,
    conf: &VrfConf,
    undo: &mut Undo<'a>,
) -> Result<(Link, u32), CniError> {
    if let Some((vrf, table)) = find_vrf(h, &conf.vrfname)? {
        if conf.table.is_some_and(|t| t != table) {
            return Err(CniError::internal(format!(
                "VRF {} exists with table {table}, not {}",
                conf.vrfname,
                conf.table.unwrap_or_default()
            )));
        }
        return Ok((vrf, table));
    }
    let table = match conf.table {
        Some(t) => t,
        None => lowest_free(&vrf_tables(h)?),
    };
    h.add_link(&LinkAdd::new(&conf.vrfname, LinkKind::Vrf { table }))
        .map_err(|e| {
            let lacking = if e.errno() == Some(EOPNOTSUPP) {
                " (the kernel lacks VRF support, CONFIG_NET_VRF)"
            } else {
                ""
            };
            CniError::internal(format!(
                "failed to create VRF {}: {e}{lacking}",
                conf.vrfname
            ))
        })?;
    let vrf = h
        .link_by_name(&conf.vrfname)
        .or_internal("failed to find the new VRF")?;
    let index = vrf.index;
    undo.push(format!("VRF {}", conf.vrfname), move || {
        handle_in(ns)?.delete_link(index).map_err(|e| e.to_string())
    });
    h.change_link(&LinkChange::of(vrf.index).up())
        .or_internal("failed to set the VRF up")?;
    Ok((vrf, table))
}

/// What enslaving an interface to a VRF loses: its IPv6 global addresses and its routes in the
/// main table.
struct Dropped {
    ipv6: Vec<IpNet>,
    routes: Vec<Route>,
}

impl Dropped {
    fn read(h: &mut Handle, link: &Link) -> Result<Dropped, CniError> {
        let ipv6 = h
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
        Ok(Dropped { ipv6, routes })
    }
}

/// Puts `link` into `vrf`; released again on undo.
fn enslave<'a>(
    h: &mut Handle,
    ns: &'a NetNs,
    link: &Link,
    vrf: &Link,
    vrfname: &str,
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    h.change_link(&LinkChange::of(link.index).master(vrf.index))
        .map_err(|e| {
            CniError::internal(format!(
                "failed to enslave {} to VRF {vrfname}: {e}",
                link.name
            ))
        })?;
    let index = link.index;
    undo.push(format!("{} in VRF {vrfname}", link.name), move || {
        handle_in(ns)?
            .change_link(&LinkChange::of(index).nomaster())
            .map_err(|e| e.to_string())
    });
    Ok(())
}

/// Adds back the IPv6 addresses enslaving dropped and waits until the kernel has made their
/// local routes in the VRF's table.
fn restore_ipv6(h: &mut Handle, link: &Link, ipv6: &[IpNet], table: u32) -> Result<(), CniError> {
    if ipv6.is_empty() {
        return Ok(());
    }
    let now: Vec<IpNet> = h
        .addresses(Some(link.index))
        .or_internal("failed to list addresses")?
        .into_iter()
        .map(|a| a.addr)
        .collect();
    for addr in ipv6.iter().filter(|a| !now.contains(a)) {
        let opts = AddAddressOptions { nodad: true };
        h.add_address(link.index, *addr, opts)
            .map_err(|e| CniError::internal(format!("failed to re-add {addr}: {e}")))?;
    }
    let deadline = Instant::now() + V6_ROUTE_WAIT;
    loop {
        let local = h
            .routes(true, Some(table))
            .or_internal("failed to list routes")?;
        if ipv6
            .iter()
            .all(|a| local.iter().any(|r| r.dst.contains(&a.addr())))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CniError::internal(
                "timed out waiting for the IPv6 routes in the VRF table",
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Re-adds `routes` (the interface's routes in main) in the VRF's table.
fn move_routes(h: &mut Handle, routes: Vec<Route>, table: u32) -> Result<(), CniError> {
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
    Ok(())
}
