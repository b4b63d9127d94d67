//! Veth pairs as the Go plugins make them (`pkg/ip/link_linux.go`): the host end is named `veth` +
//! 8 random hex digits (retried on a name clash), set up, and gets `accept_ra=0` (unless the
//! caller turns its IPv6 off: [`HostIpv6`]).
//!
//! Unlike Go, the host end gets an explicit random MAC so udev never rewrites it
//! (containernetworking/plugins issue #805),
//! and it carries its attachment as its interface alias (the nft comment of
//! [`AttachmentId`]). The kernel ignores an alias given at creation, so the pair is made in
//! one request with the container end directly in the container's namespace and the host end
//! under a temporary name derived from the attachment ([`AttachmentId::temp_link_name`]),
//! then renamed to Go's random name, tagged and set up (and, for a bridge port, enslaved) in a
//! second one: a killed ADD leaves a host
//! veth that is either tagged or named after its attachment. (Making the pair in the
//! container and moving the host end out was attributable too, but a namespace move is long
//! work for the kernel under the RTNL lock, which every other link change on the node waits
//! for.) DEL finds the host end by tag or temporary name when
//! the namespace is gone, and GC removes both kinds for attachments that are not valid.

use cni_attribution::{recognise, AttachmentId};
use cni_linux::rtnl::link::Link;
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{sysctl, Handle, MacAddr, NetNs};
use cni_plugin::{ResultExt, Undo};
use cni_types::CniError;

use super::random;

/// How many random host names are tried before giving up (Go: 10).
const NAME_ATTEMPTS: usize = 10;

/// The container end of a new pair.
#[derive(Debug, Clone)]
pub struct ContainerEnd<'a> {
    /// Its name (`CNI_IFNAME`).
    pub name: &'a str,
    /// MTU of both ends; the kernel default when `None`.
    pub mtu: Option<u32>,
    /// Its MAC; kernel-random when `None`.
    pub mac: Option<MacAddr>,
    /// The attachment the pair belongs to, written as the host end's alias so that DEL and
    /// GC find it without the container's namespace. Only for [`Target::Netns`].
    pub owner: Option<&'a AttachmentId>,
}

/// Both ends of a new pair, as read back after creation.
#[derive(Debug, Clone)]
pub struct VethPair {
    pub host: Link,
    pub container: Link,
}

/// Whether the host end keeps IPv6. Off, it is turned off before the link comes up: a bridge
/// port never receives for its own addresses (the bridge takes every frame), and the host end
/// of an IPv4-only ptp pair has only IPv4 to route. IPv6 there only costs the host: an
/// `fe80::/64` and an `ff00::/8` multicast route per pair in its tables, which every IPv6 route
/// walk on a link change goes through (fib6_clean_all), the MLD reports of that address, and
/// an IPv6 teardown in every DEL when the pair is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostIpv6 {
    Keep,
    Off,
}

/// Where the container end goes.
pub enum Target<'h> {
    /// Another namespace, and a handle opened in it.
    Netns(&'h NetNs, &'h mut Handle),
    /// The host namespace itself (bridge's `<bridge>.<vlan>` gateway helper).
    Host,
}

