//! Rule ownership for the nftables-based features (ipMasq, portmap, firewall): every rule an
//! attachment adds carries its [`AttachmentId::comment`] (the scheme of the Go plugins'
//! nftables ipMasq backend, `<hash16(net)>-<hash16(ifname:cid)>, net: ..., if: ..., id: ...`).
//!
//! DEL deletes by the attachment prefix and GC by the network prefix, so neither needs the
//! addresses, the netns or the runtime config the ADD had, and a truncated comment still
//! matches. Also the shared error mapping and the client opening for these features.

use cni_attribution::{recognise, AttachmentId};
use cni_nft::{Error as NftError, Family, Nft, RuleInfo};
use cni_types::CniError;

/// True if `rule`'s comment is `owner`'s.
pub fn owns_rule(owner: &AttachmentId, rule: &RuleInfo) -> bool {
    rule.comment.as_deref().is_some_and(|c| owner.owns(c))
}

/// Selects the rules of `network` whose attachment is not in `valid` (for GC).
pub fn stale_in_network<'a>(
    network: &str,
    valid: &'a [AttachmentId],
) -> impl Fn(&RuleInfo) -> bool + 'a {
    let network = network.to_string();
    move |rule: &RuleInfo| {
        rule.comment.as_deref().is_some_and(|c| {
            recognise::is_of_network(c, &network) && !valid.iter().any(|a| a.owns(c))
        })
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
    tag: &AttachmentId,
) -> Result<Vec<RuleInfo>, NftError> {
    let mut out = Vec::new();
    for chain in chains {
        out.extend(
            nft.list_rules(family, table, chain)?
                .into_iter()
                .filter(|r| owns_rule(tag, r)),
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
    fn gc_selects_only_stale_rules_of_the_network() {
        let rule = |tag: &AttachmentId| RuleInfo {
            table: "t".into(),
            chain: "c".into(),
            handle: 1,
            comment: Some(tag.comment()),
        };
        let valid = vec![AttachmentId::new("n1", "keep", "eth0")];
        let select = stale_in_network("n1", &valid);
        assert!(!select(&rule(&AttachmentId::new("n1", "keep", "eth0"))));
        assert!(select(&rule(&AttachmentId::new("n1", "gone", "eth0"))));
        assert!(select(&rule(&AttachmentId::new("n1", "keep", "eth1"))));
        assert!(!select(&rule(&AttachmentId::new("n2", "gone", "eth0"))));
        let bare = RuleInfo {
            comment: None,
            ..rule(&AttachmentId::new("n1", "x", "y"))
        };
        assert!(!select(&bare));
    }
}
