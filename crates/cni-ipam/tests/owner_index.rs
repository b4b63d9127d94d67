//! The owner index is a hint: ADD, DEL and CHECK stay correct whatever state it is in (missing,
//! stale after someone else changed the directory, damaged, or naming the wrong addresses).
//! Sharing with the Go binary is in `go_interop.rs`.

mod common;

use std::path::{Path, PathBuf};

use cni_ipam::{HostLocal, INDEX_PREFIX};
use common::{files, ip, single, write, NETWORK};
use serde_json::json;

fn store(dir: &Path) -> HostLocal {
    single(dir, json!({"subnet": "198.18.240.0/24"}))
}

fn index_path(dir: &Path) -> PathBuf {
    dir.join(format!("{INDEX_PREFIX}{NETWORK}"))
}

fn one(ipam: &HostLocal, id: &str) -> std::net::IpAddr {
    ipam.allocate(id, "eth0", &[]).unwrap()[0].address.addr()
}

#[test]
fn index_lives_outside_the_network_directory() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    one(&ipam, "a");
    let names: Vec<String> = files(dir.path()).into_keys().collect();
    assert_eq!(names, ["198.18.240.2", "last_reserved_ip.0", "lock"]);
    let index = index_text(dir.path());
    assert!(index.contains("+198.18.240.2 "), "{index}");
    let stamp = std::fs::read_to_string(index_path(dir.path()).join("stamp")).unwrap();
    assert!(stamp.starts_with("v1 "), "{stamp}");
}

/// Every bucket of the index, concatenated.
fn index_text(dir: &Path) -> String {
    buckets(dir)
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

fn buckets(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(index_path(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with('b'))
        .collect();
    v.sort();
    v
}

// Proves the fresh index is what answers: a lease rewritten in place (which Go never does, and
// which leaves the directory's entries unchanged) is not re-read.
#[test]
fn a_fresh_index_answers_without_reading_other_leases() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let b = one(&ipam, "b");
    one(&ipam, "a");
    std::fs::write(dir.path().join(NETWORK).join(b.to_string()), "x\r\neth0").unwrap();
    assert!(ipam.check("x", "eth0").is_err());
    // Once the entries change (here a new file), everything is read again.
    write(dir.path(), "198.18.240.200", b"y\r\neth0");
    ipam.check("x", "eth0").unwrap();
    ipam.check("y", "eth0").unwrap();
}

#[test]
fn missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    std::fs::remove_dir_all(index_path(dir.path())).unwrap();
    assert_eq!(one(&ipam, "a"), a, "repeated ADD finds the lease");
    assert!(index_path(dir.path()).exists());
    assert_eq!(ipam.release("a", "eth0").unwrap(), [a]);
    assert!(ipam.check("a", "eth0").is_err());
}

#[test]
fn damaged_index_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let stamp = index_path(dir.path()).join("stamp");
    let good = std::fs::read(&stamp).unwrap();
    for bad in [
        b"".to_vec(),
        b"garbage\n".to_vec(),
        good[..good.len() - 3].to_vec(),
        vec![0xff; 100],
    ] {
        std::fs::write(&stamp, &bad).unwrap();
        assert_eq!(one(&ipam, "a"), a);
        ipam.check("a", "eth0").unwrap();
    }
    // Garbage in the buckets, with a valid stamp: their records are ignored or verified.
    for bucket in buckets(dir.path()) {
        std::fs::write(
            &bucket,
            [
                &b"\xff\x00garbage\n+198.18.240.99 zz\n"[..],
                &std::fs::read(&bucket).unwrap(),
            ]
            .concat(),
        )
        .unwrap();
    }
    assert_eq!(one(&ipam, "a"), a);
    std::fs::write(&stamp, b"garbage\n").unwrap();
    assert_eq!(ipam.release("a", "eth0").unwrap(), [a]);
}

/// Makes the index say that `addr`'s owner holds `to_addr` and the other way round, keeping
/// the stamp, so the index stays "fresh" but lies.
fn swap_owner(dir: &Path, addr: &str, to_addr: &str) {
    let text = index_text(dir);
    let key_of = |a: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("+{a} ")))
            .unwrap()
            .to_string()
    };
    let (from_key, to_key) = (key_of(addr), key_of(to_addr));
    for bucket in buckets(dir) {
        let lied = std::fs::read_to_string(&bucket)
            .unwrap()
            .replace(&format!("+{addr} {from_key}"), "@A")
            .replace(
                &format!("+{to_addr} {to_key}"),
                &format!("+{addr} {to_key}"),
            )
            .replace("@A", &format!("+{to_addr} {from_key}"));
        std::fs::write(&bucket, lied).unwrap();
    }
}

