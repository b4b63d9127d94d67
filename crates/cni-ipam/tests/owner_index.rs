//! The owner index is a hint: ADD, DEL and CHECK stay correct whatever state it is in (missing,
//! stale after someone else changed the directory, damaged, or naming the wrong addresses).
//! Sharing with the Go binary is in `go_interop.rs`.

mod common;

use std::path::{Path, PathBuf};

use cni_ipam::{HostLocal, INDEX_PREFIX};
use common::{files, ip, single, write, NETWORK};
use serde_json::json;

fn store(dir: &Path) -> HostLocal {
    single(dir, json!({"subnet": "10.7.0.0/24"}))
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
    assert_eq!(names, ["10.7.0.2", "last_reserved_ip.0", "lock"]);
    let index = std::fs::read_to_string(index_path(dir.path())).unwrap();
    assert!(
        index.starts_with("rcni host-local owner index v1\n"),
        "{index}"
    );
    assert!(index.contains("+10.7.0.2 "), "{index}");
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
    write(dir.path(), "10.7.0.200", b"y\r\neth0");
    ipam.check("x", "eth0").unwrap();
    ipam.check("y", "eth0").unwrap();
}

#[test]
fn missing_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    std::fs::remove_file(index_path(dir.path())).unwrap();
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
    let path = index_path(dir.path());
    let good = std::fs::read(&path).unwrap();
    for bad in [
        b"".to_vec(),
        b"garbage\n".to_vec(),
        good[..good.len() - 3].to_vec(),
        [&good[..], b"+10.7.0.9 0000"].concat(),
        vec![0xff; 100],
    ] {
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(one(&ipam, "a"), a);
        ipam.check("a", "eth0").unwrap();
    }
    std::fs::write(&path, b"garbage\n").unwrap();
    assert_eq!(ipam.release("a", "eth0").unwrap(), [a]);
}

/// Replaces the owner key of every record of `from`'s address with `to`'s, keeping the stamp,
/// so the index stays "fresh" but lies.
fn swap_owner(index: &Path, addr: &str, to_addr: &str) {
    let text = std::fs::read_to_string(index).unwrap();
    let key_of = |a: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("+{a} ")))
            .unwrap()
            .to_string()
    };
    let (from_key, to_key) = (key_of(addr), key_of(to_addr));
    let lied = text
        .replace(&format!("+{addr} {from_key}"), &format!("+{addr} {to_key}"))
        .replace(
            &format!("+{to_addr} {to_key}"),
            &format!("+{to_addr} {from_key}"),
        );
    std::fs::write(index, lied).unwrap();
}

#[test]
fn wrong_hints_are_caught_by_verification() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let b = one(&ipam, "b");
    swap_owner(&index_path(dir.path()), &a.to_string(), &b.to_string());
    // The index now says a holds b's address and b holds a's.
    assert_eq!(one(&ipam, "a"), a);
    swap_owner(&index_path(dir.path()), &a.to_string(), &b.to_string());
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
    write(dir.path(), "10.7.0.50", b"c\r\neth0");
    assert_eq!(one(&ipam, "c"), ip("10.7.0.50"));
    write(dir.path(), "10.7.0.51", b"legacy");
    assert!(ipam.allocate("legacy", "eth0", &[]).is_err(), "duplicate");
    assert_eq!(ipam.release("legacy", "eth1").unwrap(), [ip("10.7.0.51")]);
    // Removed by someone else: no longer held.
    std::fs::remove_file(dir.path().join(NETWORK).join("10.7.0.50")).unwrap();
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
fn read_only_data_dir_without_index_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    std::fs::remove_file(index_path(dir.path())).unwrap();
    // The index cannot be written into a directory it has no place in; everything still works.
    std::fs::create_dir(index_path(dir.path())).unwrap();
    assert_eq!(one(&ipam, "a"), a);
    let b = one(&ipam, "b");
    assert_eq!(ipam.release("b", "eth0").unwrap(), [b]);
    ipam.check("a", "eth0").unwrap();
}

#[test]
fn an_index_that_is_a_fifo_or_a_symlink_is_never_opened() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = store(dir.path());
    let a = one(&ipam, "a");
    let path = index_path(dir.path());
    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(one(&ipam, "a"), a, "a FIFO would block a reader");
    std::fs::remove_file(&path).unwrap();
    let target = dir.path().join("elsewhere");
    std::os::unix::fs::symlink(&target, &path).unwrap();
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
    ipam.gc(&[("b".into(), "eth0".into())]).unwrap();
    assert!(ipam.check("a", "eth0").is_err());
    ipam.status().unwrap();
    assert_eq!(ipam.release("b", "eth0").unwrap(), [b]);
    assert!(ipam.check("b", "eth0").is_err());
}

#[test]
fn many_operations_compact_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "10.7.0.0/22"}));
    for n in 0..40 {
        one(&ipam, &format!("keep{n}"));
    }
    for n in 0..600 {
        one(&ipam, &format!("c{n}"));
        ipam.release(&format!("c{n}"), "eth0").unwrap();
    }
    let lines = std::fs::read_to_string(index_path(dir.path()))
        .unwrap()
        .lines()
        .count();
    // 40 live leases; without compaction there would be 1,240 records.
    assert!(lines < 700, "{lines} lines");
    for n in 0..40 {
        ipam.check(&format!("keep{n}"), "eth0").unwrap();
    }
    assert!(ipam.check("c7", "eth0").is_err());
}
