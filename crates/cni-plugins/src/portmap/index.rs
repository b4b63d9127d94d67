//! How an attachment finds its own elements: the index set `rcni_index` of each family's
//! `cni_hostport` table (a hash set, `type ipv6_addr . mark`), keyed by
//! `<attachment id> . <slot>`. The attachment id is the 16 bytes its [`AttachmentId`]
//! prefix spells in hex (a hash of the network, then of `ifname:containerID`), so the key
//! itself says whose it is. Slot 0 is the header, comment
//! `<prefix> n=<slots> rules=<0|1>, net: .., if: .., id: ..`; slots 1..=n each name one
//! element key the attachment owns (`<prefix> hp tcp 8080, net: ..`). `rules=1` says the
//! attachment may also have per-mapping rules (see [`super::rules`]), so only then does DEL
//! list the rule chains.
//!
//! Reading an attachment's index is two requests whatever the set holds: a lookup of the
//! header, then one GETSETELEM naming its slots (the kernel looks each key up; 256 keys per
//! request). Adding or deleting elements of a hash set costs the same whatever else it
//! holds, unlike the per-attachment index chains this replaces: creating or deleting a
//! chain costs more the more chains the table has. Those chains (named by the tag prefix,
//! with one expression-less rule per key, comment `<prefix> <key>, net: ..`) are still read
//! and removed when no header exists, so DEL and GC clean up after the previous layout.

use cni_nft::{concat, fit_comment, Batch, ConcatElement, ConcatSet, Family, Nft, SetType};

use super::elements::{self, Entry, Key};
use super::rules::TABLE;
use cni_attribution::AttachmentId;

pub const INDEX_SET: &str = "rcni_index";

pub fn index_set(f: Family) -> ConcatSet {
    ConcatSet::set(f, TABLE, INDEX_SET, &[SetType::Ipv6Addr, SetType::Mark])
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An attachment's id in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexId([u8; 16]);

impl IndexId {
    /// The id of `<hash16(net)>-<hash16(ifname:cid)>`.
    pub fn from_prefix(prefix: &str) -> Option<IndexId> {
        let (net, att) = prefix.split_once('-')?;
        let net: [u8; 8] = hex_bytes(net)?;
        let att: [u8; 8] = hex_bytes(att)?;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&net);
        id[8..].copy_from_slice(&att);
        Some(IndexId(id))
    }

    pub fn of(tag: &AttachmentId) -> Result<IndexId, cni_nft::Error> {
        let prefix = tag.prefix();
        Self::from_prefix(&prefix)
            .ok_or_else(|| cni_nft::Error::Invalid(format!("attachment prefix {prefix}")))
    }

    /// The first 8 bytes of the ids of `network`'s attachments.
    pub fn network_bytes(network: &str) -> Option<[u8; 8]> {
        let prefix = AttachmentId::network_prefix(network);
        hex_bytes(prefix.strip_suffix('-')?)
    }

    pub fn network(&self) -> &[u8] {
        &self.0[..8]
    }

    /// The tag prefix it comes from (also the name of a previous layout's index chain).
    pub fn prefix(&self) -> String {
        format!("{}-{}", hex(&self.0[..8]), hex(&self.0[8..]))
    }

    fn key(&self, slot: u32) -> Vec<u8> {
        concat(&[&self.0, &slot.to_ne_bytes()])
    }

    /// The id in an index element's key.
    pub fn of_key(key: &[u8]) -> Option<IndexId> {
        key.get(..16)?.try_into().ok().map(IndexId)
    }
}

/// What an attachment's index lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The element keys it owns.
    pub keys: Vec<Key>,
    /// Whether it may also have per-mapping rules.
    pub rules: bool,
    /// Index elements present (header included); 0 for a previous layout's chain.
    slots: u32,
    /// Read from a previous layout's index chain.
    legacy: bool,
}

