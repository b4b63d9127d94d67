//! A wanted peer: a pod-selecting peer some policy with chains on this node uses. It knows
//! the namespaces it covers and its member addresses (each counted once per member pod
//! having it, so that two pods sharing an address for a moment do not remove it early); its
//! address sets in the kernel are exactly those addresses, per family.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;

use super::super::objects::Objects;
use super::super::peer_set_name;
use super::NsState;
use crate::compact::LabelSet;
use crate::selector::{matches, Labels};

pub(super) struct PeerState {
    peer: NetworkPolicyPeer,
    /// Its sets' names, IPv4 then IPv6.
    pub names: [String; 2],
    /// The policies with chains that use it.
    pub users: BTreeSet<String>,
    /// The namespaces whose pods it may select.
    pub covered: BTreeSet<String>,
    /// Member addresses, each with the number of member pods having it.
    pub ips: HashMap<IpAddr, u32>,
    /// Member addresses per family (IPv4, IPv6).
    pub families: [usize; 2],
}

impl PeerState {
    /// Peer `peer` (described as `what`); no members yet.
    pub fn new(what: &str, peer: NetworkPolicyPeer) -> Self {
        PeerState {
            peer,
            names: [peer_set_name(what, false), peer_set_name(what, true)],
            users: BTreeSet::new(),
            covered: BTreeSet::new(),
            ips: HashMap::new(),
            families: [0, 0],
        }
    }

    /// The namespaces it covers among `namespaces` (a peer without a namespace selector
    /// covers its policy's `namespace`, known or not).
    pub fn coverage(&self, namespace: &str, namespaces: &HashMap<String, NsState>) -> Vec<String> {
        if self.peer.namespace_selector.is_none() {
            return vec![namespace.to_string()];
        }
        namespaces
            .iter()
            .filter(|(_, ns)| self.covers_labels(&ns.labels) == Some(true))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether it covers a namespace labelled `labels`; `None` for a peer without a
    /// namespace selector (it covers its policy's namespace only, whatever the labels).
    pub fn covers_labels(&self, labels: &Labels) -> Option<bool> {
        let selector = self.peer.namespace_selector.as_ref()?;
        // Selectors are checked when their policy is taken.
        Some(matches(selector, labels).unwrap_or(false))
    }

    /// Whether it selects a pod labelled `labels` in a namespace it covers.
    pub fn selects_labels(&self, labels: &LabelSet) -> bool {
        match &self.peer.pod_selector {
            None => true,
            Some(selector) => matches(selector, labels).unwrap_or(false),
        }
    }

    /// Counts a member pod's addresses in (`add`) or out, noting each address that joins or
    /// leaves in `objects`; whether an address family gained its first or lost its last
    /// member (its set appears or goes).
    pub fn count(&mut self, ips: &[IpAddr], add: bool, objects: &mut Objects) -> bool {
        let mut families_changed = false;
        for ip in ips {
            let family = usize::from(ip.is_ipv6());
            let name = &self.names[family];
            if add {
                let n = self.ips.entry(*ip).or_default();
                *n += 1;
                if *n == 1 {
                    objects.element(name, *ip, true);
                    self.families[family] += 1;
                    families_changed |= self.families[family] == 1;
                }
            } else if let Some(n) = self.ips.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    self.ips.remove(ip);
                    objects.element(name, *ip, false);
                    self.families[family] -= 1;
                    families_changed |= self.families[family] == 0;
                }
            }
        }
        families_changed
    }
}

/// The members of the set named `set` among `peers`, sorted.
pub(super) fn members_of(peers: &HashMap<String, PeerState>, set: &str) -> Vec<IpAddr> {
    let Some((peer, family)) = peers.values().find_map(|p| {
        let family = p.names.iter().position(|n| n == set)?;
        Some((p, family))
    }) else {
        return Vec::new();
    };
    let mut out: Vec<IpAddr> = peer
        .ips
        .keys()
        .filter(|ip| usize::from(ip.is_ipv6()) == family)
        .copied()
        .collect();
    out.sort();
    out
}
