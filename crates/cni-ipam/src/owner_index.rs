//! The owner index: a hint that says which addresses an attachment holds, so that ADD, DEL and
//! CHECK read one or two lease files instead of every file of the network directory (which is
//! what Go does, and what made their cost grow with the number of leases).
//!
//! It is only ever a hint. The lease files stay the truth, byte for byte as Go writes them:
//!
//! * it lives outside the network directory (`<dataDir>/.rcni-index.<network>`), because Go reads
//!   every file inside it;
//! * every address it names for an owner is verified by reading that one lease file; any
//!   mismatch makes the caller fall back to reading every file, and that full read rewrites it;
//! * it is trusted to be *complete* (no lease missing) only while the network directory is
//!   exactly as rcni last left it. After its last change, rcni sets the directory's mtime to a
//!   value in the past and records (mtime, ctime, inode) in the index. Creating, removing or
//!   renaming any entry sets mtime and ctime to the same current time, so any change by anyone
//!   else (a Go plugin, a person, an rcni killed mid-write) leaves a pair that no longer matches,
//!   even within one clock tick. Go never rewrites a lease file in place.
//!
//! The file is a journal of text lines, appended under the network's lock:
//!
//! ```text
//! rcni host-local owner index v1
//! +10.1.0.5 9f1c2e3d4b5a6978      a lease of the owner whose key is 9f1c…
//! -10.1.0.5 9f1c2e3d4b5a6978      that lease removed
//! @1700000000.123456789 1700000001.5 1234 2 0   stamp: mtime ctime inode records live
//! ```
//!
//! The last line is always the stamp written after the records it covers (in one `write`), so a
//! torn or interrupted append reads as stale. The key is FNV-1a (64 bits) of the lease's trimmed
//! content; a collision only costs the verification read. Written by hand because it must be
//! appended line by line and searched without parsing (see [`Journal::addresses_of`]).

use std::collections::BTreeMap;
use std::fs::{self, File, FileTimes, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::ip;

const HEADER: &str = "rcni host-local owner index v1\n";

/// Prefix of the index file's name in the data directory (a network name cannot start with a dot).
pub const INDEX_PREFIX: &str = ".rcni-index.";

/// Compaction: a journal is rewritten once it holds this many more records than live leases.
const SLACK: u64 = 512;

/// The key of a lease owner: FNV-1a of the lease content with surrounding whitespace trimmed.
pub fn owner_key(trimmed_content: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(trimmed_content.as_bytes());
    hasher.finish()
}

/// What identifies the state of the network directory as rcni last left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
}

impl Stamp {
    /// The directory's current stamp.
    pub fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }

    fn line(&self, records: u64, live: u64) -> String {
        format!(
            "@{}.{} {}.{} {} {records} {live}\n",
            self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1, self.ino
        )
    }

    /// Parses a stamp line (without '@' and newline) into the stamp and the two counters.
    fn parse(text: &str) -> Option<(Stamp, u64, u64)> {
        let pair = |s: &str| -> Option<(i64, i64)> {
            let (sec, nsec) = s.split_once('.')?;
            Some((sec.parse().ok()?, nsec.parse().ok()?))
        };
        let mut fields = text.split(' ');
        let stamp = Stamp {
            mtime: pair(fields.next()?)?,
            ctime: pair(fields.next()?)?,
            ino: fields.next()?.parse().ok()?,
        };
        let records = fields.next()?.parse().ok()?;
        let live = fields.next()?.parse().ok()?;
        fields.next().is_none().then_some((stamp, records, live))
    }
}

/// A change to the set of leases, as journalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added(IpAddr, u64),
    Removed(IpAddr, u64),
}

impl Change {
    fn line(&self) -> String {
        match self {
            Change::Added(addr, key) => format!("+{} {key:016x}\n", ip::go_string(*addr)),
            Change::Removed(addr, key) => format!("-{} {key:016x}\n", ip::go_string(*addr)),
        }
    }
}

/// An index that matched the directory: its records, without header and stamp.
#[derive(Debug)]
pub struct Journal {
    bytes: Vec<u8>,
    records: u64,
    live: u64,
}

impl Journal {
    /// The addresses the index records for the owner `key`, replaying its records in order.
    /// Only the lines holding the key are looked at.
    pub fn addresses_of(&self, key: u64) -> Vec<IpAddr> {
        let needle = format!(" {key:016x}\n");
        let mut held: Vec<IpAddr> = Vec::new();
        for end in memchr::memmem::find_iter(&self.bytes, needle.as_bytes()) {
            let start = memchr::memrchr(b'\n', &self.bytes[..end]).map_or(0, |i| i + 1);
            let Some((op, addr)) = parse_record(&self.bytes[start..end]) else {
                continue;
            };
            held.retain(|a| *a != addr);
            if op == b'+' {
                held.push(addr);
            }
        }
        held
    }