/// The text after `<prefix> ` in an index comment, up to the description.
fn line<'a>(comment: Option<&'a str>, prefix: &str) -> Option<&'a str> {
    let rest = comment?.strip_prefix(prefix)?.trim_start();
    rest.split(',').next()
}

fn key_in(comment: Option<&str>, prefix: &str, f: Family) -> Option<Key> {
    line(comment, prefix)
        .and_then(Key::parse)
        .filter(|k| k.in_family(f))
}

/// `n=<slots> rules=<0|1>` read back.
fn header_of(comment: Option<&str>, prefix: &str) -> Option<(u32, bool)> {
    let text = line(comment, prefix)?;
    let (n, rules) = text.split_once(' ')?;
    let n = n.strip_prefix("n=")?.parse().ok()?;
    let rules = match rules {
        "rules=0" => false,
        "rules=1" => true,
        _ => return None,
    };
    Some((n, rules))
}

/// The attachment's index in family `f`; `None` when it has none (in either layout).
pub fn read(nft: &mut Nft, f: Family, id: IndexId) -> Result<Option<Index>, cni_nft::Error> {
    let set = index_set(f);
    let prefix = id.prefix();
    let Some(header) = nft.get_concat_element(&set, &id.key(0), None)? else {
        return read_legacy(nft, f, &prefix);
    };
    let (n, rules) = header_of(header.comment.as_deref(), &prefix).unwrap_or_else(|| {
        log::warn!("portmap: unreadable index header of {prefix}: {header:?}");
        (0, true)
    });
    let slots: Vec<Vec<u8>> = (1..=n).map(|s| id.key(s)).collect();
    let found = nft.get_concat_elements(&set, &slots)?;
    let mut keys = Vec::new();
    for el in &found {
        match key_in(el.comment.as_deref(), &prefix, f) {
            Some(k) => keys.push(k),
            None => log::warn!("portmap: ignoring unexpected index element of {prefix}: {el:?}"),
        }
    }
    Ok(Some(Index {
        keys,
        rules,
        slots: found.len() as u32 + 1,
        legacy: false,
    }))
}

/// As [`read`], and an empty index chain of the previous layout (an old DEL flushed it but
/// did not get to delete it) counts as an index without keys, so that DEL and GC remove it.
/// Costs one request more when the attachment has no index; ADD and CHECK use [`read`].
pub fn read_for_removal(
    nft: &mut Nft,
    f: Family,
    id: IndexId,
) -> Result<Option<Index>, cni_nft::Error> {
    if let Some(index) = read(nft, f, id)? {
        return Ok(Some(index));
    }
    if !nft.chain_exists(f, TABLE, &id.prefix())? {
        return Ok(None);
    }
    Ok(Some(Index {
        keys: Vec::new(),
        rules: true,
        slots: 0,
        legacy: true,
    }))
}

/// A previous layout's index chain named `prefix` (one dump of that chain only).
fn read_legacy(nft: &mut Nft, f: Family, prefix: &str) -> Result<Option<Index>, cni_nft::Error> {
    let rules = nft.list_rules(f, TABLE, prefix)?;
    if rules.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::new();
    for r in rules {
        match key_in(r.comment.as_deref(), prefix, f) {
            Some(k) => keys.push(k),
            None => log::warn!("portmap: ignoring unexpected rule in index chain {prefix}: {r:?}"),
        }
    }
    Ok(Some(Index {
        keys,
        rules: true,
        slots: 0,
        legacy: true,
    }))
}

/// Adds to `b` the removal of the elements `index` lists and of the index itself.
pub fn remove(b: &mut Batch, f: Family, id: IndexId, index: &Index) -> Result<(), cni_nft::Error> {
    for (set, elems) in elements::by_set(f, index.keys.iter().map(|k| (k.clone(), k.element()))) {
        b.delete_concat_elements(&set, &elems)?;
    }
    if index.legacy {
        let chain = id.prefix();
        b.flush_chain(f, TABLE, &chain)?;
        return b.delete_chain(f, TABLE, &chain);
    }
    let slots: Vec<ConcatElement> = (0..index.slots)
        .map(|s| ConcatElement::new(id.key(s)))
        .collect();
    if slots.is_empty() {
        return Ok(());
    }
    b.delete_concat_elements(&index_set(f), &slots)
}

