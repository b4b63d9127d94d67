//! Readers: from a name, comment or file content back to the attachment (or network) that
//! owns it. `rcni doctor` judges a node with these; the plugins' DEL and GC match with
//! [`crate::AttachmentId`]'s own names.

use crate::names::HOST_LOCAL_LINE_BREAK;
use crate::AttachmentId;

/// The tag ([`AttachmentId::prefix`], `<16 hex>-<16 hex>`) a comment or alias starts with.
pub fn tag_prefix(text: &str) -> Option<&str> {
    let p = text.get(..33)?;
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    (p.as_bytes()[16] == b'-' && hex(&p[..16]) && hex(&p[17..])).then_some(p)
}

/// True when `text` starts with a tag of `network` ([`AttachmentId::network_prefix`]).
pub fn is_of_network(text: &str, network: &str) -> bool {
    text.starts_with(&AttachmentId::network_prefix(network))
}

/// The network named in a tag comment (`<prefix>, net: <name>, if: ..., id: ...`); `None`
/// when the description is cut before it ends.
pub fn network_in_comment(comment: &str) -> Option<String> {
    let rest = comment.split(", net: ").nth(1)?;
    Some(rest.split(", if: ").next()?.to_string())
}

/// True for a temporary host veth name of `network` ([`AttachmentId::temp_link_name`]): the
/// network's prefix, then nine lowercase hex digits.
pub fn is_temp_link_of(name: &str, network: &str) -> bool {
    name.strip_prefix(&AttachmentId::temp_link_network_prefix(network))
        .is_some_and(|rest| rest.len() == 9 && is_lower_hex(rest))
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// True for a name shaped like a temporary host veth name of some network (`rc` + 13).
pub fn looks_like_temp_link(name: &str) -> bool {
    name.len() == 15 && name.starts_with("rc")
}

/// `CNI-` and exactly 24 lowercase hex digits: a Go ipMasq chain
/// ([`AttachmentId::go_masq_chain`]).
pub fn is_go_masq_chain(name: &str) -> bool {
    name.strip_prefix("CNI-")
        .is_some_and(|h| h.len() == 24 && is_lower_hex(h))
}

/// A file name shaped like [`crate::names::backup_file_name`]. Container ID and interface
/// name may both contain `_`, so a name is matched against the names live attachments would
/// have, never split.
pub fn looks_like_backup_file(name: &str) -> bool {
    name.ends_with(".json") && name.contains('_')
}

/// Who a host-local lease file names ([`crate::names::host_local_lease`]): the container ID
/// and, unless the file is of a version before the interface name was recorded, the
/// interface. Surrounding whitespace is ignored, as Go compares it.
pub fn host_local_lease(content: &str) -> (&str, Option<&str>) {
    let content = content.trim();
    match content.split_once(HOST_LOCAL_LINE_BREAK) {
        Some((id, ifname)) => (id, Some(ifname)),
        None => (content, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_is_read_back_into_its_tag_and_network() {
        let a = AttachmentId::new("n", "c", "eth0");
        assert_eq!(tag_prefix(&a.comment()), Some(a.prefix().as_str()));
        assert_eq!(network_in_comment(&a.comment()).as_deref(), Some("n"));
        assert!(is_of_network(&a.comment(), "n"));
        assert!(!is_of_network(&a.comment(), "m"));
        assert_eq!(
            tag_prefix("someone else's comment, long enough to cut"),
            None
        );
        assert_eq!(tag_prefix("short"), None);
    }

    #[test]
    fn temp_links_and_go_chains_are_recognised() {
        let a = AttachmentId::new("n", "c", "eth0");
        assert!(is_temp_link_of(&a.temp_link_name(), "n"));
        assert!(looks_like_temp_link(&a.temp_link_name()));
        assert!(!is_temp_link_of(&a.temp_link_name(), "other"));
        assert!(is_go_masq_chain(&a.go_masq_chain()));
        assert!(!is_go_masq_chain("CNI-DN-ffee140d57bae23f4cbb0"));
        assert!(!is_go_masq_chain("CNI-HOSTPORT-DNAT"));
    }

    #[test]
    fn host_local_leases_of_both_formats_are_read() {
        let a = AttachmentId::new("n", "c_1", "eth0");
        let written = crate::names::host_local_lease(&a.container_id, &a.ifname);
        assert_eq!(host_local_lease(&written), ("c_1", Some("eth0")));
        assert_eq!(host_local_lease(" c_1\n"), ("c_1", None));
        assert!(looks_like_backup_file(&crate::names::backup_file_name(
            &a.container_id,
            &a.ifname
        )));
        assert!(!looks_like_backup_file("lease-00.json"));
    }
}
