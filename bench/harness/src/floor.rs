//! Figure 3: the kernel floor. The kernel objects of a bridge attachment made in-process through
//! rcni's netlink layer, with no plugin process and no IPAM: veth pair with the peer created in
//! the pod, host end on the bridge and up, pod address, link up, default route. DEL deletes the
//! pod's interface. This is the least any bridge plugin can cost.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use anyhow::{Context, Result};
use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::{BridgeSpec, LinkSpec};
use cni_linux::rtnl::route::Route;
use cni_linux::{Handle, NetNs};
use ipnet::IpNet;

use crate::ns::NamedNs;
use crate::report::Report;
use crate::stats::ms;
use crate::stop;

const BRIDGE: &str = "rcnibfl";

fn setup_bridge(host: &mut Handle) -> Result<u32> {
    host.create_bridge(&BridgeSpec {
        link: LinkSpec::named(BRIDGE),
        vlan_filtering: false,
    })?;
    let br = host.link_by_name(BRIDGE)?;
    host.add_address(
        br.index,
        "198.19.240.1/20".parse()?,
        AddAddressOptions::default(),
    )?;
    host.set_link_up(br.index)?;
    Ok(br.index)
}

/// One attachment's kernel work; returns (ADD ms, DEL ms).
fn one(bridge: u32, i: usize) -> Result<(f64, f64)> {
    let pod = NamedNs::create("f")?;
    let host_name = format!("vfl{i}");
    let addr: IpNet = IpNet::new(
        IpAddr::V4(Ipv4Addr::new(
            198,
            19,
            240 + (i / 250) as u8,
            (i % 250 + 2) as u8,
        )),
        20,
    )?;

    let started = Instant::now();
    let ns = NetNs::open(&pod.path)?;
    let mut host = Handle::new()?;
    host.create_veth(
        &LinkSpec::named(&host_name),
        &LinkSpec::named("eth0"),
        Some(&ns),
    )?;
    let hv = host.link_by_name(&host_name)?;
    host.set_link_master(hv.index, Some(bridge))?;
    host.set_link_up(hv.index)?;
    let mut inside = Handle::in_netns(&ns)?;
    let eth0 = inside.link_by_name("eth0")?;
    inside.add_address(eth0.index, addr, AddAddressOptions::default())?;
    inside.set_link_up(eth0.index)?;
    let mut default = Route::to("0.0.0.0/0".parse()?);
    default.gateway = Some("198.19.240.1".parse()?);
    inside.add_route(&default)?;
    let add = ms(started.elapsed());

    let started = Instant::now();
    let ns = NetNs::open(&pod.path)?;
    let mut inside = Handle::in_netns(&ns)?;
    inside.delete_link_by_name("eth0")?;
    let del = ms(started.elapsed());
    Ok((add, del))
}

pub fn measure(report: &mut Report, runs: usize) -> Result<()> {
    let mut host = Handle::new().context("netlink in the bench host namespace")?;
    let bridge = setup_bridge(&mut host)?;
    let (mut add, mut del) = (Vec::new(), Vec::new());
    for i in 0..runs {
        stop::check()?;
        let (a, d) = one(bridge, i)?;
        add.push(a);
        del.push(d);
    }
    let _ = host.delete_link_by_name(BRIDGE);
    report.add_floor("ADD bridge+host-local", add);
    report.add_floor("DEL bridge+host-local", del);
    Ok(())
}
