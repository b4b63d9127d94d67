//! The owner index: a hint that says which addresses an attachment holds, so that ADD, DEL and
//! CHECK read one or two small files instead of every lease file of the network directory
//! (which is what Go does, and what made their cost grow with the number of leases).
//!
//! It is only ever a hint. The lease files stay the truth, byte for byte as Go writes them:
//!
//! * it lives outside the network directory, in `<dataDir>/.rcni-index.<network>/`, because Go
//!   reads every file inside the network directory;
//! * every address it names for an owner is verified by reading that one lease file; any
//!   mismatch makes the caller fall back to reading every file, and that full read rewrites it;
//! * it is trusted to be *complete* (no lease missing) only while the network directory is
//!   exactly as rcni last left it. After its last change, rcni sets the directory's mtime to a
//!   value in the past and records (mtime, ctime, inode) in the index's `stamp` file. Creating,
//!   removing or renaming any entry sets mtime and ctime to the same current time, so any change
//!   by anyone else (a Go plugin, a person, an rcni killed mid-write) leaves a pair that no
//!   longer matches, even within one clock tick. Go never rewrites a lease file in place.
//!
//! Owners are spread over [`BUCKETS`] journal files (`b00`…`b3f`, by owner key), so a lookup
//! reads one small file whatever the lease count. Each holds text lines appended under the
//! network's lock:
//!
//! ```text
//! +198.18.144.5 9f1c2e3d4b5a6978      a lease of the owner whose key is 9f1c…
//! -198.18.144.5 9f1c2e3d4b5a6978      that lease removed
//! ```
//!
//! `stamp` (`v1 <mtime> <ctime> <inode>`) is replaced last, after the buckets it covers, and
//! removed first when the buckets are rewritten, so a crash at any point reads as stale. The key
//! is FNV-1a (64 bits) of the lease's owner; a collision only costs the verification read.
//! Written by hand because the journal must be appended line by line and searched without a
//! parser (see [`Journal::addresses_of`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, FileTimes, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::files::{read_regular, replace_file};
use crate::ip;

/// Prefix of the index directory's name in the data directory (a network name cannot start
/// with a dot).
pub const INDEX_PREFIX: &str = ".rcni-index.";

/// How many journal files the owners are spread over.
pub const BUCKETS: u64 = 64;

const STAMP_FILE: &str = "stamp";
const STAMP_VERSION: &str = "v1";

/// Compaction: a bucket is rewritten once it holds this many more lines than live leases.
const SLACK: usize = 32;

/// The key of a lease owner: FNV-1a of its text form.
pub fn owner_key(text: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}

fn bucket_of(key: u64) -> u64 {
    key % BUCKETS
}

fn bucket_name(bucket: u64) -> String {
    format!("b{bucket:02x}")
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

    fn text(&self) -> String {
        format!(
            "{STAMP_VERSION} {}.{} {}.{} {}\n",
            self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1, self.ino
        )
    }

    fn parse(text: &str) -> Option<Stamp> {
        let pair = |s: &str| -> Option<(i64, i64)> {
            let (sec, nsec) = s.split_once('.')?;
            Some((sec.parse().ok()?, nsec.parse().ok()?))
        };
        let mut fields = text.strip_suffix('\n')?.split(' ');
        if fields.next()? != STAMP_VERSION {
            return None;
        }
        let stamp = Stamp {
            mtime: pair(fields.next()?)?,
            ctime: pair(fields.next()?)?,
            ino: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(stamp)
    }
}

/// A change to the set of leases, as journalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added(IpAddr, u64),
    Removed(IpAddr, u64),
}

impl Change {
    fn key(&self) -> u64 {
        match self {
            Change::Added(_, key) | Change::Removed(_, key) => *key,
        }
    }

    fn line(&self) -> String {
        match self {
            Change::Added(addr, key) => format!("+{} {key:016x}\n", ip::go_string(*addr)),
            Change::Removed(addr, key) => format!("-{} {key:016x}\n", ip::go_string(*addr)),
        }
    }
}

/// An index whose stamp matched the directory; buckets are read when first needed.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    buckets: RefCell<BTreeMap<u64, Vec<u8>>>,
}

impl Journal {
    /// The content of a bucket (empty when it has no file).
    fn bucket(&self, bucket: u64) -> Vec<u8> {
        self.buckets
            .borrow_mut()
            .entry(bucket)
            .or_insert_with(|| {
                read_regular(&self.dir.join(bucket_name(bucket))).unwrap_or_default()
            })
            .clone()
    }