    /// Every live lease (address → owner key), replaying all records.
    pub fn live(&self) -> BTreeMap<IpAddr, u64> {
        let mut live = BTreeMap::new();
        for line in self.bytes.split(|b| *b == b'\n') {
            let Some((head, key)) = line
                .iter()
                .rposition(|b| *b == b' ')
                .map(|i| (&line[..i], &line[i + 1..]))
            else {
                continue;
            };
            let (Some((op, addr)), Some(key)) = (parse_record(head), parse_key(key)) else {
                continue;
            };
            if op == b'+' {
                live.insert(addr, key);
            } else {
                live.remove(&addr);
            }
        }
        live
    }

    /// True when the journal has grown well past its live records and should be rewritten.
    fn wants_compaction(&self, pending: usize) -> bool {
        self.records + pending as u64 + 1 > 2 * self.live + SLACK
    }
}

/// `+<ip>` or `-<ip>`.
fn parse_record(head: &[u8]) -> Option<(u8, IpAddr)> {
    let (&op, addr) = head.split_first()?;
    if op != b'+' && op != b'-' {
        return None;
    }
    Some((op, ip::parse_ip(std::str::from_utf8(addr).ok()?)?))
}

fn parse_key(text: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(text).ok()?, 16).ok()
}

/// The index file of one network.
#[derive(Debug, Clone)]
pub struct IndexFile {
    path: PathBuf,
}

impl IndexFile {
    /// The index of the network directory `dir` (kept next to it, in the data directory).
    pub fn for_network_dir(dir: &Path) -> Option<IndexFile> {
        let name = dir.file_name()?.to_str()?;
        Some(IndexFile {
            path: dir.parent()?.join(format!("{INDEX_PREFIX}{name}")),
        })
    }

    /// The journal when the index exists, is well formed and its stamp is `current`; `None`
    /// (stale, missing or damaged) otherwise.
    pub fn load(&self, current: &Stamp) -> Option<Journal> {
        let mut bytes = crate::store::read_regular(&self.path)?;
        let body_start = HEADER.len();
        if !bytes.starts_with(HEADER.as_bytes()) || bytes.last() != Some(&b'\n') {
            return None;
        }
        let stamp_start = memchr::memrchr(b'\n', &bytes[..bytes.len() - 1]).map_or(0, |i| i + 1);
        let stamp_line = bytes[stamp_start..bytes.len() - 1].strip_prefix(b"@")?;
        let (stamp, records, live) = Stamp::parse(std::str::from_utf8(stamp_line).ok()?)?;
        if stamp != *current || stamp_start < body_start {
            return None;
        }
        bytes.truncate(stamp_start);
        bytes.drain(..body_start);
        Some(Journal {
            bytes,
            records,
            live,
        })
    }

    /// Records `changes` after a fresh `journal` and stamps the directory; the journal is
    /// rewritten whole when it has grown too long.
    pub fn append(&self, dir: &Path, journal: &Journal, changes: &[Change]) -> io::Result<()> {
        if journal.wants_compaction(changes.len()) {
            let mut live = journal.live();
            apply(&mut live, changes);
            return self.rewrite(dir, &live);
        }
        let live = changes.iter().fold(journal.live, |live, c| match c {
            Change::Added(..) => live + 1,
            Change::Removed(..) => live.saturating_sub(1),
        });
        // The stamp line counts too: it is what makes an index of few leases grow.
        let records = journal.records + changes.len() as u64 + 1;
        let stamp = stamp_directory(dir)?;
        let mut text: String = changes.iter().map(Change::line).collect();
        text.push_str(&stamp.line(records, live));
        // One write: a reader sees either the old stamp (stale now) or all of it.
        OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?
            .write_all(text.as_bytes())
    }

    /// Replaces the index with the complete set of leases `live` and stamps the directory.
    pub fn rewrite(&self, dir: &Path, live: &BTreeMap<IpAddr, u64>) -> io::Result<()> {
        let stamp = stamp_directory(dir)?;
        let mut text = String::with_capacity(HEADER.len() + live.len() * 32);
        text.push_str(HEADER);
        for (addr, key) in live {
            text.push_str(&Change::Added(*addr, *key).line());
        }
        text.push_str(&stamp.line(live.len() as u64, live.len() as u64));
        let parent = self.path.parent().unwrap_or(Path::new("."));
        crate::store::replace_file(parent, &self.path, text.as_bytes())
    }

