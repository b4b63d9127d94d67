//! Veth pairs as the Go plugins make them (PL §0.4): the host end is named `veth` + 8 random hex
//! digits (retried on a name clash), set up, and gets `accept_ra=0`.
//!
//! Unlike Go, the host end gets an explicit random MAC so udev never rewrites it (PL §6 #805),
//! and it carries its attachment as its interface alias (the nft comment of
//! [`AttachmentTag`]): both ends are made in the container's namespace and the host end is
//! moved out and tagged in one request, so a killed ADD never leaves an untagged host veth.
//! DEL finds the host end by that tag when the namespace is gone, and GC removes the tagged
//! host ends of attachments that are not valid.

use cni_linux::rtnl::link::{Link, LinkSpec};
use cni_linux::{sysctl, Handle, MacAddr, NetNs};
use cni_plugin::ResultExt;
use cni_types::{CniError, GcAttachment};
use ipnet::IpNet;

use super::nft_tag::AttachmentTag;
use super::random;
use super::undo::Undo;

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
    pub owner: Option<&'a AttachmentTag>,
}

/// Both ends of a new pair, as read back after creation.
#[derive(Debug, Clone)]
pub struct VethPair {
    pub host: Link,
    pub container: Link,
}

/// Where the container end goes.
pub enum Target<'h> {
    /// Another namespace, reached through a handle opened in it.
    Netns(&'h mut Handle),
    /// The host namespace itself (bridge's `<bridge>.<vlan>` gateway helper).
    Host,
}

