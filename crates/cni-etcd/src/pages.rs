//! Reading a prefix of any size: range requests of a bounded number of keys, all at the
//! revision of the first one, each continuing after the last key of the one before.
//!
//! One range request answers with every key at once, and the gRPC client refuses a reply over
//! 4 MiB: a prefix of 150,000 pod records (30 MiB) cannot be read that way at all. Pages keep
//! each reply near [`PAGE_BYTES`], so neither side holds the whole prefix in one message, and
//! a caller of [`Connection::pages`] can decode page by page without ever holding all raw
//! bytes. Reading every page at one revision makes the result one consistent snapshot (the
//! one a single request would have returned at that revision), and a watch from that
//! revision misses nothing, whatever is written meanwhile.
//!
//! etcd's range has a limit in keys, not bytes, so the size of a page is steered from the
//! entries already read: the first page asks for one key, and each next page for as many as
//! [`PAGE_BYTES`] holds at the size of the largest entry of the page before, at most twice
//! as many as that page had. A reply still larger than the client accepts (entries much
//! larger than those before) is asked again with half the keys. The client accepts replies
//! up to [`MAX_PAGE_REPLY`], so one entry of any size etcd stores (its request limit,
//! `--max-request-bytes`, is 1.5 MiB unless raised) always fits.

use etcd_client::{GetOptions, GetResponse};

use crate::connection::{Connection, Entry, EtcdError, Listing};

/// The reply size a page aims at.
pub const PAGE_BYTES: usize = 1024 * 1024;
/// The largest reply a page accepts (the client's default, 4 MiB, is what failed).
pub const MAX_PAGE_REPLY: usize = 16 * 1024 * 1024;
/// Keys asked for by the first page, and the most any page asks for.
const FIRST_PAGE_KEYS: i64 = 1;
const MAX_PAGE_KEYS: i64 = 10_000;
/// Bytes of a stored entry besides its key and value, in the reply (revisions, lease,
/// version and their field tags).
const ENTRY_OVERHEAD: usize = 48;
/// Times [`Connection::get_prefix`] starts over when the revision of its first page is
/// compacted away while it reads.
const COMPACTED_RESTARTS: usize = 3;

/// The keys after `key` in etcd's byte order start at `key` followed by a zero byte.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// The end of the range of keys starting with `prefix` (exclusive): `prefix` with its last
/// byte below 0xff incremented; `[0]`, etcd's "to the end", when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|b| *b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// The number of keys for the next page after a page of `len` keys whose largest entry took
/// `largest` bytes.
fn next_limit(len: i64, largest: usize) -> i64 {
    let fits = i64::try_from(PAGE_BYTES / largest.max(1)).unwrap_or(MAX_PAGE_KEYS);
    fits.min(len.saturating_mul(2)).clamp(1, MAX_PAGE_KEYS)
}

fn reply_too_large(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("message length too large"))
}

fn compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("required revision has been compacted"))
}

/// What one range request came back with.
enum Reply {
    Page(GetResponse),
    /// The reply was over [`MAX_PAGE_REPLY`].
    TooLarge,
    /// The revision asked for was compacted away.
    Compacted,
}

/// The keys under a prefix, page by page, all at the revision of the first page (from
/// [`Connection::pages`]).
pub struct Pages<'c> {
    conn: &'c mut Connection,
    prefix: String,
    end: Vec<u8>,
    /// Where the next page starts; `None` once the last page was returned.
    next: Option<Vec<u8>>,
    /// The revision every page is read at (0 until the first page).
    revision: i64,
    limit: i64,
}

