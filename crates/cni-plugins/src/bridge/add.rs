//! bridge ADD, as a transaction: each step that creates something registers its
//! undo, and any failure removes the veth pair and releases the IPAM lease before the error
//! is returned. The bridge, its gateway address and the VLAN gateway helper are shared by
//! every attachment of the network and stay, as in Go.

use std::time::Duration;

use cni_linux::rtnl::link::{BridgePortOptions, Link};
use cni_linux::rtnl::link_add::LinkAdd;
use cni_linux::rtnl::link_change::{Ipv4Conf, LinkChange};
use cni_linux::rtnl::SocketTransport;
use cni_linux::{sysctl, Handle, NetNs, NetlinkError};
use cni_plugin::{ipam, CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult};
use ipnet::IpNet;

use super::conf::BridgeConf;
use super::gateway::{calc_gateways, ensure_addr, Gateways};
use super::vlan;
use crate::common::iface_config::{configure_link, needs_namespace_thread, ConfigureOptions};
use crate::common::link_info::{interface_of, mac_string};
use crate::common::step;
use crate::common::veth::{self, ContainerEnd, HostIpv6, Target};
use crate::common::{masquerade, node_pods, spoofcheck};
use crate::netns;

/// Sleeps between looks at the host port's operational state. Go waits 0, 50, 500, 1000 and
/// 1000 ms; the kernel brings a veth bridge port up within microseconds of its peer, so the
/// first retries here come sooner (same 2.5 s budget), and a port a moment late costs a
/// millisecond instead of 50.
const PORT_STATE_WAITS_MS: [u64; 9] = [0, 1, 2, 4, 8, 35, 450, 1000, 1000];

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = conf_for_add(args)?;

    // Opened before the bridge is made, so a vanished container changes nothing on the host.
    let netns = netns::open_required(&args.netns)?;
    let sandbox = args.sandbox()?;
    let mut host = Handle::new().or_internal("cannot open netlink")?;
    step::end("bridge", "netns")?;

    let bridge = ensure_bridge(&mut host, &conf)?;
    step::end("bridge", "bridge")?;
    let mut undo = Undo::new();

    let owner = args.id();
    let host_end = veth::create_tagged_host_end(
        &mut host,
        &netns,
        &ContainerEnd {
            name: &args.ifname,
            mtu: conf.mtu,
            mac: conf.mac,
            owner: Some(&owner),
        },
        &owner,
        Some(bridge.index),
        HostIpv6::Off,
    )?;
    let host_veth = host_end.name.clone();
    veth::push_undo(&mut undo, &host_veth);
    step::end("bridge", "veth")?;
    let mut in_container = enter_container(&netns)?;
    let container_end = in_container
        .link_by_name(&args.ifname)
        .or_internal(&format!("failed to look up {:?}", args.ifname))?;
    step::end("bridge", "container netns")?;
    configure_host_port(
        &mut host,
        &host_end,
        &bridge,
        &PortConfig {
            hairpin: conf.hairpin_mode,
            isolated: conf.port_isolation,
            vlan: conf.vlan,
            trunk: &conf.vlan_trunk,
            preserve_default_vlan: conf.preserve_default_vlan,
            new_port: true,
        },
    )?;
    step::end("bridge", "port")?;

    let mut result = CniResult::new(args.version);
    result.interfaces = vec![
        interface_of(&bridge, ""),
        interface_of(&host_end, ""),
        interface_of(&container_end, sandbox),
    ];

    if conf.macspoofchk {
        let mac = &result.interfaces[2].mac;
        spoofcheck::setup_with_undo(args, &host_veth, mac, &mut undo)?;
    }

    if conf.layer3 {
        let ctx = HostSide {
            handle: &mut host,
            bridge: &bridge,
        };
        let container = ContainerSide {
            netns: &netns,
            handle: &mut in_container,
            link: &container_end,
        };
        apply_ipam(args, &conf, container, ctx, &mut result, &mut undo)?;
    } else if !conf.disable_container_interface {
        // Layer 2 only: the container end still has to come up.
        in_container
            .change_link(&LinkChange::of(container_end.index).up())
            .or_internal(&format!("failed to set {:?} up", args.ifname))?;
    }

    report_current_macs(&mut host, &conf, &host_veth, &mut result)?;
    if !conf.dns.is_empty() {
        result.dns = conf.dns.clone();
    }
    step::end("bridge", "done")?;
    undo.commit();
    Ok(result)
}