    /// Removes the index (after a change that could not be recorded).
    pub fn discard(&self) {
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

/// Applies `changes` to a complete set of leases.
pub fn apply(live: &mut BTreeMap<IpAddr, u64>, changes: &[Change]) {
    for change in changes {
        match *change {
            Change::Added(addr, key) => live.insert(addr, key),
            Change::Removed(addr, _) => live.remove(&addr),
        };
    }
}

/// Sets the directory's mtime one second into the past and returns the resulting stamp. Refuses
/// (error) when mtime and ctime came out equal, since that pair would not tell a later change
/// apart.
fn stamp_directory(dir: &Path) -> io::Result<Stamp> {
    let handle = File::open(dir)?;
    let past = SystemTime::now() - Duration::from_secs(1);
    handle.set_times(FileTimes::new().set_modified(past))?;
    let stamp = Stamp::of(&handle.metadata()?);
    if stamp.mtime == stamp.ctime {
        return Err(io::Error::other(
            "directory mtime equals ctime after stamping",
        ));
    }
    Ok(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn journal(changes: &[Change]) -> Journal {
        Journal {
            bytes: changes.iter().map(Change::line).collect::<String>().into(),
            records: changes.len() as u64,
            live: 0,
        }
    }

    #[test]
    fn replay_of_one_owner_and_of_all() {
        let (a, b) = (owner_key("a\r\neth0"), owner_key("b\r\neth0"));
        let j = journal(&[
            Change::Added(ip("10.0.0.2"), a),
            Change::Added(ip("10.0.0.3"), b),
            Change::Added(ip("fd00::2"), a),
            Change::Removed(ip("10.0.0.2"), a),
            Change::Added(ip("10.0.0.4"), a),
        ]);
        assert_eq!(j.addresses_of(a), [ip("fd00::2"), ip("10.0.0.4")]);
        assert_eq!(j.addresses_of(b), [ip("10.0.0.3")]);
        assert!(j.addresses_of(owner_key("c")).is_empty());
        let live = j.live();
        assert_eq!(live.len(), 3);
        assert_eq!(live[&ip("10.0.0.3")], b);
    }

    #[test]
    fn stamp_line_round_trip_and_garbage() {
        let s = Stamp {
            mtime: (1, 999_999_999),
            ctime: (2, 0),
            ino: 77,
        };
        let line = s.line(5, 3);
        assert_eq!(
            Stamp::parse(line.trim_end().strip_prefix('@').unwrap()),
            Some((s, 5, 3))
        );
        for bad in [
            "",
            "1.2 3.4 5 6",
            "1.2 3.4 5 6 7 8",
            "x.2 3.4 5 6 7",
            "1 3.4 5 6 7",
        ] {
            assert_eq!(Stamp::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_are_stable() {
        // FNV-1a 64 of "a": the index must read the same after an upgrade.
        assert_eq!(owner_key("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn load_refuses_damaged_or_stale_files() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("net");
        fs::create_dir(&net).unwrap();
        let index = IndexFile::for_network_dir(&net).unwrap();
        let current = |_: ()| Stamp::of(&fs::metadata(&net).unwrap());
        assert!(index.load(&current(())).is_none(), "missing");
        let mut live = BTreeMap::new();
        live.insert(ip("10.0.0.2"), owner_key("x"));
        index.rewrite(&net, &live).unwrap();
        let j = index.load(&current(())).expect("fresh after rewrite");
        assert_eq!(j.addresses_of(owner_key("x")), [ip("10.0.0.2")]);
        index
            .append(&net, &j, &[Change::Added(ip("10.0.0.3"), owner_key("x"))])
            .unwrap();
        let j = index.load(&current(())).expect("fresh after append");
        assert_eq!(j.addresses_of(owner_key("x")).len(), 2);
        // Any entry change in the directory makes it stale.
        fs::write(net.join("10.0.0.9"), "y").unwrap();
        assert!(index.load(&current(())).is_none(), "stale");
        // A torn append (no stamp last) or garbage is refused.
        index.rewrite(&net, &live).unwrap();
        let path = dir.path().join(".rcni-index.net");
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("+10.0.0.7 00");
        fs::write(&path, &text).unwrap();
        assert!(index.load(&current(())).is_none(), "torn");
        fs::write(&path, "garbage\n").unwrap();
        assert!(index.load(&current(())).is_none(), "garbage");
    }
}