/// Adds to `b` the attachment's index (exclusively): its header, with `rules` (whether
/// per-mapping rules may follow), and one slot per entry.
pub fn add(
    b: &mut Batch,
    f: Family,
    tag: &AttachmentId,
    entries: &[Entry],
    rules: bool,
) -> Result<(), cni_nft::Error> {
    let id = IndexId::of(tag)?;
    let prefix = id.prefix();
    let comment = tag.comment();
    // `<prefix> <line>, net: .., if: .., id: ..`: the line first, so a cut keeps it.
    let description = comment.strip_prefix(prefix.as_str()).unwrap_or_default();
    let n = entries.len() as u32;
    let mut slots = vec![ConcatElement::new(id.key(0)).comment(&fit_comment(&format!(
        "{prefix} n={n} rules={}{description}",
        u8::from(rules)
    )))];
    for (slot, e) in (1..).zip(entries) {
        slots.push(
            ConcatElement::new(id.key(slot)).comment(&fit_comment(&format!(
                "{prefix} {}{description}",
                e.key.text()
            ))),
        );
    }
    b.add_table(f, TABLE)?;
    b.add_concat_set(&index_set(f))?;
    b.add_concat_elements(&index_set(f), &slots, true)
}

/// The ids of every attachment of the network whose id starts with `network` in family
/// `f`'s index (one dump of the set; for GC).
pub fn ids_in(nft: &mut Nft, f: Family, network: &[u8]) -> Result<Vec<IndexId>, cni_nft::Error> {
    let mut out: Vec<IndexId> = Vec::new();
    for el in nft.list_concat_elements(&index_set(f))? {
        if let Some(id) = IndexId::of_key(&el.key).filter(|id| id.network() == network) {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

/// The previous layout's index chains of the network (named by a tag prefix).
pub fn legacy_chains(
    nft: &mut Nft,
    f: Family,
    network: &str,
) -> Result<Vec<IndexId>, cni_nft::Error> {
    let net_prefix = AttachmentId::network_prefix(network);
    Ok(nft
        .list_chains(f, TABLE)?
        .into_iter()
        .filter(|c| !c.is_base && c.name.starts_with(&net_prefix))
        .filter_map(|c| IndexId::from_prefix(&c.name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_prefixes_and_keys() {
        let tag = AttachmentId::new("net", "ctr", "eth0");
        let id = IndexId::of(&tag).unwrap();
        assert_eq!(id.prefix(), tag.prefix());
        assert_eq!(IndexId::of_key(&id.key(7)), Some(id));
        assert_eq!(id.key(1).len(), index_set(Family::Ip).key_len());
        assert_eq!(
            IndexId::network_bytes("net").unwrap(),
            id.network(),
            "the network part"
        );
        assert_eq!(IndexId::from_prefix("xyz-123"), None);
    }

    #[test]
    fn header_and_key_lines_read_back() {
        let p = "0123456789abcdef-0123456789abcdef";
        let c = format!("{p} n=3 rules=1, net: n, if: eth0, id: c");
        assert_eq!(header_of(Some(&c), p), Some((3, true)));
        assert_eq!(header_of(Some(&format!("{p} n=3")), p), None);
        let c = format!("{p} hp tcp 8080, net: n, if: eth0, id: c");
        assert_eq!(
            key_in(Some(&c), p, Family::Ip),
            Some(Key::Port {
                proto: cni_nft::L4Proto::Tcp,
                port: 8080
            })
        );
        let c = format!("{p} hip fd00::1 tcp 1");
        assert_eq!(key_in(Some(&c), p, Family::Ip), None);
    }
}
