//! What macvlan, ipvlan, vlan and dummy share: finding the master
//! link, creating the container link under a temporary name straight inside the container
//! namespace and renaming it there, configuring it from an IPAM result, and the DEL and CHECK
//! steps that only differ by link kind.
//!
//! Attribution (a process may be killed at any point): the temporary name is derived from the
//! attachment ([`AttachmentId::sublink_temp_name`], `rcni` + 11 hex digits; Go uses a random
//! `vethXXXXXXXX`), and the rename to the final name sets the attachment's tag as the link's
//! alias in the same request, so a link is its attachment's at every instant. The link is
//! created in the container's namespace in one request (never in the host's), so nothing of
//! it is on the host side; before it is created, ADD writes the attachment's
//! [`sublink_record`] (its netns path), so GC, which gets no netns, can enter the namespace
//! of an attachment that is not in its valid list and delete the links carrying its tag. DEL
//! removes the record after the link; a lease goes through IPAM GC.

use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_add::{LinkAdd, LinkKind};
use cni_linux::rtnl::link_change::{Ipv4Conf, LinkChange};
use cni_linux::rtnl::route::RT_TABLE_MAIN;
use cni_linux::{sysctl, Handle, MacAddr, NetNs};
use cni_plugin::{ipam, CmdArgs, ResultExt, Undo};
use cni_types::{CniError, CniResult, Dns, Interface};

use super::errors::combine;
use super::iface_config::{configure_iface, ConfigureOptions};
use super::link_info::interface_of;
use super::step;
use super::sublink_record::{self, Record, SUBLINK};
use super::validate;
use crate::netns::{self, Opened};

/// EOPNOTSUPP: the kernel does not know the link kind.
const EOPNOTSUPP: i32 = 95;

/// The name of the interface the first default route leaves through (IPv4 first, then
/// IPv6), Go's `getDefaultRouteInterfaceName`.
pub fn default_route_interface(h: &mut Handle) -> Result<String, CniError> {
    for ipv6 in [false, true] {
        let routes = h
            .routes(ipv6, Some(RT_TABLE_MAIN))
            .or_internal("failed to list routes")?;
        let oif = routes
            .iter()
            .filter(|r| r.dst.prefix_len() == 0)
            .find_map(|r| r.oif);
        if let Some(index) = oif {
            let link = h
                .link_by_index(index)
                .or_internal("failed to look up the default route interface")?;
            return Ok(link.name);
        }
    }
    Err(CniError::internal("no default route interface found"))
}

/// Looks the master up by name; a missing master is code 999 as in Go.
pub fn lookup_master(h: &mut Handle, name: &str) -> Result<Link, CniError> {
    h.link_by_name(name)
        .map_err(|e| CniError::internal(format!("failed to lookup master {name:?}: {e}")))
}

/// The master link: `name` when given, else the default-route interface of `h`'s namespace.
pub fn resolve_master(h: &mut Handle, name: Option<&str>) -> Result<Link, CniError> {
    let name = match name {
        Some(n) => n.to_string(),
        None => default_route_interface(h)?,
    };
    lookup_master(h, &name)
}

/// `mtu` must not exceed the master's (Go: "invalid MTU N, must be [0, master MTU(M)]").
pub fn check_mtu_within_master(mtu: Option<u32>, master: &Link) -> Result<(), CniError> {
    match mtu {
        Some(m) if m > master.mtu => Err(CniError::invalid_config(format!(
            "invalid MTU {m}, must be [0, master MTU({})]",
            master.mtu
        ))),
        _ => Ok(()),
    }
}

/// Where the master lives and how to reach the container.
pub struct Placement<'a> {
    /// The container namespace.
    pub netns: &'a NetNs,
    /// The master's index, looked up in the namespace the link is created from (`None` for
    /// dummy).
    pub master: Option<u32>,
    /// The master lives in the container namespace (`linkInContainer`).
    pub link_in_container: bool,
}