    /// The addresses the index records for the owner `key`, replaying its records in order.
    pub fn addresses_of(&self, key: u64) -> Vec<IpAddr> {
        let bytes = self.bucket(bucket_of(key));
        let needle = format!(" {key:016x}\n");
        let mut held: Vec<IpAddr> = Vec::new();
        for end in memchr::memmem::find_iter(&bytes, needle.as_bytes()) {
            let start = memchr::memrchr(b'\n', &bytes[..end]).map_or(0, |i| i + 1);
            let Some((op, addr)) = parse_record(&bytes[start..end]) else {
                continue;
            };
            held.retain(|a| *a != addr);
            if op == b'+' {
                held.push(addr);
            }
        }
        held
    }
}

/// Every live lease of a journal text (address → owner key), replaying all records; and the
/// number of lines read.
fn replay(bytes: &[u8]) -> (BTreeMap<IpAddr, u64>, usize) {
    let mut live = BTreeMap::new();
    let mut lines = 0;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        lines += 1;
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
    (live, lines)
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

/// The lines of a bucket holding exactly `live`.
fn bucket_text<'a>(live: impl Iterator<Item = (&'a IpAddr, &'a u64)>) -> String {
    live.map(|(addr, key)| Change::Added(*addr, *key).line())
        .collect()
}

/// The index of one network.
#[derive(Debug, Clone)]
pub struct IndexFile {
    dir: PathBuf,
}

impl IndexFile {
    /// The index of the network directory `dir` (kept next to it, in the data directory).
    pub fn for_network_dir(dir: &Path) -> Option<IndexFile> {
        let name = dir.file_name()?.to_str()?;
        Some(IndexFile {
            dir: dir.parent()?.join(format!("{INDEX_PREFIX}{name}")),
        })
    }

    /// The journal when the index exists and its stamp is `current`; `None` (stale, missing
    /// or damaged) otherwise.
    pub fn load(&self, current: &Stamp) -> Option<Journal> {
        let text = read_regular(&self.dir.join(STAMP_FILE))?;
        let stamp = Stamp::parse(std::str::from_utf8(&text).ok()?)?;
        (stamp == *current).then(|| Journal {
            dir: self.dir.clone(),
            buckets: RefCell::default(),
        })
    }

