//! ptp ADD, as a transaction: the IPAM lease and the veth pair (with the addresses
//! and routes on both ends) are undone if any later step fails.
//!
//! Go's order, except that the namespace is opened and the interface name checked before IPAM
//! runs, so a vanished container or a repeated ADD never touches a lease.

use std::net::IpAddr;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::route::{Route as KernelRoute, RouteScope};
use cni_linux::{sysctl, Handle, NetNs};
use cni_plugin::{ipam, CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult};
use ipnet::IpNet;

use super::PtpConf;
use crate::common::iface_config::{configure_iface, ConfigureOptions};
use crate::common::link_info::interface_of;
use crate::common::masquerade;
use crate::common::step;
use crate::common::veth::{self, ContainerEnd, HostIpv6, Target};
use crate::netns;

/// A full-length prefix around `ip` (/32 or /128).
fn host_prefix(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = PtpConf::parse(&args.conf)?;
    masquerade::check_backend("ptp", conf.ip_masq, conf.ip_masq_backend.as_deref())?;
    let netns = netns::open_required(&args.netns)?;
    let mut in_container =
        Handle::in_netns(&netns).or_internal("cannot open netlink in the container namespace")?;
    // A repeated ADD of a live attachment must fail before IPAM: an IPAM that hands the same
    // lease back (rcni's host-local does) would otherwise lose it to this ADD's rollback.
    if in_container.link_by_name(&args.ifname).is_ok() {
        return Err(CniError::internal(format!(
            "container veth name ({:?}) already exists",
            args.ifname
        )));
    }

    let mut undo = Undo::new();
    let mut result = ipam::ipam_add_with_undo(args, &mut undo)?;
    step::end("ptp", "ipam")?;
    result.cni_version = args.version;
    if result.ips.is_empty() {
        return Err(CniError::internal("IPAM plugin returned missing IP config"));
    }
    if let Some(ipc) = result.ips.iter().find(|i| i.gateway.is_none()) {
        return Err(CniError::internal(format!(
            "IPAM result has no gateway for {}: ptp routes all container traffic via the gateway",
            ipc.address
        )));
    }

    let v4 = result.ips.iter().any(|i| i.is_ipv4());
    let v6 = result.ips.iter().any(|i| !i.is_ipv4());
    sysctl::enable_ip_forwarding(v4, v6)
        .map_err(|e| CniError::internal(format!("Could not enable IP forwarding: {e}")))?;

    let mut host = Handle::new().or_internal("cannot open netlink")?;
    let owner = args.id();
    let pair = veth::create_pair(
        &mut host,
        Target::Netns(&netns, &mut in_container),
        &ContainerEnd {
            name: &args.ifname,
            mtu: conf.mtu,
            mac: None,
            owner: Some(&owner),
        },
        if v6 { HostIpv6::Keep } else { HostIpv6::Off },
    )?;
    veth::push_undo(&mut undo, &pair.host.name);
    step::end("ptp", "veth")?;

    for ipc in &mut result.ips {
        ipc.interface = Some(1);
    }
    result.interfaces = vec![
        interface_of(&pair.host, ""),
        interface_of(&pair.container, args.sandbox()?),
    ];

    setup_container_side(&netns, &args.ifname, &result)?;
    step::end("ptp", "container")?;
    setup_host_side(&mut host, &pair.host, &result)?;
    step::end("ptp", "host")?;

    if conf.ip_masq {
        let ips: Vec<IpNet> = result.ips.iter().map(|i| i.address).collect();
        masquerade::setup_with_undo(args, &ips, &mut undo)?;
    }

    if !args.conf.dns.is_empty() {
        result.dns = args.conf.dns.clone();
    }
    step::end("ptp", "done")?;
    undo.commit();
    Ok(result)
}

/// In the container: the IPAM result, then per IP the kernel's subnet route replaced by
/// `<gw>/32 dev <if> scope link src <ip>` and `<subnet> via <gw> src <ip>`, so every packet,
/// to the own subnet too, goes through the gateway.
fn setup_container_side(netns: &NetNs, ifname: &str, result: &CniResult) -> Result<(), CniError> {
    let ifname = ifname.to_string();
    let result = result.clone();
    netns
        .run(move || -> Result<(), CniError> {
            let mut h = Handle::new().or_internal("cannot open netlink")?;
            configure_iface(&mut h, &ifname, &result, ConfigureOptions::default())?;
            let index = h
                .link_by_name(&ifname)
                .map_err(|e| CniError::internal(format!("failed to look up {ifname:?}: {e}")))?
                .index;
            for ipc in &result.ips {
                let Some(gw) = ipc.gateway else { continue };
                let subnet = ipc.address.trunc();
                let mut kernel_route = KernelRoute::to(subnet);
                kernel_route.oif = Some(index);
                h.delete_route(&kernel_route).map_err(|e| {
                    CniError::internal(format!("failed to delete route {subnet} dev {ifname}: {e}"))
                })?;

                let mut to_gw = KernelRoute::to(host_prefix(gw));
                to_gw.oif = Some(index);
                to_gw.scope = Some(RouteScope::Link);
                to_gw.src = Some(ipc.address.addr());
                let mut via_gw = KernelRoute::to(subnet);
                via_gw.oif = Some(index);
                via_gw.gateway = Some(gw);
                via_gw.src = Some(ipc.address.addr());
                for r in [to_gw, via_gw] {
                    h.add_route(&r).map_err(|e| {
                        CniError::internal(format!("failed to add route {}: {e}", r.dst))
                    })?;
                }
            }
            Ok(())
        })
        .or_internal("cannot enter the container namespace")?
}

/// On the host veth: the gateway as /32 (/128), and a host-scoped route to the container
/// address. IPv6 gateway addresses skip DAD: every host veth carries the same one.
fn setup_host_side(
    h: &mut Handle,
    veth: &cni_linux::rtnl::link::Link,
    result: &CniResult,
) -> Result<(), CniError> {
    for ipc in &result.ips {
        let Some(gw) = ipc.gateway else { continue };
        let gw_net = host_prefix(gw);
        h.add_address(
            veth.index,
            gw_net,
            AddAddressOptions {
                nodad: gw.is_ipv6(),
            },
        )
        .map_err(|e| CniError::internal(format!("failed to add IP addr {gw_net} to veth: {e}")))?;
        let mut route = KernelRoute::to(host_prefix(ipc.address.addr()));
        route.oif = Some(veth.index);
        route.scope = Some(RouteScope::Host);
        match h.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => {
                return Err(CniError::internal(format!(
                    "failed to add route on host: {e}"
                )))
            }
        }
    }
    Ok(())
}
