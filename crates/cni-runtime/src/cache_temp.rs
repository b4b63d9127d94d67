//! The temp files behind atomic cache writes, named so that a process killed between creating
//! one and renaming it leaves something DEL and GC can attribute and remove.
//!
//! Names are `cni_persist` temp names (`.rcni-tmp-<pid>-<random>-<tag>.tmp`) tagged `<N>-<K>`,
//! where `N` is the FNV-1a 64 hash of the network name and `K` the hash of the entry's file
//! name (`<net>-<cid>-<ifname>`), 16 hex digits each. Hashes rather than the names themselves
//! keep every temp name short, whatever the length of the entry's name (which may use all of
//! NAME_MAX). The hash is part of the on-disk format: it must stay FNV-1a 64 so another rcni
//! version attributes the same files.
//!
//! No write is fsynced. The failure model is a process killed at any instant: the page cache
//! survives that, and the temp-file-then-link/rename protocol alone guarantees that a reader
//! never sees a partial entry. A power loss or kernel crash also wipes what the entries
//! describe (namespaces, veths, rules), so making them durable bought nothing but latency:
//! the two file and two directory fsyncs were most of `rcni add`'s overhead on ext4. libcni does not
//! sync either. An entry a power loss left empty or missing reads
//! as a corrupt or absent cache: DEL then runs without `prevResult` and removes the file.
//!
//! Durability: `cni_persist::Durability::Rename`, for the reasons above (the rename is this
//! module's own, to use `RENAME_EXCHANGE` and recycled inodes: `cni_persist::spare`).
//!
//! Who removes a leftover: DEL of the attachment removes its `N-K` files; GC, holding the
//! network lock exclusively (so no ADD of that network is writing), removes all of the
//! network's `N` files, any of a writer that is gone, and any `.rcni-tmp-*` file older than
//! [`STALE_AGE`] (a write takes milliseconds), which also covers names of older rcni versions.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_persist::spare::Spares;
use cni_persist::temp::{TempFile, TempName};
use cni_persist::Durability;

/// Prefix of every temp file; listings of the cache skip these names.
pub(crate) const TEMP_PREFIX: &str = cni_persist::TEMP_PREFIX;

/// A temp file this old has no writer left, whichever network it belongs to.
pub(crate) const STALE_AGE: Duration = Duration::from_secs(600);

/// FNV-1a, 64 bit: small, stable across builds and platforms.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The start of the tag of every temp file of `network`.
fn network_tag(network: &str) -> String {
    format!("{:016x}-", fnv1a64(network.as_bytes()))
}

/// The tag of the temp files of one entry.
fn attachment_tag(network: &str, entry_name: &str) -> String {
    format!(
        "{}{:016x}",
        network_tag(network),
        fnv1a64(entry_name.as_bytes())
    )
}

/// Writes `<dir>/<entry_name>` atomically: a temp file in `dir` (on a spare when there is one),
/// then an exchange with an existing entry, whose inode is parked in `spares`, or a rename. The
/// temp file is removed when anything fails.
pub(crate) fn write_atomic(
    dir: &Path,
    spares: Spares<'_>,
    network: &str,
    entry_name: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    let target = dir.join(entry_name);
    write_temp(dir, spares, network, entry_name, bytes)?.replace_recycling(
        &target,
        Durability::Rename,
        spares,
    )?;
    Ok(target)
}

/// Creates `<dir>/<entry_name>` with `bytes` complete from its first instant, unless it
/// exists: `Ok(None)` then, and nothing changed. The temp file is hard-linked to the name
/// (which fails on an existing one, where a rename would replace it) and then removed.
pub(crate) fn create_atomic(
    dir: &Path,
    spares: Spares<'_>,
    network: &str,
    entry_name: &str,
    bytes: &[u8],
) -> io::Result<Option<PathBuf>> {
    let target = dir.join(entry_name);
    let temp = write_temp(dir, spares, network, entry_name, bytes)?;
    Ok(temp
        .link_new(&target, Durability::Rename)?
        .then_some(target))
}

/// A temp file of this entry holding `bytes` (removed when dropped uncommitted): a spare
/// renamed to a new temp name when there is one, else a new file.
fn write_temp(
    dir: &Path,
    spares: Spares<'_>,
    network: &str,
    entry_name: &str,
    bytes: &[u8],
) -> io::Result<TempFile> {
    let mut temp = spares.temp_file(dir, &attachment_tag(network, entry_name))?;
    temp.write_whole(bytes)?;
    Ok(temp)
}