    /// Records `changes` after a fresh `journal` and stamps the directory. A bucket that has
    /// grown well past its live records is rewritten instead of appended to.
    pub fn append(&self, net_dir: &Path, journal: &Journal, changes: &[Change]) -> io::Result<()> {
        let mut by_bucket: BTreeMap<u64, Vec<Change>> = BTreeMap::new();
        for change in changes {
            by_bucket
                .entry(bucket_of(change.key()))
                .or_default()
                .push(*change);
        }
        for (bucket, changes) in by_bucket {
            let path = self.dir.join(bucket_name(bucket));
            let old = journal.bucket(bucket);
            let (mut live, lines) = replay(&old);
            if lines + changes.len() > 2 * live.len() + SLACK {
                apply(&mut live, &changes);
                replace_file(&self.dir, &path, bucket_text(live.iter()).as_bytes())?;
            } else {
                let text: String = changes.iter().map(Change::line).collect();
                // One write: a torn one is covered by the stamp, which is written after.
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&path)?
                    .write_all(text.as_bytes())?;
            }
        }
        self.write_stamp(net_dir)
    }

    /// Replaces the index with the complete set of leases `live` and stamps the directory.
    pub fn rewrite(&self, net_dir: &Path, live: &BTreeMap<IpAddr, u64>) -> io::Result<()> {
        match DirBuilder::new().mode(0o700).create(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Unstamped first: a crash while the buckets are half rewritten reads as stale.
                remove_if_present(&self.dir.join(STAMP_FILE))?;
            }
            other => other?,
        }
        let mut buckets: BTreeMap<u64, BTreeMap<IpAddr, u64>> = BTreeMap::new();
        for (addr, key) in live {
            buckets
                .entry(bucket_of(*key))
                .or_default()
                .insert(*addr, *key);
        }
        for bucket in 0..BUCKETS {
            let path = self.dir.join(bucket_name(bucket));
            match buckets.get(&bucket) {
                Some(set) => replace_file(&self.dir, &path, bucket_text(set.iter()).as_bytes())?,
                None => remove_if_present(&path)?,
            }
        }
        self.write_stamp(net_dir)
    }

    /// Stamps the network directory and records the stamp, last. The record is rewritten in
    /// place: only lock holders read it, and a torn one cannot equal the new stamp, so it reads
    /// as stale. (A rename over it would cost ext4 a data flush on every call.)
    fn write_stamp(&self, net_dir: &Path) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let stamp = stamp_directory(net_dir)?;
        let path = self.dir.join(STAMP_FILE);
        let text = stamp.text();
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path);
        match file {
            Ok(file) if file.metadata()?.is_file() => {
                file.write_all_at(text.as_bytes(), 0)?;
                file.set_len(text.len() as u64)
            }
            // Something else under its name (a link, a FIFO): replaced.
            _ => replace_file(&self.dir, &path, text.as_bytes()),
        }
    }

    /// Makes the index stale (after a change that could not be recorded).
    pub fn discard(&self) {
        if let Err(e) = remove_if_present(&self.dir.join(STAMP_FILE)) {
            log::warn!("cannot invalidate {}: {e}", self.dir.display());
        }
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Applies `changes` to a set of leases.
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

    fn journal_of(dir: &Path, changes: &[Change]) -> Journal {
        let mut buckets: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for c in changes {
            buckets
                .entry(bucket_of(c.key()))
                .or_default()
                .extend(c.line().into_bytes());
        }
        Journal {
            dir: dir.to_path_buf(),
            buckets: RefCell::new(buckets),
        }
    }

    #[test]
    fn replay_of_one_owner_and_of_all() {
        let (a, b) = (owner_key("a\r\neth0"), owner_key("b\r\neth0"));
        let changes = [
            Change::Added(ip("198.18.128.2"), a),
            Change::Added(ip("198.18.128.3"), b),
            Change::Added(ip("fd00::2"), a),
            Change::Removed(ip("198.18.128.2"), a),
            Change::Added(ip("198.18.128.4"), a),
        ];
        let j = journal_of(Path::new("/nonexistent"), &changes);
        assert_eq!(j.addresses_of(a), [ip("fd00::2"), ip("198.18.128.4")]);
        assert_eq!(j.addresses_of(b), [ip("198.18.128.3")]);
        assert!(j.addresses_of(owner_key("c")).is_empty());
        let all: String = changes.iter().map(Change::line).collect();
        let (live, lines) = replay(all.as_bytes());
        assert_eq!((live.len(), lines), (3, 5));
        assert_eq!(live[&ip("198.18.128.3")], b);
    }

    #[test]
    fn stamp_round_trip_and_garbage() {
        let s = Stamp {
            mtime: (1, 999_999_999),
            ctime: (2, 0),
            ino: 77,
        };
        assert_eq!(Stamp::parse(&s.text()), Some(s));
        for bad in [
            "",
            "v1 1.2 3.4 5",
            "v1 1.2 3.4 5 6\n",
            "v2 1.2 3.4 5\n",
            "v1 x.2 3.4 5\n",
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
    fn load_refuses_missing_damaged_or_stale_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("net");
        fs::create_dir(&net).unwrap();
        let index = IndexFile::for_network_dir(&net).unwrap();
        let current = || Stamp::of(&fs::metadata(&net).unwrap());
        assert!(index.load(&current()).is_none(), "missing");
        let x = owner_key("x");
        let mut live = BTreeMap::new();
        live.insert(ip("198.18.128.2"), x);
        index.rewrite(&net, &live).unwrap();
        let j = index.load(&current()).expect("fresh after rewrite");
        assert_eq!(j.addresses_of(x), [ip("198.18.128.2")]);
        index
            .append(&net, &j, &[Change::Added(ip("198.18.128.3"), x)])
            .unwrap();
        let j = index.load(&current()).expect("fresh after append");
        assert_eq!(j.addresses_of(x).len(), 2);
        // Any entry change in the directory makes it stale.
        fs::write(net.join("198.18.128.9"), "y").unwrap();
        assert!(index.load(&current()).is_none(), "stale");
        index.rewrite(&net, &live).unwrap();
        let stamp = dir.path().join(".rcni-index.net").join(STAMP_FILE);
        fs::write(&stamp, "garbage\n").unwrap();
        assert!(index.load(&current()).is_none(), "garbage");
        index.rewrite(&net, &live).unwrap();
        index.discard();
        assert!(index.load(&current()).is_none(), "discarded");
    }

    #[test]
    fn long_buckets_are_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let net = dir.path().join("net");
        fs::create_dir(&net).unwrap();
        let index = IndexFile::for_network_dir(&net).unwrap();
        index.rewrite(&net, &BTreeMap::new()).unwrap();
        let x = owner_key("x");
        for n in 0..200u8 {
            let j = index
                .load(&Stamp::of(&fs::metadata(&net).unwrap()))
                .unwrap();
            let addr = IpAddr::from([198, 18, 128, n]);
            index
                .append(
                    &net,
                    &j,
                    &[Change::Added(addr, x), Change::Removed(addr, x)],
                )
                .unwrap();
        }
        let bucket = fs::read(
            dir.path()
                .join(".rcni-index.net")
                .join(bucket_name(bucket_of(x))),
        )
        .unwrap();
        assert!(
            bucket.split(|b| *b == b'\n').count() <= SLACK + 3,
            "{}",
            bucket.len()
        );
    }
}