/// Creates the pair. `host` is a handle in the host namespace (the calling thread's, where
/// the `accept_ra` sysctl is written). The caller owns the undo: deleting the host end by name
/// removes both ends.
pub fn create_pair(
    host: &mut Handle,
    mut target: Target<'_>,
    end: &ContainerEnd<'_>,
    ipv6: HostIpv6,
) -> Result<VethPair, CniError> {
    if let (Target::Netns(ns, in_container), Some(owner)) = (&mut target, end.owner) {
        let host_link = create_tagged_host_end(host, ns, end, owner, None, ipv6)?;
        return match in_container.link_by_name(end.name) {
            Ok(container) => Ok(VethPair {
                host: host_link,
                container,
            }),
            Err(e) => {
                let _ = host.delete_link_by_name(&host_link.name);
                Err(CniError::internal(format!(
                    "failed to look up {:?}: {e}",
                    end.name
                )))
            }
        };
    }
    let mac = random::local_mac().or_internal("failed to generate a MAC")?;
    let host_name = match &target {
        Target::Netns(ns, _) => create_untagged(host, Some(ns), end, mac)?,
        Target::Host => create_untagged(host, None, end, mac)?,
    };

    let finish = |host: &mut Handle, target: &mut Target<'_>| -> Result<VethPair, CniError> {
        let container = match target {
            Target::Netns(_, h) => h.link_by_name(end.name),
            Target::Host => host.link_by_name(end.name),
        }
        .or_internal(&format!("failed to look up {:?}", end.name))?;
        let mut host_link = host
            .link_by_name(&host_name)
            .or_internal(&format!("failed to lookup {host_name:?}"))?;
        let ipv6_off = ipv6 == HostIpv6::Off && turn_off_ipv6(host, &host_link);
        host.change_link(&LinkChange::of(host_link.index).up())
            .or_internal(&format!("failed to set {host_name:?} up"))?;
        host_link.up = true;
        write_accept_ra_off(&host_name, ipv6_off);
        Ok(VethPair {
            host: host_link,
            container,
        })
    };
    match finish(host, &mut target) {
        Ok(pair) => Ok(pair),
        Err(e) => {
            // Do not leave a half-configured pair behind.
            let _ = host.delete_link_by_name(&host_name);
            Err(e)
        }
    }
}

/// The container end of a new pair as a veth peer (its namespace is the caller's to add).
fn container_peer<'a>(end: &ContainerEnd<'_>) -> VethPeer<'a> {
    VethPeer::named(end.name).mtu(end.mtu).mac(end.mac)
}

/// The error for an interface name already taken in the container.
fn container_name_taken(container: &str, host: &str) -> CniError {
    CniError::internal(format!(
        "container veth name ({container:?}) peer provided ({host:?}) already exists"
    ))
}

/// Makes a pair with the container end `end` directly in `container_ns` and the host end tagged
/// as `owner`'s (see the module comment), enslaved to `master` when given, up, with IPv6 as
/// `ipv6` says, and with `accept_ra=0` where IPv6 stays. Returns the host end; the container
/// end is not looked up. On failure nothing of the pair is left.
pub fn create_tagged_host_end(
    host: &mut Handle,
    container_ns: &NetNs,
    end: &ContainerEnd<'_>,
    owner: &AttachmentId,
    master: Option<u32>,
    ipv6: HostIpv6,
) -> Result<Link, CniError> {
    let mac = random::local_mac().or_internal("failed to generate a MAC")?;
    let mut link = create_tagged(host, container_ns, end, mac, owner)?;
    let temp = link.name.clone();
    let ipv6_off = ipv6 == HostIpv6::Off && turn_off_ipv6(host, &link);
    match rename_and_tag(host, link.index, &temp, &owner.comment(), master) {
        Ok(name) => link.name = name,
        Err(e) => {
            let _ = delete(host, &temp);
            return Err(e);
        }
    }
    // The rename request also set these.
    link.alias = Some(owner.comment());
    link.up = true;
    if master.is_some() {
        link.master = master;
    }
    write_accept_ra_off(&link.name, ipv6_off);
    Ok(link)
}

/// `accept_ra=0` on the host end `name`: we want to own the routes of this interface; failures
/// are ignored as in Go. Skipped where IPv6 is off (nothing to accept, and each /proc/sys/net
/// write costs a lookup that grows with the node's namespaces).
fn write_accept_ra_off(name: &str, ipv6_off: bool) {
    if !ipv6_off {
        let _ = sysctl::write(&sysctl::iface_key("ipv6", name, "accept_ra"), "0");
    }
}