/// Creates a link of `kind` in the container namespace under the temporary name `temp` and
/// renames it to `ifname` there, setting `alias` in the same request, so the final name never
/// meets a host interface and the link carries its owner from the first instant it has its
/// final name. On success the link exists in the container, down, and its deletion is
/// registered in `undo`. A link already called `temp` (a killed ADD's leftover: the name is
/// the attachment's) is an error; DEL removes it.
#[allow(clippy::too_many_arguments)]
pub fn create_in_container<'a>(
    place: &Placement<'a>,
    temp: &str,
    ifname: &str,
    alias: &str,
    kind: LinkKind<'static>,
    mtu: Option<u32>,
    mac: Option<MacAddr>,
    undo: &mut Undo<'a>,
) -> Result<Link, CniError> {
    let what = kind.kind_name();
    let mut container = Handle::in_netns(place.netns)
        .or_internal("cannot open netlink in the container namespace")?;
    let mut creator = if place.link_in_container {
        None
    } else {
        Some(Handle::new().or_internal("cannot open netlink")?)
    };
    let target = if place.link_in_container {
        None
    } else {
        Some(place.netns)
    };

    let request = LinkAdd::new(temp, kind)
        .mtu(mtu)
        .mac(mac)
        .parent(place.master)
        .netns(target);
    let h = creator.as_mut().unwrap_or(&mut container);
    match h.add_link(&request) {
        Ok(()) => {}
        Err(e) if e.is_exists() => {
            return Err(CniError::internal(format!(
                "failed to create {what}: the container already has {temp:?}, left by an \
                 earlier ADD of this attachment that did not finish; DEL it first"
            )))
        }
        Err(e) if e.errno() == Some(EOPNOTSUPP) => {
            return Err(CniError::internal(format!(
                "failed to create {what}: {e} (the kernel lacks {what} support)"
            )))
        }
        Err(e) => return Err(CniError::internal(format!("failed to create {what}: {e}"))),
    }

    let link = container
        .link_by_name(temp)
        .or_internal(&format!("failed to look up the new {what} {temp:?}"))?;
    let index = link.index;
    let ns = place.netns;
    undo.push(format!("{what} {ifname:?}"), move || {
        let mut h = Handle::in_netns(ns).map_err(|e| e.to_string())?;
        match h.delete_link(index) {
            Err(e) if !e.is_not_found() => Err(format!("failed to delete {what}: {e}")),
            _ => Ok(()),
        }
    });
    container
        .change_link(&LinkChange::of(index).name(ifname).alias(alias))
        .map_err(|e| CniError::internal(format!("failed to rename {what} to {ifname:?}: {e}")))?;
    container
        .link_by_index(index)
        .or_internal(&format!("failed to look up {ifname:?}"))
}

/// Applies `result` to `ifname` inside `netns`: `arp_notify`/`ndisc_notify` when `notify`
/// (failures ignored, as in Go), then `ConfigureIface`.
pub fn configure_in_container(
    netns: &NetNs,
    ifname: &str,
    result: &CniResult,
    notify: bool,
) -> Result<(), CniError> {
    let ifname = ifname.to_string();
    let result = result.clone();
    netns
        .run(move || -> Result<(), CniError> {
            let mut h = Handle::new().or_internal("cannot open netlink")?;
            if notify {
                // Failures ignored as in Go; arp_notify through netlink (see Ipv4Conf).
                if let Ok(link) = h.link_by_name(&ifname) {
                    let _ = h
                        .change_link(&LinkChange::of(link.index).ipv4_conf(Ipv4Conf::ArpNotify, 1));
                }
                let _ = sysctl::write(&sysctl::iface_key("ipv6", &ifname, "ndisc_notify"), "1");
            }
            configure_iface(&mut h, &ifname, &result, ConfigureOptions::default())
        })
        .or_internal("cannot enter the container namespace")?
}

/// Sets `ifname` up inside `netns` (the L2-only path).
pub fn set_up_in_container(netns: &NetNs, ifname: &str) -> Result<(), CniError> {
    let mut h =
        Handle::in_netns(netns).or_internal("cannot open netlink in the container namespace")?;
    h.link_by_name(ifname)
        .and_then(|link| h.change_link(&LinkChange::of(link.index).up()))
        .or_internal(&format!("failed to set {ifname:?} up"))
}

/// Where the addresses of a new link come from.
#[derive(Debug, Clone)]
pub enum Addressing {
    /// Run the IPAM plugin of `ipam.type` (its lease is released if the ADD fails).
    Ipam,
    /// A chained plugin's `prevResult` that already holds the IPs (ipvlan without IPAM).
    Prev(CniResult),
    /// No addresses: the link is only set up (macvlan without IPAM).
    L2,
}

