//! sbr ADD, as a transaction in the container namespace: per IP of `CNI_IFNAME`,
//! a free table, its rule, its default route and the interface's routes copied in; then the
//! interface's routes leave the main table. Every rule and route added is removed again, and
//! every main-table route deleted is put back, when a later step fails.

use std::collections::BTreeSet;

use ipnet::IpNet;

use cni_linux::rtnl::route::{Route, RT_TABLE_MAIN};
use cni_linux::rtnl::rule::Rule;
use cni_linux::{Handle, NetNs};
use cni_plugin::{CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult, IpConfig};

use super::conf::{ips_of, lock_netns, SbrConf, FIRST_TABLE};
use crate::common::step;
use crate::netns;

fn handle(ns: &NetNs) -> Result<Handle, String> {
    Handle::in_netns(ns).map_err(|e| e.to_string())
}

/// Tables any rule or route of the namespace uses.
fn used_tables(h: &mut Handle) -> Result<BTreeSet<u32>, CniError> {
    let mut used: BTreeSet<u32> = h
        .rules()
        .or_internal("Failed to list all rules")?
        .iter()
        .map(|r| r.table)
        .collect();
    for v6 in [false, true] {
        let routes = h
            .routes_in_all_tables(v6)
            .or_internal("Failed to list all routes")?;
        used.extend(routes.iter().filter_map(|r| r.table));
    }
    Ok(used)
}

/// The first table from [`FIRST_TABLE`] not in `used`.
pub fn first_free(used: &BTreeSet<u32>) -> u32 {
    (FIRST_TABLE..)
        .find(|t| !used.contains(t))
        .expect("a free table")
}

/// Whether `route` belongs with `ip`: its source or gateway is in `ip`'s subnet, or it has
/// neither (Go's rule).
fn route_belongs(route: &Route, ip: &IpConfig) -> bool {
    let subnet = ip.address.trunc();
    match (route.src, route.gateway) {
        (None, None) => true,
        (src, gw) => {
            src.is_some_and(|s| subnet.contains(&s)) || gw.is_some_and(|g| subnet.contains(&g))
        }
    }
}

fn host_prefix(ip: &IpConfig) -> IpNet {
    let a = ip.address.addr();
    IpNet::new(a, if a.is_ipv4() { 32 } else { 128 }).expect("host prefix")
}

fn add_rule<'a>(
    h: &mut Handle,
    ns: &'a NetNs,
    rule: Rule,
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    h.add_rule(&rule)
        .map_err(|e| CniError::internal(format!("Failed to add rule: {e}")))?;
    undo.push(format!("rule {rule:?}"), move || {
        handle(ns)?.delete_rule(&rule).map_err(|e| e.to_string())
    });
    Ok(())
}

fn add_route<'a>(
    h: &mut Handle,
    ns: &'a NetNs,
    route: Route,
    replace: bool,
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    let done = if replace {
        h.replace_route(&route)
    } else {
        h.add_route(&route)
    };
    done.map_err(|e| CniError::internal(format!("Failed to add route to {}: {e}", route.dst)))?;
    undo.push(
        format!("route {} table {:?}", route.dst, route.table),
        move || match handle(ns)?.delete_route(&route) {
            Err(e) if !e.is_not_found() => Err(e.to_string()),
            _ => Ok(()),
        },
    );
    Ok(())
}

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = SbrConf::parse(&args.conf)?;
    let mut result = args
        .prev_result
        .clone()
        .ok_or_else(|| CniError::invalid_config("This plugin must be called as chained plugin"))?;
    let ips = ips_of(&result, &args.ifname)?;
    let ns = netns::open_required(&args.netns)?;
    let _lock = lock_netns(&args.netns)?;
    let mut h = Handle::in_netns(&ns).or_internal("cannot open netlink in the container")?;
    let link = h.link_by_name(&args.ifname).map_err(|e| {
        CniError::internal(format!(
            "Cannot find network interface {}: {e}",
            args.ifname
        ))
    })?;
    let mut undo = Undo::new();

    if let Some(table) = conf.table {
        for ip in &ips {
            add_rule(
                &mut h,
                &ns,
                Rule::from_source(host_prefix(ip), table),
                &mut undo,
            )?;
        }
        step::end("sbr", "rules")?;
        undo.commit();
        result.cni_version = args.version;
        return Ok(result);
    }

    let main: Vec<Route> = [false, true]
        .into_iter()
        .map(|v6| h.routes(v6, Some(RT_TABLE_MAIN)))
        .collect::<Result<Vec<_>, _>>()
        .or_internal("Unable to list routes")?
        .into_iter()
        .flatten()
        .filter(|r| r.oif == Some(link.index))
        .collect();
    let mut used = used_tables(&mut h)?;
    for ip in &ips {
        let table = first_free(&used);
        used.insert(table);
        add_rule(
            &mut h,
            &ns,
            Rule::from_source(host_prefix(ip), table),
            &mut undo,
        )?;
        if let Some(gw) = conf.gateway_for(ip) {
            let zero = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
            let mut route = Route::to(zero.parse().expect("default"));
            route.gateway = Some(gw);
            route.oif = Some(link.index);
            route.table = Some(table);
            add_route(&mut h, &ns, route, false, &mut undo)?;
        }
        for r in main
            .iter()
            .filter(|r| r.dst.addr().is_ipv4() == ip.address.addr().is_ipv4())
        {
            if route_belongs(r, ip) {
                let mut copy = r.clone();
                copy.table = Some(table);
                // The default route added above may be the same one.
                add_route(&mut h, &ns, copy, true, &mut undo)?;
            }
        }
    }
    step::end("sbr", "tables")?;
    for r in &main {
        match h.delete_route(r) {
            Ok(()) => {
                let back = r.clone();
                let nsr = &ns;
                undo.push(format!("main route {}", r.dst), move || {
                    handle(nsr)?.replace_route(&back).map_err(|e| e.to_string())
                });
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(CniError::internal(format!(
                    "Failed to delete route {}: {e}",
                    r.dst
                )))
            }
        }
    }
    step::end("sbr", "done")?;
    undo.commit();
    result.cni_version = args.version;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_free_table_from_100() {
        assert_eq!(first_free(&BTreeSet::new()), 100);
        assert_eq!(first_free(&[100, 101, 103, 254].into()), 102);
    }

    #[test]
    fn routes_belong_by_source_or_gateway() {
        let ip = IpConfig {
            interface: Some(0),
            address: "198.18.1.2/24".parse().unwrap(),
            gateway: None,
        };
        let mut r = Route::to("198.18.9.0/24".parse().unwrap());
        assert!(route_belongs(&r, &ip));
        r.gateway = Some("198.18.1.1".parse().unwrap());
        assert!(route_belongs(&r, &ip));
        r.gateway = Some("198.18.5.1".parse().unwrap());
        assert!(!route_belongs(&r, &ip));
        r.src = Some("198.18.1.2".parse().unwrap());
        assert!(route_belongs(&r, &ip));
    }
}