#[test]
fn wrong_hints_are_caught_by_verification() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let b = one(&ipam, "b");
    swap_owner(dir.path(), &a.to_string(), &b.to_string());
    assert!(index_text(dir.path()).contains(&format!("+{b} ")));
    // The index now says a holds b's address and b holds a's.
    assert_eq!(one(&ipam, "a"), a);
    swap_owner(dir.path(), &a.to_string(), &b.to_string());
    assert_eq!(ipam.release("a", "eth0").unwrap(), [a]);
    assert!(files(dir.path()).contains_key(&b.to_string()));
    ipam.check("b", "eth0").unwrap();
    assert!(ipam.check("a", "eth0").is_err());
}

#[test]
fn hint_naming_a_removed_or_replaced_lease_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let lease = dir.path().join(NETWORK).join(a.to_string());
    // Replaced by a symlink to a file holding a's content: not a lease, never followed.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, "a\r\neth0").unwrap();
    std::fs::remove_file(&lease).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &lease).unwrap();
    assert!(ipam.check("a", "eth0").is_err());
    std::fs::remove_file(&lease).unwrap();
    assert!(ipam.check("a", "eth0").is_err());
    assert!(ipam.release("a", "eth0").unwrap().is_empty());
}

#[test]
fn leases_written_by_others_are_found_after_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    one(&ipam, "a");
    // As another implementation would, without our index: current and legacy formats.
    write(dir.path(), "198.18.240.50", b"c\r\neth0");
    assert_eq!(one(&ipam, "c"), ip("198.18.240.50"));
    write(dir.path(), "198.18.240.51", b"legacy");
    assert!(ipam.allocate("legacy", "eth0", &[]).is_err(), "duplicate");
    assert_eq!(
        ipam.release("legacy", "eth1").unwrap(),
        [ip("198.18.240.51")]
    );
    // Removed by someone else: no longer held.
    std::fs::remove_file(dir.path().join(NETWORK).join("198.18.240.50")).unwrap();
    assert!(ipam.check("c", "eth0").is_err());
}

#[test]
fn stale_temp_files_are_still_removed() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    one(&ipam, "a");
    write(dir.path(), ".rcni-tmp-0123456789abcdef", b"half");
    one(&ipam, "b");
    assert!(!files(dir.path()).contains_key(".rcni-tmp-0123456789abcdef"));
}

#[test]
fn no_place_for_the_index_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    std::fs::remove_dir_all(index_path(dir.path())).unwrap();
    // The index cannot be made where a file is in the way; everything still works.
    std::fs::write(index_path(dir.path()), "in the way").unwrap();
    assert_eq!(one(&ipam, "a"), a);
    let b = one(&ipam, "b");
    assert_eq!(ipam.release("b", "eth0").unwrap(), [b]);
    ipam.check("a", "eth0").unwrap();
}

#[test]
fn index_files_that_are_fifos_or_symlinks_are_never_opened() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let stamp = index_path(dir.path()).join("stamp");
    let bucket = buckets(dir.path()).remove(0);
    for path in [&stamp, &bucket] {
        std::fs::remove_file(path).unwrap();
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    assert_eq!(one(&ipam, "a"), a, "a FIFO would block a reader");
    let target = dir.path().join("elsewhere");
    for path in [&stamp, &bucket] {
        let _ = std::fs::remove_file(path);
        std::os::unix::fs::symlink(&target, path).unwrap();
    }
    assert_eq!(ipam.release("a", "eth0").unwrap(), [a]);
    assert!(
        !target.exists(),
        "the index is never written through a link"
    );
}

#[test]
fn gc_and_status_keep_the_index_right() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    one(&ipam, "a");
    let b = one(&ipam, "b");
    ipam.gc(&[cni_attribution::AttachmentId::new("n", "b", "eth0")])
        .unwrap();
    assert!(ipam.check("a", "eth0").is_err());
    ipam.status().unwrap();
    assert_eq!(ipam.release("b", "eth0").unwrap(), [b]);
    assert!(ipam.check("b", "eth0").is_err());
}

#[test]
fn many_operations_keep_the_index_small() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.18.240.0/22"}));
    for n in 0..40 {
        one(&ipam, &format!("keep{n}"));
    }
    for n in 0..400 {
        let id = format!("c{}", n % 10);
        one(&ipam, &id);
        ipam.release(&id, "eth0").unwrap();
    }
    let lines = index_text(dir.path()).lines().count();
    // 40 live leases; without compaction there would be 840 records, 800 of them in the (at
    // most 10) buckets of the churned owners.
    assert!(lines < 500, "{lines} lines");
    for n in 0..40 {
        ipam.check(&format!("keep{n}"), "eth0").unwrap();
    }
    assert!(ipam.check("c7", "eth0").is_err());
}