/// Everything [`add_link`] needs besides the request.
pub struct AddPlan {
    /// Plugin name, for fault-injection step names.
    pub plugin: &'static str,
    pub kind: LinkKind<'static>,
    /// The master's index where it lives (`None` for dummy).
    pub master: Option<u32>,
    pub link_in_container: bool,
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub addressing: Addressing,
    /// Write `arp_notify`/`ndisc_notify` before configuring addresses.
    pub notify: bool,
    /// DNS for the result; `None` keeps what the IPAM result says.
    pub dns: Option<Dns>,
}

/// The ADD all four plugins share, as a transaction: create the link in the container under
/// a temporary name and rename it, get addresses (IPAM, `prevResult` or none), configure
/// them (or just set the link up), and build the result `[link]` with every IP on
/// interface 0. Any failure deletes the link and releases the IPAM lease.
pub fn add_link(args: &CmdArgs, netns: &NetNs, plan: AddPlan) -> Result<CniResult, CniError> {
    let mut undo = Undo::new();
    let place = Placement {
        netns,
        master: plan.master,
        link_in_container: plan.link_in_container,
    };
    let owner = args.id();
    // The record first: from the link's first instant, GC can find its namespace. A record
    // already there is a live attachment's (a repeated ADD): it is not this call's to undo.
    let dir = sublink_record::state_dir(&args.conf.raw)?;
    if sublink_record::write(&dir, SUBLINK, &Record::of(args))? {
        let (dir, tag) = (dir.clone(), owner.clone());
        undo.push("sub-link record", move || {
            sublink_record::remove(&dir, SUBLINK, &tag).map_err(|e| e.msg)
        });
    }
    step::end(plan.plugin, "record")?;
    let link = create_in_container(
        &place,
        &owner.sublink_temp_name(),
        &args.ifname,
        &owner.comment(),
        plan.kind,
        plan.mtu,
        plan.mac,
        &mut undo,
    )?;
    step::end(plan.plugin, "link")?;

    let l2_only = matches!(plan.addressing, Addressing::L2);
    let mut result = match plan.addressing {
        Addressing::Ipam => {
            let lease = ipam::ipam_add_with_undo(args, &mut undo)?;
            step::end(plan.plugin, "ipam")?;
            lease
        }
        Addressing::Prev(prev) => prev,
        Addressing::L2 => CniResult::new(args.version),
    };
    result.cni_version = args.version;
    result.interfaces = vec![interface_of(&link, args.sandbox()?)];
    if l2_only {
        set_up_in_container(netns, &args.ifname)?;
    } else {
        if result.ips.is_empty() {
            return Err(CniError::internal("IPAM plugin returned missing IP config"));
        }
        ips_on_first_interface(&mut result);
        configure_in_container(netns, &args.ifname, &result, plan.notify)?;
    }
    step::end(plan.plugin, "done")?;
    if let Some(dns) = plan.dns {
        result.dns = dns;
    }
    undo.commit();
    Ok(result)
}

/// The result of an ADD that made the one container link `link` (host-device, tap): the
/// IPAM lease when `layer3` (released by `undo` when the ADD fails later), the link as
/// interface 0, and its addresses and routes applied in `netns`. `plugin` names the
/// fault-injection step `ipam`.
pub fn result_for_one_link<'a>(
    args: &'a CmdArgs,
    plugin: &'static str,
    layer3: bool,
    link: &Link,
    netns: &NetNs,
    notify: bool,
    undo: &mut Undo<'a>,
) -> Result<CniResult, CniError> {
    let mut result = CniResult::new(args.version);
    if layer3 {
        result = ipam::ipam_add_with_undo(args, undo)?;
        step::end(plugin, "ipam")?;
        if result.ips.is_empty() {
            return Err(CniError::internal("IPAM plugin returned missing IP config"));
        }
    }
    result.cni_version = args.version;
    result.interfaces = vec![interface_of(link, args.sandbox()?)];
    if layer3 {
        ips_on_first_interface(&mut result);
        configure_in_container(netns, &args.ifname, &result, notify)?;
    }
    Ok(result)
}

/// Points every IP of `result` at interface 0, the container link.
pub fn ips_on_first_interface(result: &mut CniResult) {
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
}