/// Removes the temp files a killed write of this one entry left. Returns how many.
pub(crate) fn remove_entry_temps(dir: &Path, network: &str, entry_name: &str) -> usize {
    let tag = attachment_tag(network, entry_name);
    cni_persist::remove_temps(dir, |t| t.tag == tag).unwrap_or(0)
}

/// Removes every temp file of `network` (the caller holds the network lock exclusively, so
/// none has a writer), every one whose writer is gone, and every temp file older than
/// `stale_age` (whatever its format). Returns how many.
pub(crate) fn sweep(dir: &Path, network: &str, stale_age: Duration) -> usize {
    let ours = network_tag(network);
    let mut removed = cni_persist::remove_temps(dir, |t: &TempName| {
        t.tag.starts_with(&ours) || t.writer_is_gone()
    })
    .unwrap_or(0);
    let Ok(entries) = fs::read_dir(dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let old = || {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= stale_age)
        };
        if cni_persist::is_temp(&entry.file_name()) && old() {
            removed += usize::from(fs::remove_file(entry.path()).is_ok());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_persist::temp::new_name;

    #[test]
    fn fnv_is_the_published_function() {
        // Test vectors of FNV-1a 64 (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn names_are_attributable_and_short() {
        let long = "c".repeat(230);
        let a = attachment_tag("net", &format!("net-{long}-eth0"));
        assert!(a.starts_with(&network_tag("net")));
        assert_eq!(a.len(), 33);
        assert_ne!(network_tag("net"), network_tag("net2"));
        let name = new_name(&a);
        assert!(name.len() < 100 && name.starts_with(TEMP_PREFIX), "{name}");
        assert_eq!(TempName::parse(&name).unwrap().tag, a);
    }

    #[cfg(unix)]
    #[test]
    fn write_leaves_only_the_entry_and_refuses_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let sp = tempfile::tempdir().unwrap();
        let p = write_atomic(d.path(), Spares::new(sp.path()), "n", "n-c1-eth0", b"{}").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
        // A planted symlink at a temp name is never opened through.
        let victim = d.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let planted = d.path().join(new_name("x"));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(cni_persist::temp::create_exclusive(&planted).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn create_never_replaces_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let sp = tempfile::tempdir().unwrap();
        let spares = Spares::new(sp.path());
        let p = create_atomic(d.path(), spares, "n", "n-c1-eth0", b"first").unwrap();
        assert_eq!(p, Some(d.path().join("n-c1-eth0")));
        assert_eq!(
            create_atomic(d.path(), spares, "n", "n-c1-eth0", b"second").unwrap(),
            None
        );
        assert_eq!(fs::read(d.path().join("n-c1-eth0")).unwrap(), b"first");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn del_and_gc_remove_what_is_theirs() {
        let d = tempfile::tempdir().unwrap();
        // Written by this process (a live writer) unless a pid is given.
        let mine = |net: &str, entry: &str, pid: Option<u32>| {
            let tag = attachment_tag(net, entry);
            let name = match pid {
                Some(pid) => TempName::file_name(pid, &tag),
                None => new_name(&tag),
            };
            fs::write(d.path().join(&name), "partial").unwrap();
            name
        };
        let a1 = mine("n", "n-c1-eth0", None);
        let a2 = mine("n", "n-c1-eth0", None);
        let b = mine("n", "n-c2-eth0", None);
        let other = mine("m", "m-c1-eth0", None);
        let dead = mine("m", "m-c2-eth0", Some(u32::MAX >> 1));
        let legacy = format!("{TEMP_PREFIX}123-0");
        fs::write(d.path().join(&legacy), "").unwrap();
        fs::write(d.path().join("n-c1-eth0"), "entry").unwrap();
        let exists = |n: &str| d.path().join(n).exists();

        assert_eq!(remove_entry_temps(d.path(), "n", "n-c1-eth0"), 2);
        assert!(!exists(&a1) && !exists(&a2) && exists(&b) && exists("n-c1-eth0"));

        assert_eq!(sweep(d.path(), "n", STALE_AGE), 2);
        assert!(!exists(&b) && !exists(&dead) && exists(&other) && exists(&legacy));
        // Old enough, any network's or format's temp file goes; entries never do.
        assert_eq!(sweep(d.path(), "n", Duration::ZERO), 2);
        assert!(!exists(&other) && !exists(&legacy) && exists("n-c1-eth0"));
    }
}