/// Turns IPv6 off on the new, still down host end `link` (see [`HostIpv6`]); returns whether
/// it is off. When the sysctl cannot be written, `addrgenmode none` over netlink still keeps
/// the address away (a kernel without IPv6 refuses both and has neither).
fn turn_off_ipv6(host: &mut Handle, link: &Link) -> bool {
    let key = sysctl::iface_key("ipv6", &link.name, "disable_ipv6");
    match sysctl::write(&key, "1") {
        Ok(()) => return true,
        Err(e) => log::debug!("host veth {}: {key} not written: {e}", link.name),
    }
    if let Err(e) = host.change_link(&LinkChange::of(link.index).no_ipv6_link_local()) {
        log::debug!(
            "host veth {}: IPv6 link-local left as it is: {e}",
            link.name
        );
    }
    false
}

/// Makes the pair under `owner`'s temporary host name and returns that host end as the kernel
/// reports it. A temporary link of the same attachment is a killed ADD's leftover (a finished
/// ADD renames it), so it is removed and the creation retried.
fn create_tagged(
    host: &mut Handle,
    container_ns: &NetNs,
    end: &ContainerEnd<'_>,
    mac: MacAddr,
    owner: &AttachmentId,
) -> Result<Link, CniError> {
    let temp = owner.temp_link_name();
    let request = LinkAdd::veth(&temp, container_peer(end).netns(container_ns))
        .mtu(end.mtu)
        .mac(mac);
    let mut made = host.add_link_and_get(&request);
    if matches!(&made, Err(e) if e.is_exists()) && host.link_by_name(&temp).is_ok() {
        delete(host, &temp).map_err(CniError::internal)?;
        made = host.add_link_and_get(&request);
    }
    match made {
        Ok(link) => Ok(link),
        Err(e) if e.is_exists() => Err(container_name_taken(end.name, &temp)),
        Err(e) => {
            // Created, but the look-up after it failed (a kernel without NLM_F_ECHO).
            let _ = delete(host, &temp);
            Err(CniError::internal(format!("failed to make veth pair: {e}")))
        }
    }
}

/// Renames the temporary host end `temp` (at `index`) to a random Go-style name, tags it,
/// enslaves it to `master` when given and sets it up, in one request per name tried.
fn rename_and_tag(
    host: &mut Handle,
    index: u32,
    temp: &str,
    alias: &str,
    master: Option<u32>,
) -> Result<String, CniError> {
    for _ in 0..NAME_ATTEMPTS {
        let name = random::veth_name().or_internal("failed to generate random veth name")?;
        let mut change = LinkChange::of(index).name(&name).alias(alias).up();
        if let Some(master) = master {
            change = change.master(master);
        }
        match host.change_link(&change) {
            Ok(()) => return Ok(name),
            // A clash on the random host name: try another one.
            Err(e) if e.is_exists() => continue,
            Err(e) => {
                return Err(CniError::internal(format!(
                    "failed to rename {temp:?} to {name:?}: {e}"
                )))
            }
        }
    }
    Err(CniError::internal("failed to find a unique veth name"))
}

/// Makes a pair without an owner (the VLAN gateway helper on the host, or a caller that does
/// not tag): the host end gets a random name, retried on a clash.
fn create_untagged(
    host: &mut Handle,
    container_ns: Option<&NetNs>,
    end: &ContainerEnd<'_>,
    mac: MacAddr,
) -> Result<String, CniError> {
    for _ in 0..NAME_ATTEMPTS {
        let name = random::veth_name().or_internal("failed to generate random veth name")?;
        let request = match container_ns {
            Some(ns) => LinkAdd::veth(&name, container_peer(end).netns(ns))
                .mtu(end.mtu)
                .mac(mac),
            None => LinkAdd::veth(end.name, VethPeer::named(&name).mtu(end.mtu).mac(mac))
                .mtu(end.mtu)
                .mac(end.mac),
        };
        match host.add_link(&request) {
            Ok(()) => return Ok(name),
            Err(e) if e.is_exists() && host.link_by_name(&name).is_ok() => continue,
            Err(e) if e.is_exists() => return Err(container_name_taken(end.name, &name)),
            Err(e) => return Err(CniError::internal(format!("failed to make veth pair: {e}"))),
        }
    }
    Err(CniError::internal("failed to find a unique veth name"))
}