/// The config, checked for an ADD: its own rules, the masquerade backend, and the node agent
/// (one that is down would leave the pod on a subnet no other node routes to).
fn conf_for_add(args: &CmdArgs) -> Result<BridgeConf, CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    conf.validate_for_add()?;
    masquerade::check_backend("bridge", conf.ip_masq, conf.ip_masq_backend.as_deref())?;
    cni_types::node_agent::check_add(&args.conf.raw)?;
    step::end("bridge", "conf")?;
    Ok(conf)
}

/// Waits for the host port to come up (unless the container end is disabled), then puts the
/// bridge's and the host veth's current MACs in `result` (they can change while ports come
/// and go).
fn report_current_macs(
    host: &mut Handle,
    conf: &BridgeConf,
    host_veth: &str,
    result: &mut CniResult,
) -> Result<(), CniError> {
    let host_link = if conf.disable_container_interface {
        host.link_by_name(host_veth)
            .or_internal("failed to look up the host veth")?
    } else {
        wait_port_up(host, host_veth)?
    };
    step::end("bridge", "wait")?;
    result.interfaces[1].mac = mac_string(&host_link);
    let bridge_now = bridge_by_name(host, &conf.bridge)?;
    result.interfaces[0].mac = mac_string(&bridge_now);
    Ok(())
}

/// The host namespace side of an ADD: its netlink handle and the bridge.
struct HostSide<'h> {
    handle: &'h mut Handle,
    bridge: &'h Link,
}

/// The container's namespace, a netlink handle already open in it, and the container end.
struct ContainerSide<'c> {
    netns: &'c NetNs,
    handle: &'c mut Handle,
    link: &'c Link,
}

/// The layer-3 part: the IPAM lease (undone by IPAM DEL), gateways, the container's addresses and
/// routes, the gateway addresses on the bridge, and masquerading.
fn apply_ipam<'a>(
    args: &'a CmdArgs,
    conf: &BridgeConf,
    container: ContainerSide<'_>,
    host: HostSide<'_>,
    result: &mut CniResult,
    undo: &mut Undo<'a>,
) -> Result<(), CniError> {
    let lease = ipam::ipam_add_with_undo(args, undo)?;
    step::end("bridge", "ipam")?;
    result.ips = lease.ips;
    result.routes = lease.routes;
    result.dns = lease.dns;
    if result.ips.is_empty() {
        return Err(CniError::internal("IPAM plugin returned missing IP config"));
    }
    // Before the addresses are on the interface: the node agent holds them until it has
    // programmed the pod's policies.
    if node_pods::announce(args, &result.ips)? {
        undo.push("node agent told", || {
            node_pods::forget(args);
            Ok(())
        });
        step::end("bridge", "agent")?;
    }
    let gateways = calc_gateways(result, conf.is_gateway, conf.is_default_gateway);
    configure_container(container, result, conf)?;
    step::end("bridge", "container")?;
    if conf.is_gateway {
        add_gateways(host.handle, host.bridge, conf, &gateways, result)?;
    }
    step::end("bridge", "gateway")?;
    if conf.ip_masq {
        let ips: Vec<IpNet> = result.ips.iter().map(|i| i.address).collect();
        masquerade::setup_with_undo(args, &ips, undo)?;
        step::end("bridge", "masq")?;
    }
    Ok(())
}

/// Looks the bridge up; a link of another kind with that name is an error.
fn bridge_by_name(h: &mut Handle, name: &str) -> Result<Link, CniError> {
    let link = h
        .link_by_name(name)
        .map_err(|e| CniError::internal(format!("could not lookup {name:?}: {e}")))?;
    if link.kind.as_deref() != Some("bridge") {
        return Err(CniError::internal(format!(
            "{name:?} already exists but is not a bridge"
        )));
    }
    Ok(link)
}

