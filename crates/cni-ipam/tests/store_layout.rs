//! Golden tests of the on-disk layout the Go plugin reads and writes.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{files, ip, single, write, NETWORK};
use serde_json::json;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn ipv4_lease_files_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    let got = ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(got[0].address.to_string(), "198.18.146.2/24");
    assert_eq!(got[0].gateway, Some(ip("198.18.146.1")));
    assert_eq!(got[0].range_set, 0);

    let listing = files(dir.path());
    let names: Vec<&str> = listing.keys().map(String::as_str).collect();
    assert_eq!(names, ["198.18.146.2", "last_reserved_ip.0", "lock"]);
    assert_eq!(listing["198.18.146.2"], b"ctr1\r\neth0");
    assert_eq!(listing["last_reserved_ip.0"], b"198.18.146.2");
    assert_eq!(listing["lock"], b"");

    let net_dir = dir.path().join(NETWORK);
    assert_eq!(mode(&net_dir.join("198.18.146.2")), 0o600);
    assert_eq!(mode(&net_dir.join("last_reserved_ip.0")), 0o600);
    // Created with 0600 and 0755 minus the umask, which can only remove bits.
    assert_eq!(mode(&net_dir.join("lock")) & !0o600, 0);
    assert_ne!(mode(&net_dir.join("lock")) & 0o600, 0);
    assert_eq!(mode(&net_dir) & !0o755, 0);
}

#[test]
fn ipv6_file_names_use_go_text_form() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(
        dir.path(),
        json!({"subnet": "2001:db8::/64", "rangeStart": "2001:DB8:0:0:1:0:0:0"}),
    );
    let first = ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(first[0].address.to_string(), "2001:db8:0:0:1::/64");
    let second = ipam.allocate("ctr2", "eth0", &[]).unwrap();
    assert_eq!(second[0].address.addr(), ip("2001:db8::1:0:0:1"));
    let listing = files(dir.path());
    assert_eq!(listing["2001:db8:0:0:1::"], b"ctr1\r\neth0");
    assert_eq!(listing["2001:db8::1:0:0:1"], b"ctr2\r\neth0");
    assert_eq!(listing["last_reserved_ip.0"], b"2001:db8::1:0:0:1");
}

#[test]
fn dual_stack_writes_one_hint_per_range_set() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = cni_ipam::HostLocal::new(&common::config(
        dir.path(),
        json!([[{"subnet": "198.18.146.0/24"}], [{"subnet": "fd00:1::/120"}]]),
    ))
    .unwrap();
    let got = ipam.allocate("ctr1", "net1", &[]).unwrap();
    assert_eq!(common::addrs(&got), [ip("198.18.146.2"), ip("fd00:1::2")]);
    assert_eq!(got[1].address.to_string(), "fd00:1::2/120");
    assert_eq!(got[1].range_set, 1);
    let listing = files(dir.path());
    let names: Vec<&str> = listing.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "198.18.146.2",
            "fd00:1::2",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock"
        ]
    );
    assert_eq!(listing["fd00:1::2"], b"ctr1\r\nnet1");
    assert_eq!(listing["last_reserved_ip.1"], b"fd00:1::2");
}

#[test]
fn mapped_requested_address_is_stored_as_ipv4() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    let got = ipam
        .allocate("ctr1", "eth0", &[ip("::ffff:198.18.146.9")])
        .unwrap();
    assert_eq!(got[0].address.to_string(), "198.18.146.9/24");
    let listing = files(dir.path());
    assert_eq!(listing["198.18.146.9"], b"ctr1\r\neth0");
    // Requested addresses move the hint too, as in Go.
    assert_eq!(listing["last_reserved_ip.0"], b"198.18.146.9");
}

#[test]
fn release_leaves_lock_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(ipam.release("ctr1", "eth0").unwrap(), [ip("198.18.146.2")]);
    let names: Vec<String> = files(dir.path()).into_keys().collect();
    assert_eq!(names, ["last_reserved_ip.0", "lock"]);
    // Releasing again is success with nothing released.
    assert!(ipam.release("ctr1", "eth0").unwrap().is_empty());
}

#[test]
fn stale_lock_file_is_reused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "lock", b"left over by someone");
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(files(dir.path())["lock"], b"left over by someone");
}

#[test]
fn hint_written_by_go_steers_round_robin() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "last_reserved_ip.0", b"198.18.146.100");
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    let got = ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(got[0].address.addr(), ip("198.18.146.101"));
}

#[test]
fn unusable_hints_restart_at_range_start() {
    for hint in [
        &b"garbage"[..],
        b"",
        b"198.19.25.9",
        b"fd00::5",
        b"198.18.146.0",
    ] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "last_reserved_ip.0", hint);
        let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
        let got = ipam.allocate("ctr1", "eth0", &[]).unwrap();
        assert_eq!(got[0].address.addr(), ip("198.18.146.2"), "hint {hint:?}");
    }
}

#[test]
fn hint_with_trailing_newline_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "last_reserved_ip.0", b"198.18.146.7\n");
    let ipam = single(dir.path(), json!({"subnet": "198.18.146.0/24"}));
    let got = ipam.allocate("ctr1", "eth0", &[]).unwrap();
    assert_eq!(got[0].address.addr(), ip("198.18.146.8"));
}