/// The host veths in `h`'s namespace that are `owner`'s (normally one): tagged with its alias,
/// or still under its temporary name. DEL comes here only when the container's end could not
/// be followed to its peer (see [`delete_in_container`]), so the namespace's veths are listed:
/// the kernel cannot select links by alias. The dump is one per call and kernel-filtered to
/// veths.
pub fn owned_by(h: &mut Handle, owner: &AttachmentId) -> Result<Vec<Link>, CniError> {
    let prefix = owner.prefix();
    let temp = owner.temp_link_name();
    host_veths(h, |link| is_owned(link, &prefix, &temp))
}

/// True for a host veth tagged with the attachment prefix `prefix`, or untagged and still
/// under the attachment's temporary name `temp`.
fn is_owned(link: &Link, prefix: &str, temp: &str) -> bool {
    match &link.alias {
        Some(alias) => alias.starts_with(prefix),
        None => link.name == temp,
    }
}

/// The host veths of `network` whose attachment is not in `valid` (for GC).
pub fn stale_in_network(
    h: &mut Handle,
    network: &str,
    valid: &[AttachmentId],
) -> Result<Vec<Link>, CniError> {
    let keep_temp: Vec<String> = valid.iter().map(AttachmentId::temp_link_name).collect();
    host_veths(h, |link| match &link.alias {
        Some(alias) => {
            recognise::is_of_network(alias, network) && !valid.iter().any(|a| a.owns(alias))
        }
        None => recognise::is_temp_link_of(&link.name, network) && !keep_temp.contains(&link.name),
    })
}

fn host_veths(h: &mut Handle, select: impl Fn(&Link) -> bool) -> Result<Vec<Link>, CniError> {
    let links = h
        .links_of_kind("veth")
        .or_internal("failed to list veths")?;
    Ok(links.into_iter().filter(|l| select(l)).collect())
}

/// Deletes the host veths tagged as `owner`'s (their container ends go with them), for DEL
/// when the container's namespace is gone or its interface was never named.
pub fn delete_owned(owner: &AttachmentId) -> Result<(), CniError> {
    let mut h = Handle::new().or_internal("cannot open netlink")?;
    for link in owned_by(&mut h, owner)? {
        delete(&mut h, &link.name).map_err(CniError::internal)?;
    }
    Ok(())
}

/// DEL of a veth attachment: deletes the container end `ifname` in `netns` (when given) and
/// then, unless that took `owner`'s host end with it, the host veths tagged as `owner`'s.
/// Returns the errors of the steps that failed.
pub fn delete_attachment(
    netns: Option<&cni_linux::NetNs>,
    ifname: &str,
    owner: &AttachmentId,
) -> Vec<CniError> {
    let mut errors = Vec::new();
    let mut host_end_gone = false;
    if let Some(ns) = netns {
        match delete_in_container(ns, ifname, owner) {
            Ok(gone) => host_end_gone = gone,
            Err(e) => errors.push(e),
        }
    }
    // The host end of a pair whose container side is gone or was never named (a killed ADD).
    if !host_end_gone {
        if let Err(e) = delete_owned(owner) {
            errors.push(e);
        }
    }
    errors
}