/// Creates the bridge unless it exists (MTU and VLAN filtering only apply to a new one),
/// turns promiscuous mode on when asked, and sets it up with `accept_ra=0`. An existing
/// bridge (every ADD but a network's first) costs one look-up; it is set up only when down.
fn ensure_bridge(h: &mut Handle, conf: &BridgeConf) -> Result<Link, CniError> {
    let name = &conf.bridge;
    let fail = |msg: String| CniError::internal(format!("failed to create bridge {name:?}: {msg}"));
    let lookup_failed = |e: NetlinkError| fail(format!("could not lookup {name:?}: {e}"));
    let bridge = match h.link_by_name(name) {
        Ok(link) => link,
        Err(e) if e.is_not_found() => {
            create_bridge(h, conf).map_err(fail)?;
            h.link_by_name(name).map_err(lookup_failed)?
        }
        Err(e) => return Err(lookup_failed(e)),
    };
    if bridge.kind.as_deref() != Some("bridge") {
        return Err(fail(format!("{name:?} already exists but is not a bridge")));
    }
    if conf.promisc_mode {
        h.change_link(&LinkChange::of(bridge.index).promisc(true))
            .map_err(|e| fail(format!("could not set promiscuous mode on {name:?}: {e}")))?;
    }
    // We want to own the routes of this interface. Written only when netlink reports another
    // value (or none): a `/proc/sys/net/ipv6` lookup grows with the namespaces on the node.
    if bridge.ipv6_accept_ra != Some(0) {
        let _ = sysctl::write(&sysctl::iface_key("ipv6", name, "accept_ra"), "0");
    }
    if !bridge.up {
        h.change_link(&LinkChange::of(bridge.index).up())
            .map_err(|e| fail(e.to_string()))?;
    }
    Ok(bridge)
}

/// Creates the bridge; one made concurrently by another ADD is fine.
fn create_bridge(h: &mut Handle, conf: &BridgeConf) -> Result<(), String> {
    let name = &conf.bridge;
    let request = LinkAdd::bridge(name)
        .mtu(conf.mtu)
        .vlan_filtering(conf.vlan_filtering());
    match h.add_link(&request) {
        Ok(()) => Ok(()),
        Err(e) if e.is_exists() => Ok(()),
        Err(e) => {
            let hint = if conf.vlan_filtering() && e.errno() == Some(95) {
                " (vlan/vlanTrunk need bridge VLAN filtering, CONFIG_BRIDGE_VLAN_FILTERING, which this kernel lacks)"
            } else {
                ""
            };
            Err(format!("could not add {name:?}: {e}{hint}"))
        }
    }
}

/// Settings of a host-side bridge port.
pub(super) struct PortConfig<'a> {
    pub hairpin: bool,
    pub isolated: bool,
    pub vlan: u16,
    pub trunk: &'a [u16],
    pub preserve_default_vlan: bool,
    /// The port was just created by this ADD (and enslaved with it when it has an owner):
    /// flags still at the kernel's defaults need no write.
    pub new_port: bool,
}

/// Enslaves `port` to `bridge` unless it already is, and writes its flags and VLANs, as Go
/// does. Hairpin and isolated are written unless the port is new and both stay off, the
/// kernel's defaults for a new bridge port (Go writes them every time: one round trip less).
fn configure_host_port(
    h: &mut Handle,
    port: &Link,
    bridge: &Link,
    cfg: &PortConfig<'_>,
) -> Result<(), CniError> {
    if port.master != Some(bridge.index) {
        h.change_link(&LinkChange::of(port.index).master(bridge.index))
            .map_err(|e| {
                CniError::internal(format!(
                    "failed to connect {:?} to bridge {}: {e}",
                    port.name, bridge.name
                ))
            })?;
    }
    let defaults = cfg.new_port && !cfg.hairpin && !cfg.isolated;
    if !defaults {
        set_port_flags(h, port, cfg)?;
    }
    vlan::configure_port(
        h,
        port.index,
        &port.name,
        cfg.vlan,
        cfg.trunk,
        cfg.preserve_default_vlan,
    )
}

