//! Rule ownership for the nftables-based features (ipMasq, portmap, firewall): every rule an
//! attachment adds carries a comment that starts with a hash of the network and a hash of
//! `ifname:containerID`, the scheme of the Go plugins' nftables ipMasq backend
//! (`<hash16(net)>-<hash16(ifname:cid)>, net: <net>, if: <ifname>, id: <cid>`).
//!
//! DEL deletes by the attachment prefix and GC by the network prefix, so neither needs the
//! addresses, the netns or the runtime config the ADD had, and a truncated comment still
//! matches. Also the shared error mapping and the client opening for these features.

use sha2::{Digest, Sha512};

use cni_nft::{fit_comment, Error as NftError, Family, Nft, RuleInfo};
use cni_types::{CniError, GcAttachment};

/// The first `len` hex digits of SHA-512(`text`) (Go's `utils.MustFormatHashWithPrefix`).
fn hash_hex(text: &str, len: usize) -> String {
    let digest = Sha512::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..len].to_string()
}

/// Identifies one attachment (network, container, interface) in rule comments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentTag {
    network: String,
    container_id: String,
    ifname: String,
}

impl AttachmentTag {
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Self {
        AttachmentTag {
            network: network.to_string(),
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
        }
    }

    /// `<hash16(net)>-`: every rule of the network starts with it.
    pub fn network_prefix(network: &str) -> String {
        format!("{}-", hash_hex(network, 16))
    }

    /// `<hash16(net)>-<hash16(ifname:cid)>`: every rule of this attachment starts with it.
    pub fn prefix(&self) -> String {
        format!(
            "{}{}",
            Self::network_prefix(&self.network),
            hash_hex(&format!("{}:{}", self.ifname, self.container_id), 16)
        )
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
            hash_hex(&format!("{}:{}", self.ifname, self.container_id), 9)
        )
    }

    /// A link name (15 bytes, the kernel's limit) derived from the attachment: `rcni` and 11
    /// hex digits of a hash of [`AttachmentTag::prefix`], for sub-links (macvlan, ipvlan,
    /// vlan, dummy) that exist only for a moment under a temporary name inside the container,
    /// so a killed ADD's leftover is still attributable.
    pub fn sublink_temp_name(&self) -> String {
        format!("rcni{}", hash_hex(&self.prefix(), 11))
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

    /// True if `rule` belongs to this attachment.
    pub fn owns(&self, rule: &RuleInfo) -> bool {
        let prefix = self.prefix();
        rule.comment
            .as_deref()
            .is_some_and(|c| c.starts_with(&prefix))
    }
}

/// Selects the rules of `network` whose attachment is not in `valid` (for GC).
pub fn stale_in_network<'a>(
    network: &str,
    valid: &'a [GcAttachment],
) -> impl Fn(&RuleInfo) -> bool + 'a {
    let net_prefix = AttachmentTag::network_prefix(network);
    let keep: Vec<String> = valid
        .iter()
        .map(|a| AttachmentTag::new(network, &a.container_id, &a.ifname).prefix())
        .collect();
    move |rule: &RuleInfo| {
        let Some(c) = rule.comment.as_deref() else {
            return false;
        };
        c.starts_with(&net_prefix) && !keep.iter().any(|k| c.starts_with(k.as_str()))
    }
}

/// How often an nftables operation is attempted when it hits a transient failure.
const ATTEMPTS: u32 = 20;

/// Failures that another process's concurrent change causes and that a new attempt (list
/// again, build again) clears: a rule listed for deletion vanished (ENOENT), the kernel was
/// busy, or a listing kept being interrupted by commits (cni-nft reports that as a decode
/// error after its own retries).
/// Concurrency failures, plus "not found": a rule or chain another process just removed.
fn is_transient(e: &NftError) -> bool {
    e.is_transient() || e.is_not_found()
}