impl Pages<'_> {
    /// The revision the pages are read at, known once the first page was returned: a watch
    /// from after it continues exactly where the pages end.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The next page of entries, in key order, or `None` after the last one (a prefix
    /// without keys has one empty page). [`EtcdError::Compacted`] when the revision of the
    /// first page was compacted before a later one was read: the pages so far are of no use,
    /// start again.
    pub async fn next(&mut self) -> Result<Option<Vec<Entry>>, EtcdError> {
        let Some(start) = self.next.clone() else {
            return Ok(None);
        };
        let what = format!("list {} (page at revision {})", self.prefix, self.revision);
        let mut resp = loop {
            let options = GetOptions::new()
                .with_range(self.end.clone())
                .with_limit(self.limit)
                .with_revision(self.revision);
            let reply = self
                .conn
                .call(&what, async |c| {
                    let mut kv = c.kv_client().max_decoding_message_size(MAX_PAGE_REPLY);
                    match kv.get(start.clone(), Some(options.clone())).await {
                        Ok(resp) => Ok(Reply::Page(resp)),
                        Err(e) if reply_too_large(&e) => Ok(Reply::TooLarge),
                        Err(e) if compacted(&e) => Ok(Reply::Compacted),
                        Err(e) => Err(e),
                    }
                })
                .await?;
            match reply {
                Reply::Page(resp) => break resp,
                Reply::TooLarge if self.limit > 1 => self.limit /= 2,
                Reply::TooLarge => {
                    return Err(EtcdError::TooLarge {
                        what,
                        limit: MAX_PAGE_REPLY,
                    })
                }
                Reply::Compacted => {
                    return Err(EtcdError::Compacted {
                        prefix: self.prefix.clone(),
                        revision: self.revision,
                    })
                }
            }
        };
        if self.revision == 0 {
            self.revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        }
        let kvs = resp.take_kvs();
        self.next = match kvs.last() {
            Some(last) if resp.more() => Some(after(last.key())),
            _ => None,
        };
        let largest = kvs
            .iter()
            .map(|kv| kv.key().len() + kv.value().len() + ENTRY_OVERHEAD)
            .max()
            .unwrap_or(0);
        self.limit = next_limit(kvs.len() as i64, largest);
        Ok(Some(kvs.into_iter().map(Entry::from).collect()))
    }
}

impl Connection {
    /// Reads the keys under `prefix` page by page at one revision (see the module): for a
    /// caller that decodes as it reads instead of holding every raw entry at once.
    pub fn pages(&mut self, prefix: &str) -> Pages<'_> {
        Pages {
            conn: self,
            prefix: prefix.to_string(),
            end: prefix_end(prefix.as_bytes()),
            next: Some(prefix.as_bytes().to_vec()),
            revision: 0,
            limit: FIRST_PAGE_KEYS,
        }
    }

    /// Every key under `prefix`, in key order, and the revision of the read: one consistent
    /// snapshot, read in pages of about [`PAGE_BYTES`]. Starts over (a few times) when the
    /// revision is compacted away during the read.
    pub async fn get_prefix(&mut self, prefix: &str) -> Result<Listing, EtcdError> {
        let mut restarts = 0;
        'read: loop {
            let mut pages = self.pages(prefix);
            let mut entries = Vec::new();
            loop {
                match pages.next().await {
                    Ok(Some(page)) => entries.extend(page),
                    Ok(None) => {
                        return Ok(Listing {
                            entries,
                            revision: pages.revision(),
                        })
                    }
                    Err(EtcdError::Compacted { .. }) if restarts < COMPACTED_RESTARTS => {
                        restarts += 1;
                        continue 'read;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_continue_after_the_last_key_and_end_with_the_prefix() {
        assert_eq!(after(b"/a/b"), b"/a/b\0");
        assert_eq!(prefix_end(b"/rcni/"), b"/rcni0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn pages_aim_at_a_megabyte_and_grow_at_most_twofold() {
        // 200-byte records: from 256 keys, doubling up to what a megabyte holds.
        assert_eq!(next_limit(1, 200), 2);
        assert_eq!(next_limit(256, 200), 512);
        assert_eq!(next_limit(4096, 200), 5242);
        assert_eq!(next_limit(10_000, 10), MAX_PAGE_KEYS);
        // Entries near etcd's request limit: one per page.
        assert_eq!(next_limit(256, 1_500_000), 1);
        // An empty page (the last) asks for one key, never zero (etcd's "no limit").
        assert_eq!(next_limit(0, 0), 1);
    }
}