fn set_port_flags(h: &mut Handle, port: &Link, cfg: &PortConfig<'_>) -> Result<(), CniError> {
    h.set_bridge_port(
        port.index,
        &BridgePortOptions {
            hairpin: Some(cfg.hairpin),
            isolated: Some(cfg.isolated),
            learning: None,
        },
    )
    .map_err(|e| {
        CniError::internal(format!(
            "failed to set hairpin/isolated flags of {:?}: {e}",
            port.name
        ))
    })
}

/// The netlink socket every container-side step uses from the calling thread, opened by a
/// thread in the container's namespace right after the pair is made.
fn enter_container(netns: &NetNs) -> Result<Handle, CniError> {
    let socket = netns
        .run(SocketTransport::open)
        .or_internal("cannot enter the container namespace")?
        .or_internal("cannot open netlink in the container namespace")?;
    Ok(Handle::with_transport(Box::new(socket)))
}

/// The IPAM result on the container end, through the handle open in its namespace, and the
/// end's settings for a layer-3 attachment, all but `arp_notify` before it comes up:
///
/// - With an IPv6 address (or `ipv6LinkLocal`), the DAD sysctls as in Go (failures ignored as
///   in Go), on a thread in the namespace. Go writes them for every attachment; here an
///   IPv4-only pod never opens its `/proc/sys/net/ipv6`: the kernel keeps one dentry per
///   namespace that did under the one shared `/proc/sys/net`, and every later lookup there on
///   the node walks them all, so its cost grows with the pods. `arp_notify` goes through
///   netlink for the same reason.
/// - `arp_notify` as in Go, but written once the interface is up, so that coming up sends no
///   gratuitous ARP. Go's never gets past the bridge: its host end has been without carrier
///   long enough for the kernel to mark it so, and the bridge drops what a disabled port
///   receives. rcni brings its host end up sooner, before that mark (the bridge then takes
///   the port for up), so the announcement was flooded to every port, each pod handling it,
///   and this ADD and the DEL after it took longer the more pods the bridge had. Later link
///   changes inside the pod announce as with Go.
/// - Without an IPv6 address, no IPv6 link-local address either (unless `ipv6LinkLocal`), so
///   the interface never sends the MLD reports and router solicitations that address brings.
///   The bridge floods each of those to every port (it knows no multicast querier), so each new
///   pod cost work in every pod already there: on a crowded bridge that was most of the time
///   `rcni pod run` took (docs/compatibility.md, bridge).
fn configure_container(
    container: ContainerSide<'_>,
    result: &CniResult,
    conf: &BridgeConf,
) -> Result<(), CniError> {
    let ContainerSide {
        netns,
        handle,
        link,
    } = container;
    let has_ipv6 = needs_namespace_thread(result);
    if !has_ipv6 && !conf.ipv6_link_local {
        // A kernel without IPv6 refuses this, and makes no link-local address anyway.
        if let Err(e) = handle.change_link(&LinkChange::of(link.index).no_ipv6_link_local()) {
            log::debug!("bridge: IPv6 link-local left as it is: {e}");
        }
    }
    let opts = ConfigureOptions {
        ipv6_nodad: !conf.enable_dad,
    };
    if !has_ipv6 && !conf.ipv6_link_local {
        configure_link(handle, link, result, opts)?;
    } else {
        let (ifname, enable_dad) = (link.name.as_str(), conf.enable_dad);
        let in_thread = &mut *handle;
        netns
            .run(move || {
                if enable_dad {
                    let _ = sysctl::write(&sysctl::iface_key("ipv6", ifname, "enhanced_dad"), "1");
                    let _ = sysctl::write(&sysctl::iface_key("ipv6", ifname, "accept_dad"), "1");
                } else {
                    let _ = sysctl::write(&sysctl::iface_key("ipv6", ifname, "accept_dad"), "0");
                }
                configure_link(in_thread, link, result, opts)
            })
            .or_internal("cannot enter the container namespace")??;
    }
    // Ignored on failure as in Go.
    let _ = handle.change_link(&LinkChange::of(link.index).ipv4_conf(Ipv4Conf::ArpNotify, 1));
    Ok(())
}