/// Runs `op` (which must list and build afresh on each call) until it succeeds, fails for a
/// lasting reason, or [`ATTEMPTS`] runs out; waits a little, with jitter, between attempts
/// so concurrent plugin processes spread out.
pub fn retry_transient<T>(mut op: impl FnMut() -> Result<T, NftError>) -> Result<T, NftError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match op() {
            Err(e) if is_transient(&e) && attempt < ATTEMPTS => {
                let jitter = super::random::bytes::<1>()
                    .map(|b| u64::from(b[0]))
                    .unwrap_or(0);
                let ms = u64::from(attempt.min(10)) * 5 + jitter % 20;
                log::debug!("nftables: transient failure ({e}), retrying in {ms} ms");
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            other => return other,
        }
    }
}

/// The rules of `tag`'s attachment in `chains` of one table; a missing table or chain has none.
pub fn owned_rules(
    nft: &mut Nft,
    family: Family,
    table: &str,
    chains: &[&str],
    tag: &AttachmentTag,
) -> Result<Vec<RuleInfo>, NftError> {
    let mut out = Vec::new();
    for chain in chains {
        out.extend(
            nft.list_rules(family, table, chain)?
                .into_iter()
                .filter(|r| tag.owns(r)),
        );
    }
    Ok(out)
}

/// An nftables failure as a CNI error (code 999, prefixed with what was being done).
pub fn nft_error(context: &str, e: NftError) -> CniError {
    CniError::internal(format!("{context}: {e}"))
}

/// Opens the nf_tables client in the plugin's own (host) namespace.
pub fn open_host(context: &str) -> Result<Nft, CniError> {
    Nft::new().map_err(|e| nft_error(context, e))
}

/// Deletes, in each table, the rules of `chains` selected by `select`; missing tables and
/// chains are fine. Returns how many rules were deleted.
pub fn delete_selected(
    nft: &mut Nft,
    tables: &[(Family, &str)],
    chains: &[&str],
    select: &dyn Fn(&RuleInfo) -> bool,
) -> Result<usize, NftError> {
    let mut total = 0;
    for (family, table) in tables {
        total += retry_transient(|| {
            if !nft.table_exists(*family, table)? {
                return Ok(0);
            }
            nft.delete_rules_where(*family, table, chains, select)
        })?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_go_scheme() {
        // sha512("") starts with cf83e1357eefb8bd.
        assert_eq!(hash_hex("", 16), "cf83e1357eefb8bd");
        let t = AttachmentTag::new("podman", "abc", "eth0");
        let p = t.prefix();
        assert_eq!(p.len(), 33);
        assert!(p.starts_with(&AttachmentTag::network_prefix("podman")));
        assert!(t.comment().starts_with(&p));
        assert!(t.comment().ends_with("net: podman, if: eth0, id: abc"));
    }

    #[test]
    fn long_comment_is_cut_but_keeps_the_prefix() {
        let t = AttachmentTag::new(&"n\"".repeat(80), &"c".repeat(64), "eth0");
        let c = t.comment();
        assert_eq!(c.len(), 128);
        assert!(c.starts_with(&t.prefix()));
        assert!(!c.contains('"'));
    }

    #[test]
    fn gc_selects_only_stale_rules_of_the_network() {
        let rule = |tag: &AttachmentTag| RuleInfo {
            table: "t".into(),
            chain: "c".into(),
            handle: 1,
            comment: Some(tag.comment()),
        };
        let valid = vec![GcAttachment {
            container_id: "keep".into(),
            ifname: "eth0".into(),
        }];
        let select = stale_in_network("n1", &valid);
        assert!(!select(&rule(&AttachmentTag::new("n1", "keep", "eth0"))));
        assert!(select(&rule(&AttachmentTag::new("n1", "gone", "eth0"))));
        assert!(select(&rule(&AttachmentTag::new("n1", "keep", "eth1"))));
        assert!(!select(&rule(&AttachmentTag::new("n2", "gone", "eth0"))));
        let bare = RuleInfo {
            comment: None,
            ..rule(&AttachmentTag::new("n1", "x", "y"))
        };
        assert!(!select(&bare));
    }
}
