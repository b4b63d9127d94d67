//! Stopping open connections that a new program denies, and the stale ones of addresses that
//! left the node's pods.
//!
//! The program accepts packets of tracked connections before any policy chain (replies, and
//! connections opened while they were allowed), so a change that denies a connection already
//! open would not stop it. After a batch is committed, the conntrack entries of the local
//! pods it may have narrowed ([`Delta::narrowed`]) are judged by the enforcer
//! ([`Enforcer::admits`], from its own state: no cluster snapshot) and those it would not let
//! open are deleted: the next packet of such a connection is tracked anew (state `new`),
//! meets the policy chains and is dropped. Entries of connections that stay allowed are
//! kept, so an unrelated change never disturbs them. The entries of an address whose pod is
//! gone ([`Delta::released`]) are all deleted: its next pod starts with none (nothing is
//! inherited through address reuse). A batch that narrows nothing costs no conntrack dump.
//!
//! An entry is judged by its original direction (who opened it, to which port). Entries of
//! connections the node itself opened to a pod (kubelet probes) may be deleted too; their
//! packets never take the `forward` hook, so they go on as new ones. A connection to a
//! Service address that the node's kube-proxy translated is judged by the Service address,
//! not its backend.

use std::collections::HashSet;
use std::net::IpAddr;

use cni_nft::{ConntrackEntry, Family, Nft};
use cni_policy::nft::{Delta, Enforcer};
use cni_policy::Protocol;

/// The protocol of IP protocol `number`, for those policies name.
fn protocol(number: u8) -> Option<Protocol> {
    match number {
        6 => Some(Protocol::Tcp),
        17 => Some(Protocol::Udp),
        132 => Some(Protocol::Sctp),
        _ => None,
    }
}

/// Whether `entry` is to be deleted after `delta`: it involves a released address, or a
/// narrowed one and the enforcer would not let it open now. Protocols without ports (ICMP)
/// are left alone unless released.
fn stale(
    enforcer: &Enforcer,
    narrowed: &HashSet<IpAddr>,
    released: &HashSet<IpAddr>,
    entry: &ConntrackEntry,
) -> bool {
    if released.contains(&entry.src) || released.contains(&entry.dst) {
        return true;
    }
    if !narrowed.contains(&entry.src) && !narrowed.contains(&entry.dst) {
        return false;
    }
    let (Some(proto), Some(port)) = (protocol(entry.protocol), entry.dst_port) else {
        return false;
    };
    !enforcer.admits(entry.src, entry.dst, proto, port)
}

/// Deletes the conntrack entries `delta` makes stale, both families (blocking); how many.
pub fn flush(nft: &mut Nft, enforcer: &Enforcer, delta: &Delta) -> Result<usize, cni_nft::Error> {
    if delta.narrowed.is_empty() && delta.released.is_empty() {
        return Ok(0);
    }
    let narrowed: HashSet<IpAddr> = delta.narrowed.iter().copied().collect();
    let released: HashSet<IpAddr> = delta.released.iter().copied().collect();
    let mut deleted = 0;
    // A dump walks the kernel's whole conntrack table (every namespace's entries): only the
    // families of the addresses concerned are dumped.
    let concerned = || narrowed.iter().chain(&released);
    let families = [
        (Family::Ip, concerned().any(IpAddr::is_ipv4)),
        (Family::Ip6, concerned().any(IpAddr::is_ipv6)),
    ];
    for (family, _) in families.into_iter().filter(|(_, wanted)| *wanted) {
        for entry in nft.list_conntrack(family)? {
            if stale(enforcer, &narrowed, &released, &entry) {
                nft.delete_conntrack_entry(&entry)?;
                deleted += 1;
            }
        }
    }
    Ok(deleted)
}