/// Creates the pair. `host` and `host_ns` are the host namespace (the calling thread's, where
/// the `accept_ra` sysctl is written). The caller owns the undo: deleting the host end by name
/// removes both ends.
pub fn create_pair(
    host: &mut Handle,
    host_ns: &NetNs,
    mut target: Target<'_>,
    end: &ContainerEnd<'_>,
) -> Result<VethPair, CniError> {
    let container_spec = LinkSpec {
        name: end.name.to_string(),
        mtu: end.mtu,
        mac: end.mac,
    };
    let alias = end.owner.map(AttachmentTag::comment).unwrap_or_default();
    let mut host_name = String::new();
    let mut created = false;
    for _ in 0..NAME_ATTEMPTS {
        host_name = random::veth_name().or_internal("failed to generate random veth name")?;
        let host_spec = LinkSpec {
            name: host_name.clone(),
            mtu: end.mtu,
            mac: Some(random::local_mac().or_internal("failed to generate a MAC")?),
        };
        let made = match &mut target {
            Target::Netns(h) => {
                create_in_container(h, host_ns, &container_spec, &host_spec, &alias)
            }
            Target::Host => host.create_veth(&container_spec, &host_spec, None),
        };
        match made {
            Ok(()) => {
                created = true;
                break;
            }
            // A clash on the random host name: try another one.
            Err(e) if e.is_exists() && host.link_by_name(&host_name).is_ok() => continue,
            Err(e) if e.is_exists() => {
                return Err(CniError::internal(format!(
                    "container veth name ({:?}) peer provided ({host_name:?}) already exists",
                    end.name
                )))
            }
            Err(e) => return Err(CniError::internal(format!("failed to make veth pair: {e}"))),
        }
    }
    if !created {
        return Err(CniError::internal("failed to find a unique veth name"));
    }

    let finish = |host: &mut Handle, target: &mut Target<'_>| -> Result<VethPair, CniError> {
        let container = match target {
            Target::Netns(h) => h.link_by_name(end.name),
            Target::Host => host.link_by_name(end.name),
        }
        .or_internal(&format!("failed to look up {:?}", end.name))?;
        let host_link = host
            .link_by_name(&host_name)
            .or_internal(&format!("failed to lookup {host_name:?}"))?;
        host.set_link_up(host_link.index)
            .or_internal(&format!("failed to set {host_name:?} up"))?;
        // We want to own the routes of this interface; failures are ignored as in Go.
        let _ = sysctl::write(&sysctl::iface_key("ipv6", &host_name, "accept_ra"), "0");
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

/// Makes both ends inside the container's namespace, then moves the host end out and tags it
/// with `alias` in one request. A kill between the two steps leaves the pair in the
/// container's namespace (DEL of `eth0`, or the namespace's end, removes it), never an untagged
/// link in the host's. A host-side name clash on the move removes the pair and is EEXIST.
fn create_in_container(
    h: &mut Handle,
    host_ns: &NetNs,
    container: &LinkSpec,
    host_end: &LinkSpec,
    alias: &str,
) -> Result<(), cni_linux::NetlinkError> {
    h.create_veth(container, host_end, None)?;
    let moved = h.move_link_to_netns_with_alias(&host_end.name, host_ns, alias);
    if moved.is_err() {
        let _ = h.delete_link_by_name(&host_end.name);
    }
    moved
}

/// The host veths in `h`'s namespace whose alias tags them as `owner`'s (normally one).
pub fn owned_by(h: &mut Handle, owner: &AttachmentTag) -> Result<Vec<Link>, CniError> {
    let prefix = owner.prefix();
    host_veths(h, |alias| alias.starts_with(&prefix))
}

/// The host veths of `network` whose attachment is not in `valid` (for GC).
pub fn stale_in_network(
    h: &mut Handle,
    network: &str,
    valid: &[GcAttachment],
) -> Result<Vec<Link>, CniError> {
    let net_prefix = AttachmentTag::network_prefix(network);
    let keep: Vec<String> = valid
        .iter()
        .map(|a| AttachmentTag::new(network, &a.container_id, &a.ifname).prefix())
        .collect();
    host_veths(h, |alias| {
        alias.starts_with(&net_prefix) && !keep.iter().any(|k| alias.starts_with(k.as_str()))
    })
}

fn host_veths(h: &mut Handle, select: impl Fn(&str) -> bool) -> Result<Vec<Link>, CniError> {
    let links = h.links().or_internal("failed to list links")?;
    Ok(links
        .into_iter()
        .filter(|l| l.kind.as_deref() == Some("veth"))
        .filter(|l| l.alias.as_deref().is_some_and(&select))
        .collect())
}

/// Deletes the host veths tagged as `owner`'s (their container ends go with them), for DEL
/// when the container's namespace is gone or its interface was never named.
pub fn delete_owned(owner: &AttachmentTag) -> Result<(), CniError> {
    let mut h = Handle::new().or_internal("cannot open netlink")?;
    for link in owned_by(&mut h, owner)? {
        delete(&mut h, &link.name).map_err(CniError::internal)?;
    }
    Ok(())
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
pub fn gc(network: &str, valid: &[GcAttachment]) -> Result<(), CniError> {
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

/// Deletes `ifname` inside `ns` and returns its global unicast addresses; a missing link is
/// success with no addresses.
pub fn delete_in_container(ns: &cni_linux::NetNs, ifname: &str) -> Result<Vec<IpNet>, CniError> {
    let mut h =
        Handle::in_netns(ns).or_internal("cannot open netlink in the container namespace")?;
    let link = match h.link_by_name(ifname) {
        Ok(link) => link,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to lookup {ifname:?}: {e}"
            )))
        }
    };
    let addrs = h.addresses(Some(link.index)).map_err(|e| {
        CniError::internal(format!("failed to get IP addresses for {ifname:?}: {e}"))
    })?;
    match h.delete_link(link.index) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => {
            return Err(CniError::internal(format!(
                "failed to delete {ifname:?}: {e}"
            )))
        }
    }
    Ok(addrs
        .into_iter()
        .map(|a| a.addr)
        .filter(|a| is_global_unicast(a.addr()))
        .collect())
}

/// Go's `IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local or broadcast.
fn is_global_unicast(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_link_local()
                || a.is_broadcast())
        }
        std::net::IpAddr::V6(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_unicast_link_local())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_unicast() {
        for (ip, want) in [
            ("10.0.0.1", true),
            ("fd00::1", true),
            ("fe80::1", false),
            ("127.0.0.1", false),
            ("169.254.1.1", false),
            ("224.0.0.1", false),
        ] {
            assert_eq!(is_global_unicast(ip.parse().unwrap()), want, "{ip}");
        }
    }
}