/// [`delete_attachment`] with `release` (the IPAM DEL) run beside it on a scoped thread;
/// returns both outcomes. The pair's deletion spends most of its time waiting inside the kernel
/// (unregistering a device waits for the RCU callbacks pending on every CPU; docs/performance.md,
/// "The runtime's own cost and where a bridge ADD spends its time"), so a lease release run
/// beside it costs the DEL no time, where after it it added its whole run. Releasing the address
/// before the interface is gone is Go's order in ptp.
pub fn delete_attachment_beside<T: Send>(
    netns: Option<&cni_linux::NetNs>,
    ifname: &str,
    owner: &AttachmentId,
    release: impl FnOnce() -> T + Send,
) -> (Vec<CniError>, T) {
    std::thread::scope(|scope| {
        let released = scope.spawn(release);
        let errors = delete_attachment(netns, ifname, owner);
        match released.join() {
            Ok(value) => (errors, value),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// GC of a veth plugin: without a valid list (a request that is not a GC of spec 1.1) nothing
/// is known to be stale and nothing goes.
pub fn gc_for(args: &cni_plugin::CmdArgs) -> Result<(), CniError> {
    match args.conf.valid_attachments.as_deref() {
        Some(valid) => gc(&args.conf.name, valid),
        None => Ok(()),
    }
}

/// GC: deletes the host veths of `network` whose attachment is not in `valid`.
pub fn gc(network: &str, valid: &[AttachmentId]) -> Result<(), CniError> {
    let mut h = Handle::new().or_internal("cannot open netlink")?;
    let mut errors = Vec::new();
    for link in stale_in_network(&mut h, network, valid)? {
        if let Err(e) = delete(&mut h, &link.name) {
            errors.push(CniError::internal(e));
        }
    }
    super::errors::combine(errors)
}

/// Registers the undo of [`create_pair`]: deleting the host end `host_name` (in the calling
/// thread's namespace, the host's) removes both ends with their addresses and routes.
pub fn push_undo(undo: &mut Undo<'_>, host_name: &str) {
    let name = host_name.to_string();
    undo.push(format!("veth pair {name}"), move || {
        let mut h = Handle::new().map_err(|e| e.to_string())?;
        delete(&mut h, &name)
    });
}

/// Deletes a veth by name in `h`'s namespace (both ends go); a missing link is fine.
pub fn delete(h: &mut Handle, name: &str) -> Result<(), String> {
    h.delete_link_by_name(name)
        .map(|_| ())
        .map_err(|e| format!("failed to delete {name:?}: {e}"))
}

/// Deletes `ifname` inside `ns`; a missing link is success. Returns true when that deleted
/// `owner`'s host end too: `ifname` was a veth, the link at its peer's index in the calling
/// thread's namespace was tagged as `owner`'s before the deletion and is gone after it. (An
/// index alone proves nothing: the peer may live in another namespace where a link has the
/// same index.) Two `RTM_GETLINK`s by index instead of listing the host's links.
pub fn delete_in_container(
    ns: &cni_linux::NetNs,
    ifname: &str,
    owner: &AttachmentId,
) -> Result<bool, CniError> {
    let mut h =
        Handle::in_netns(ns).or_internal("cannot open netlink in the container namespace")?;
    let link = match h.link_by_name(ifname) {
        Ok(link) => link,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to lookup {ifname:?}: {e}"
            )))
        }
    };
    let mut host = Handle::new().or_internal("cannot open netlink")?;
    let peer = owned_peer(&mut host, &link, owner)?;
    match h.delete_link(link.index) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to delete {ifname:?}: {e}"
            )))
        }
    }
    match peer {
        Some(peer) => is_gone(&mut host, &peer),
        None => Ok(false),
    }
}

/// The link at the peer index of the container veth `container` in `host`'s namespace, when
/// it is a veth tagged as `owner`'s (whether it really is the peer is known only once the
/// container end is deleted: see [`is_gone`]).
fn owned_peer(
    host: &mut Handle,
    container: &Link,
    owner: &AttachmentId,
) -> Result<Option<Link>, CniError> {
    let (Some("veth"), Some(index)) = (container.kind.as_deref(), container.link) else {
        return Ok(None);
    };
    let candidate = match host.link_by_index(index) {
        Ok(link) => link,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to look up index {index}: {e}"
            )))
        }
    };
    let owned = candidate.kind.as_deref() == Some("veth")
        && is_owned(&candidate, &owner.prefix(), &owner.temp_link_name());
    Ok(owned.then_some(candidate))
}

/// True when `link` no longer exists in `host`'s namespace (its index is free, or reused by a
/// link of another name).
fn is_gone(host: &mut Handle, link: &Link) -> Result<bool, CniError> {
    match host.link_by_index(link.index) {
        Ok(now) => Ok(now.name != link.name),
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) => Err(CniError::internal(format!(
            "failed to look up {:?}: {e}",
            link.name
        ))),
    }
}