/// Gateway addresses on the bridge (or on the `<bridge>.<vlan>` helper) and
/// forwarding for each family that has a gateway.
fn add_gateways(
    host: &mut Handle,
    bridge: &Link,
    conf: &BridgeConf,
    gateways: &Gateways,
    result: &mut CniResult,
) -> Result<(), CniError> {
    let mut helper_reported = false;
    for (family_gws, v6) in [(&gateways.v4, false), (&gateways.v6, true)] {
        for gw in family_gws {
            if conf.vlan != 0 {
                let helper = ensure_vlan_interface(host, bridge, conf).map_err(|e| {
                    CniError::internal(format!("failed to create vlan interface: {}", e.msg))
                })?;
                if !helper_reported {
                    result.interfaces.push(interface_of(&helper, ""));
                    helper_reported = true;
                }
                ensure_addr(host, &helper, *gw, conf.force_address).map_err(|e| {
                    CniError::internal(format!(
                        "failed to set vlan interface for bridge with addr: {}",
                        e.msg
                    ))
                })?;
            } else {
                ensure_addr(host, bridge, *gw, conf.force_address).map_err(|e| {
                    CniError::internal(format!("failed to set bridge addr: {}", e.msg))
                })?;
            }
        }
        if !family_gws.is_empty() {
            sysctl::enable_ip_forwarding(!v6, v6)
                .map_err(|e| CniError::internal(format!("failed to enable forwarding: {e}")))?;
        }
    }
    Ok(())
}

/// The `<bridge>.<vlan>` gateway helper: a veth pair in the host namespace whose peer is a
/// port of the bridge in the access VLAN. Created once and shared.
fn ensure_vlan_interface(
    host: &mut Handle,
    bridge: &Link,
    conf: &BridgeConf,
) -> Result<Link, CniError> {
    let name = format!("{}.{}", bridge.name, conf.vlan);
    match host.link_by_name(&name) {
        Ok(link) => return Ok(link),
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to find interface {name:?}: {e}"
            )))
        }
    }
    let pair = veth::create_pair(
        host,
        Target::Host,
        &ContainerEnd {
            name: &name,
            mtu: Some(bridge.mtu),
            mac: None,
            owner: None,
        },
        HostIpv6::Off,
    )
    .map_err(|e| CniError::internal(format!("faild to create vlan gateway {name:?}: {}", e.msg)))?;
    let configured = configure_host_port(
        host,
        &pair.host,
        bridge,
        &PortConfig {
            hairpin: false,
            isolated: false,
            vlan: conf.vlan,
            trunk: &[],
            preserve_default_vlan: conf.preserve_default_vlan,
            new_port: false,
        },
    )
    .and_then(|()| {
        host.change_link(&LinkChange::of(pair.container.index).up())
            .or_internal(&format!("failed to up {name:?}"))
    });
    if let Err(e) = configured {
        let _ = veth::delete(host, &pair.host.name);
        return Err(e);
    }
    host.link_by_name(&name)
        .or_internal(&format!("failed to lookup {name:?}"))
}

/// Polls the host port until it is operationally up, as Go does.
fn wait_port_up(h: &mut Handle, name: &str) -> Result<Link, CniError> {
    let mut last = None;
    for wait in PORT_STATE_WAITS_MS {
        std::thread::sleep(Duration::from_millis(wait));
        let link = h
            .link_by_name(name)
            .or_internal(&format!("failed to look up {name:?}"))?;
        if link.oper_up {
            return Ok(link);
        }
        last = Some(link);
    }
    let up = last.map(|l| l.up).unwrap_or(false);
    Err(CniError::internal(format!(
        "bridge port in error state: {}",
        if up { "lowerlayerdown" } else { "down" }
    )))
}