/// DEL of the link: deletes `ifname` in the container namespace, and the attachment's
/// temporary name a killed ADD may have left. An empty CNI_NETNS, a namespace that is gone
/// (or not a network namespace) or a missing link is success.
pub fn delete_container_link(args: &CmdArgs) -> Result<(), CniError> {
    if args.netns.as_os_str().is_empty() {
        return Ok(());
    }
    match netns::open(&args.netns)? {
        Opened::Ns(ns) => {
            let mut h = Handle::in_netns(&ns)
                .or_internal("cannot open netlink in the container namespace")?;
            let temp = args.id().sublink_temp_name();
            for name in [args.ifname.as_str(), temp.as_str()] {
                h.delete_link_by_name(name)
                    .map_err(|e| CniError::internal(format!("failed to delete {name:?}: {e}")))?;
            }
            Ok(())
        }
        Opened::Gone(e) => {
            log::info!("DEL: {e}; nothing to delete in the container");
            Ok(())
        }
    }
}

/// DEL of a sub-link attachment: its link (see [`delete_container_link`]), then its record,
/// which stays when the link could not be deleted, so GC can try again.
pub fn delete_link_and_record(args: &CmdArgs) -> Result<(), CniError> {
    delete_container_link(args)?;
    let owner = args.id();
    sublink_record::remove(&sublink_record::state_dir(&args.conf.raw)?, SUBLINK, &owner)
}

/// GC of the sub-links of this network whose attachment is not in the valid list: for each
/// such record, enters its namespace (when it is still there) and deletes the links carrying
/// that attachment's tag (as alias, or under its temporary name), nothing else; then drops
/// the record. Keeps going after a failure and reports every failure at the end.
pub fn gc_container_links(args: &CmdArgs) -> Result<(), CniError> {
    let dir = sublink_record::state_dir(&args.conf.raw)?;
    gc_recorded_links(args, &dir, SUBLINK, |record, link| {
        let owner = &record.id;
        link.name == owner.sublink_temp_name()
            || link
                .alias
                .as_deref()
                .is_some_and(|a| a.starts_with(&owner.prefix()))
    })
}

/// For each record (called `what` in errors) in `dir` of this network whose attachment is
/// not in the valid list:
/// enters its namespace (when it is still there), deletes the links `owns` says are that
/// attachment's, then drops the record (kept when a deletion failed, so GC tries again).
/// Keeps going after a failure and reports every failure at the end.
pub fn gc_recorded_links(
    args: &CmdArgs,
    dir: &std::path::Path,
    what: &str,
    owns: impl Fn(&Record, &Link) -> bool,
) -> Result<(), CniError> {
    let mut errors = Vec::new();
    for record in sublink_record::stale(dir, what, &args.conf.name, args.valid_attachments())? {
        let deleted = match netns::open(&record.netns) {
            Ok(Opened::Ns(ns)) => delete_owned_links(&ns, |l| owns(&record, l)),
            Ok(Opened::Gone(e)) => {
                log::info!("GC: {:?}: {e}; its links went with it", record.netns);
                Ok(())
            }
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => errors.extend(sublink_record::remove(dir, what, &record.id).err()),
            Err(e) => errors.push(e),
        }
    }
    combine(errors)
}

/// GC of macvlan, ipvlan, vlan and dummy: the stale attachments' links and records, then
/// IPAM GC when `ipam.type` is set (both run; every failure is reported).
pub fn gc(args: &CmdArgs) -> Result<(), CniError> {
    let links = gc_container_links(args);
    let leases = cni_plugin::ipam::ipam_gc_if_configured(args);
    combine(links.err().into_iter().chain(leases.err()).collect())
}

/// Deletes the links in `netns` that `owns` picks.
fn delete_owned_links(netns: &NetNs, owns: impl Fn(&Link) -> bool) -> Result<(), CniError> {
    let mut h =
        Handle::in_netns(netns).or_internal("cannot open netlink in the container namespace")?;
    let links = h
        .links()
        .or_internal("failed to list the container's links")?;
    for link in links.iter().filter(|l| owns(l)) {
        match h.delete_link(link.index) {
            Err(e) if !e.is_not_found() => {
                return Err(CniError::internal(format!(
                    "GC: failed to delete {:?}: {e}",
                    link.name
                )))
            }
            _ => log::info!("GC: deleted {:?} of a stale attachment", link.name),
        }
    }
    Ok(())
}

