//! [`AttachmentId`]: the identity of one attachment, and everything derived from it that names
//! a kernel object or a file.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::comment::fit_comment;
use crate::hash::{hash_hex, sha512_hex};

/// One attachment: the network it belongs to, the container, and the interface name inside
/// the container. Every object a plugin makes for an attachment is named or tagged from it.
///
/// Serialized (camelCase, in this field order) as the dhcp daemon's lease records hold it;
/// GC's valid-attachment list has its own form (see `cni_types::gc`), which omits the network
/// because the request's network is the list's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentId {
    pub container_id: String,
    pub network: String,
    pub ifname: String,
}

impl AttachmentId {
    pub fn new(
        network: impl Into<String>,
        container_id: impl Into<String>,
        ifname: impl Into<String>,
    ) -> Self {
        AttachmentId {
            container_id: container_id.into(),
            network: network.into(),
            ifname: ifname.into(),
        }
    }

    /// `<hash16(net)>-`: every tag of the network starts with it (Go's nftables backend).
    pub fn network_prefix(network: &str) -> String {
        format!("{}-", hash_hex(network, 16))
    }

    /// `ifname:cid`, the text the attachment part of the tag hashes (Go's scheme).
    fn within_network(&self) -> String {
        format!("{}:{}", self.ifname, self.container_id)
    }

    /// `<hash16(net)>-<hash16(ifname:cid)>`, 33 bytes: the tag every rule comment, veth alias,
    /// tuning backup's `rcniOwner` and state-file name of this attachment starts with.
    pub fn prefix(&self) -> String {
        format!(
            "{}{}",
            Self::network_prefix(&self.network),
            hash_hex(&self.within_network(), 16)
        )
    }

    /// True when `comment` (a rule comment, an alias, a recorded owner) is this attachment's.
    pub fn owns(&self, comment: &str) -> bool {
        comment.starts_with(&self.prefix())
    }

    /// The full comment: the prefix, then a readable description, cut to 128 bytes.
    pub fn comment(&self) -> String {
        let clean = |s: &str| s.replace('"', "");
        fit_comment(&format!(
            "{}, net: {}, if: {}, id: {}",
            self.prefix(),
            clean(&self.network),
            clean(&self.ifname),
            clean(&self.container_id)
        ))
    }

    /// `rc<hash4(net)>`: the start of every temporary host link name of the network.
    pub fn temp_link_network_prefix(network: &str) -> String {
        format!("rc{}", hash_hex(network, 4))
    }

    /// `rc<hash4(net)><hash9(ifname:cid)>` (15 bytes, the longest interface name): the name
    /// a host veth has from its creation until it is renamed and tagged with its alias. The
    /// kernel ignores an alias given at creation, so this name is what ties a veth to its
    /// attachment when a kill lands between the two requests.
    pub fn temp_link_name(&self) -> String {
        format!(
            "{}{}",
            Self::temp_link_network_prefix(&self.network),
            hash_hex(&self.within_network(), 9)
        )
    }

    /// `rcni` and 11 hex digits of a hash of [`AttachmentId::prefix`] (15 bytes): the
    /// temporary name of a sub-link (macvlan, ipvlan, vlan, dummy) inside the container, so a
    /// killed ADD's leftover is still attributable.
    pub fn sublink_temp_name(&self) -> String {
        format!("rcni{}", hash_hex(&self.prefix(), 11))
    }

    /// `<prefix>.json`: a sub-link or bandwidth record (rcni only; Go keeps no such state).
    pub fn record_file_name(&self) -> String {
        format!("{}.json", self.prefix())
    }

    /// `lease-<hash>.json`: the dhcp daemon's record of the attachment's lease. A hash (16
    /// bytes of SHA-256 over the three parts, each followed by a NUL), since container IDs and
    /// network names may hold characters a file name cannot; the content names the attachment.
    pub fn dhcp_lease_file_name(&self) -> String {
        let mut h = Sha256::new();
        for part in [&self.container_id, &self.network, &self.ifname] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let hex: String = h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("lease-{hex}.json")
    }

    /// Hex SHA-512 over network name and container ID: the Go plugins name an attachment's
    /// iptables chains with its first digits (`CNI-` + 24 for ipMasq, `CNI-DN-` + 21 for
    /// portmap; `utils.FormatChainName`).
    pub fn go_chain_hash(&self) -> String {
        sha512_hex(&format!("{}{}", self.network, self.container_id))
    }

    /// The Go plugins' ipMasq chain of the attachment: `CNI-` and 24 hex digits.
    pub fn go_masq_chain(&self) -> String {
        format!("CNI-{}", &self.go_chain_hash()[..24])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_go_scheme() {
        let t = AttachmentId::new("podman", "abc", "eth0");
        let p = t.prefix();
        assert_eq!(p.len(), 33);
        assert!(p.starts_with(&AttachmentId::network_prefix("podman")));
        assert!(t.comment().starts_with(&p));
        assert!(t.comment().ends_with("net: podman, if: eth0, id: abc"));
        assert!(t.owns(&t.comment()));
        assert!(!AttachmentId::new("podman", "abc", "eth1").owns(&t.comment()));
        assert_eq!(t.temp_link_name().len(), 15);
        assert!(t
            .temp_link_name()
            .starts_with(&AttachmentId::temp_link_network_prefix("podman")));
        assert_eq!(t.sublink_temp_name().len(), 15);
    }

    #[test]
    fn names_on_nodes_are_unchanged() {
        // Objects on nodes carry these names: they must never change.
        let t = AttachmentId::new("tqnet", "tqcid", "eth0");
        // Go 1.1.1's bridge made this chain for network "tqnet", container "tqcid".
        assert_eq!(t.go_masq_chain(), "CNI-ffee140d57bae23f4cbb0442");
        assert_eq!(t.prefix(), "713a32d57ebe3447-d0448488fff2f051");
        assert_eq!(t.temp_link_name(), "rc713ad0448488f");
        assert_eq!(t.sublink_temp_name(), "rcniad1cded87c2");
        assert_eq!(
            t.dhcp_lease_file_name(),
            "lease-6600ca937eda4ab6730c6a776fdbd69a.json"
        );
        assert_eq!(
            crate::names::backup_file_name(&t.container_id, &t.ifname),
            "tqcid_eth0.json"
        );
        assert_eq!(
            crate::names::host_local_lease(" tqcid", "eth0"),
            "tqcid\r\neth0"
        );
        assert_eq!(
            crate::names::spoofcheck::names(&t.container_id, &t.ifname),
            (
                "cni-br-iface-tqcid-eth0".to_string(),
                "cni-br-iface-tqcid-eth0-mac".to_string(),
                "macspoofchk-tqcid-eth0".to_string()
            )
        );
    }

    #[test]
    fn long_comment_is_cut_but_keeps_the_prefix() {
        let t = AttachmentId::new("n\"".repeat(80), "c".repeat(64), "eth0");
        let c = t.comment();
        assert_eq!(c.len(), 128);
        assert!(c.starts_with(&t.prefix()));
        assert!(!c.contains('"'));
    }

    #[test]
    fn serialized_as_the_dhcp_lease_records_hold_it() {
        let t = AttachmentId::new("n", "c", "eth0");
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"containerId":"c","network":"n","ifname":"eth0"}"#
        );
    }
}
