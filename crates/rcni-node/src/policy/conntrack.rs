//! Stopping open connections that a new program denies.
//!
//! The program accepts packets of tracked connections before any policy chain (replies, and
//! connections opened while they were allowed), so a change that denies a connection already
//! open would not stop it. After every program is committed, the conntrack entries of the
//! node's pods' connections that the new policies would not let open are therefore deleted:
//! the next packet of such a connection is tracked anew (state `new`), meets the policy
//! chains and is dropped. Entries of connections that stay allowed are kept, so an unrelated
//! change never disturbs them.
//!
//! An entry is judged by its original direction (who opened it, to which port), as
//! [`cni_policy::allows`] judges a new connection. Entries of connections the node itself
//! opened to a pod (kubelet probes) may be deleted too; their packets never take the
//! `forward` hook, so they go on as new ones. A connection to a Service address that the
//! node's kube-proxy translated is judged by the Service address, not its backend.

use std::collections::BTreeSet;
use std::net::IpAddr;

use cni_nft::{Family, Nft};
use cni_policy::effective::{allows, Endpoint};
use cni_policy::{Cluster, Protocol};

/// The protocol of IP protocol `number`, for those policies name.
fn protocol(number: u8) -> Option<Protocol> {
    match number {
        6 => Some(Protocol::Tcp),
        17 => Some(Protocol::Udp),
        132 => Some(Protocol::Sctp),
        _ => None,
    }
}

/// One tracked connection as the policies see it: protocol number, the original source and
/// destination, and the destination port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    pub protocol: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dst_port: Option<u16>,
}

/// Whether the policies of `cluster` deny `conn` as a new connection, for connections from
/// or to one of the `local` addresses (the others are not this node's to stop). Protocols
/// without ports (ICMP) are left alone.
pub fn denied(cluster: &Cluster, local: &BTreeSet<IpAddr>, conn: Tracked) -> bool {
    if !local.contains(&conn.src) && !local.contains(&conn.dst) {
        return false;
    }
    let (Some(proto), Some(port)) = (protocol(conn.protocol), conn.dst_port) else {
        return false;
    };
    let end = |ip| {
        cluster
            .pod_with_ip(ip)
            .map_or(Endpoint::External(ip), Endpoint::Pod)
    };
    // A selector that does not parse builds no program: nothing is deleted for it.
    !allows(cluster, end(conn.src), end(conn.dst), proto, port).unwrap_or(true)
}

/// Deletes the conntrack entries [`denied`] picks, both families (blocking); how many.
pub fn flush_denied(
    nft: &mut Nft,
    cluster: &Cluster,
    local: &BTreeSet<IpAddr>,
) -> Result<usize, cni_nft::Error> {
    let mut deleted = 0;
    for family in [Family::Ip, Family::Ip6] {
        for entry in nft.list_conntrack(family)? {
            let conn = Tracked {
                protocol: entry.protocol,
                src: entry.src,
                dst: entry.dst,
                dst_port: entry.dst_port,
            };
            if denied(cluster, local, conn) {
                nft.delete_conntrack_entry(&entry)?;
                deleted += 1;
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_policy::{parse_documents, Document, Pod};

    fn pod(ns: &str, name: &str, ip: &str) -> Pod {
        crate::policy::test_pod(ns, name, ip)
    }

    fn tcp(src: &str, dst: &str, port: u16) -> Tracked {
        Tracked {
            protocol: 6,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            dst_port: Some(port),
        }
    }

    #[test]
    fn only_local_connections_the_policies_deny_are_picked() {
        let yaml = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: same, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{podSelector: {}}]\n";
        let policies = parse_documents(yaml)
            .unwrap()
            .into_iter()
            .map(|d| match d {
                Document::NetworkPolicy(p) => *p,
                _ => unreachable!(),
            })
            .collect();
        let cluster = Cluster {
            namespaces: Default::default(),
            pods: vec![
                pod("x", "a", "198.18.1.2"),
                pod("x", "b", "198.18.2.2"),
                pod("z", "a", "198.18.1.3"),
                pod("z", "b", "198.18.2.3"),
            ],
            policies,
        };
        // This node runs x/a and z/a.
        let local: BTreeSet<IpAddr> = ["198.18.1.2", "198.18.1.3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        // Into x/a from z: denied, whether z's pod is local or not.
        assert!(denied(
            &cluster,
            &local,
            tcp("198.18.1.3", "198.18.1.2", 80)
        ));
        assert!(denied(
            &cluster,
            &local,
            tcp("198.18.2.3", "198.18.1.2", 80)
        ));
        // Within x, and out of x/a (its replies from z are the same entry): allowed.
        assert!(!denied(
            &cluster,
            &local,
            tcp("198.18.2.2", "198.18.1.2", 80)
        ));
        assert!(!denied(
            &cluster,
            &local,
            tcp("198.18.1.2", "198.18.2.3", 80)
        ));
        // Into x/b on the other node: that node's to stop.
        assert!(!denied(
            &cluster,
            &local,
            tcp("198.18.2.3", "198.18.2.2", 80)
        ));
        // ICMP has no port: left alone.
        let ping = Tracked {
            protocol: 1,
            dst_port: None,
            ..tcp("198.18.1.3", "198.18.1.2", 0)
        };
        assert!(!denied(&cluster, &local, ping));
    }
}