/// CHECK, second half: the container link must exist with the right kind and MAC, then the
/// result's addresses and routes must be in place. `details` checks kind-specific settings.
pub fn check_container(
    netns: &NetNs,
    entry: &Interface,
    prev: &CniResult,
    kind: &str,
    details: impl FnOnce(&mut Handle, &Link) -> Result<(), CniError>,
) -> Result<(), CniError> {
    if entry.name.is_empty() {
        return Err(CniError::internal(
            "Container interface name missing in prevResult",
        ));
    }
    let mut h = Handle::in_netns(netns).or_internal("cannot open netlink in the container")?;
    let link = h.link_by_name(&entry.name).map_err(|_| {
        CniError::internal(format!(
            "Container Interface name in prevResult: {} not found",
            entry.name
        ))
    })?;
    if link.kind.as_deref() != Some(kind) {
        return Err(CniError::internal(format!(
            "Container interface {} not of type {kind}",
            link.name
        )));
    }
    details(&mut h, &link)?;
    validate::check_mac(entry, &link)?;
    validate::expected_ips(&mut h, &entry.name, &prev.ips)?;
    validate::expected_routes(&mut h, &prev.routes)
}

/// Opens a handle where the master lives: the container namespace with `linkInContainer`,
/// else the calling (host) namespace.
pub fn master_handle(netns: Option<&NetNs>, link_in_container: bool) -> Result<Handle, CniError> {
    match (link_in_container, netns) {
        (true, Some(ns)) => {
            Handle::in_netns(ns).or_internal("cannot open netlink in the container namespace")
        }
        _ => Handle::new().or_internal("cannot open netlink"),
    }
}

/// The `mtu` key of these plugins: absent or 0 is the kernel default, negative is invalid
/// (Go: "invalid MTU").
pub fn mtu_key(raw: &cni_types::RawObject) -> Result<Option<u32>, CniError> {
    let mtu = super::conf::field::<i64>(raw, "mtu")?.unwrap_or(0);
    match mtu {
        0 => Ok(None),
        m => u32::try_from(m)
            .map(Some)
            .map_err(|_| CniError::invalid_config(format!("invalid MTU {m}"))),
    }
}

/// The `master` key; an empty string counts as absent.
pub fn master_key(raw: &cni_types::RawObject) -> Result<Option<String>, CniError> {
    Ok(super::conf::field::<String>(raw, "master")?.filter(|m| !m.is_empty()))
}

#[cfg(test)]
mod tests {
    use cni_types::NetConf;

    use super::*;

    fn raw(json: &str) -> cni_types::RawObject {
        NetConf::parse(json.as_bytes()).unwrap().raw
    }

    #[test]
    fn mtu_and_master_keys() {
        assert_eq!(mtu_key(&raw(r#"{"name":"n"}"#)).unwrap(), None);
        assert_eq!(mtu_key(&raw(r#"{"name":"n","mtu":0}"#)).unwrap(), None);
        assert_eq!(
            mtu_key(&raw(r#"{"name":"n","MTU":1400}"#)).unwrap(),
            Some(1400)
        );
        assert_eq!(
            mtu_key(&raw(r#"{"name":"n","mtu":-1}"#)).unwrap_err().code,
            7
        );
        assert_eq!(
            mtu_key(&raw(r#"{"name":"n","mtu":"9000"}"#))
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            master_key(&raw(r#"{"name":"n","master":""}"#)).unwrap(),
            None
        );
        assert_eq!(
            master_key(&raw(r#"{"name":"n","master":"eth1"}"#))
                .unwrap()
                .as_deref(),
            Some("eth1")
        );
        assert_eq!(
            master_key(&raw(r#"{"name":"n","master":3}"#))
                .unwrap_err()
                .code,
            7
        );
    }

    #[test]
    fn mtu_is_bounded_by_the_master() {
        let master = Link {
            index: 2,
            name: "eth0".into(),
            mac: None,
            mtu: 1500,
            up: true,
            oper_up: true,
            promisc: false,
            allmulti: false,
            txqlen: 0,
            kind: None,
            master: None,
            link: None,
            link_netnsid: None,
            vlan_filtering: None,
            bridge_port: None,
            alias: None,
            ipv4_route_localnet: None,
            ipv6_accept_ra: None,
        };
        assert!(check_mtu_within_master(None, &master).is_ok());
        assert!(check_mtu_within_master(Some(1500), &master).is_ok());
        let e = check_mtu_within_master(Some(1501), &master).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("master MTU(1500)"), "{}", e.msg);
    }

    #[test]
    fn ips_point_at_the_container_link() {
        let mut r = CniResult::new(cni_types::SpecVersion::ALL[0]);
        r.ips.push(cni_types::IpConfig {
            interface: None,
            address: "198.18.0.2/24".parse().unwrap(),
            gateway: None,
        });
        ips_on_first_interface(&mut r);
        assert_eq!(r.ips[0].interface, Some(0));
    }
}
