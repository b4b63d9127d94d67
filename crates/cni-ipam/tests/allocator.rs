//! host-local operations against a real directory: order, idempotency, requested IPs, rollback,
//! legacy and odd lease files, CHECK, GC, STATUS, locking and unusable data directories.

mod common;

use std::fs::File;
use std::path::Path;
use std::time::Duration;

use cni_attribution::AttachmentId;
use cni_ipam::{ConfigError, HostLocal, IpamError, LeaseOwner};
use common::{addrs, config, files, ip, single, write, NETWORK};
use serde_json::json;

fn small(dir: &Path) -> HostLocal {
    single(
        dir,
        json!({"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.10", "rangeEnd": "198.18.128.12"}),
    )
}

fn one(ipam: &HostLocal, id: &str) -> std::net::IpAddr {
    ipam.allocate(id, "eth0", &[]).unwrap()[0].address.addr()
}

#[test]
fn round_robin_does_not_reuse_a_freed_address_until_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path());
    assert_eq!(one(&ipam, "a"), ip("198.18.128.10"));
    assert_eq!(one(&ipam, "b"), ip("198.18.128.11"));
    ipam.release("a", "eth0").unwrap();
    assert_eq!(one(&ipam, "c"), ip("198.18.128.12"));
    // Wraps around to the start, where the freed address is.
    assert_eq!(one(&ipam, "d"), ip("198.18.128.10"));
}

#[test]
fn exhaustion_names_the_range_set() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path());
    for id in ["a", "b", "c"] {
        one(&ipam, id);
    }
    let error = ipam.allocate("d", "eth0", &[]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "failed to allocate for range 0: no IP addresses available in range set: 198.18.128.10-198.18.128.12"
    );
    assert_eq!(error.cni_code(), 999);
    assert!(matches!(
        error,
        IpamError::RangeSetFailed { index: 0, ref source } if matches!(**source, IpamError::RangeSetExhausted { .. })
    ));
}

#[test]
fn gateway_network_and_broadcast_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(
        dir.path(),
        json!({"subnet": "198.18.128.0/29", "rangeStart": "198.18.128.0", "rangeEnd": "198.18.128.7", "gateway": "198.18.128.4"}),
    );
    let got: Vec<_> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|id| one(&ipam, id))
        .collect();
    assert_eq!(
        got,
        [
            ip("198.18.128.1"),
            ip("198.18.128.2"),
            ip("198.18.128.3"),
            ip("198.18.128.5"),
            ip("198.18.128.6")
        ]
    );
    assert!(ipam.allocate("f", "eth0", &[]).is_err());
}

#[test]
fn ranges_of_a_set_are_walked_in_order_and_wrap() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = HostLocal::new(&config(
        dir.path(),
        json!([[
            {"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.100", "rangeEnd": "198.18.128.101"},
            {"subnet": "198.18.133.0/24", "rangeStart": "198.18.133.1", "rangeEnd": "198.18.133.2", "gateway": "198.18.133.254"}
        ]]),
    ))
    .unwrap();
    let got: Vec<_> = ["a", "b", "c"].iter().map(|id| one(&ipam, id)).collect();
    assert_eq!(
        got,
        [
            ip("198.18.128.100"),
            ip("198.18.128.101"),
            ip("198.18.133.1")
        ]
    );
    let d = ipam.allocate("d", "eth0", &[]).unwrap();
    assert_eq!(d[0].address.to_string(), "198.18.133.2/24");
    assert_eq!(d[0].gateway, Some(ip("198.18.133.254")));
    ipam.release("a", "eth0").unwrap();
    assert_eq!(one(&ipam, "e"), ip("198.18.128.100"));
}

#[test]
fn repeated_add_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = HostLocal::new(&config(
        dir.path(),
        json!([[{"subnet": "198.18.144.0/24"}], [{"subnet": "fd00::/64"}]]),
    ))
    .unwrap();
    let first = ipam.allocate("ctr", "eth0", &[]).unwrap();
    let before = files(dir.path());
    let again = ipam.allocate("ctr", "eth0", &[]).unwrap();
    assert_eq!(first, again);
    assert_eq!(files(dir.path()), before);
    // Another interface of the same container is another attachment.
    let other = ipam.allocate("ctr", "net1", &[]).unwrap();
    assert_ne!(addrs(&other), addrs(&first));
}

#[test]
fn requested_address_is_honoured_once() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path());
    let got = ipam.allocate("a", "eth0", &[ip("198.18.128.11")]).unwrap();
    assert_eq!(addrs(&got), [ip("198.18.128.11")]);
    // The same request again by the same attachment is idempotent ...
    assert_eq!(
        ipam.allocate("a", "eth0", &[ip("198.18.128.11")]).unwrap(),
        got
    );
    // ... by another one it is refused.
    let error = ipam
        .allocate("b", "eth0", &[ip("198.18.128.11")])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "failed to allocate for range 0: requested IP address 198.18.128.11 is not available in range set 198.18.128.10-198.18.128.12"
    );
    // Round robin continues after the requested address.
    assert_eq!(one(&ipam, "c"), ip("198.18.128.12"));
}

#[test]
fn failed_add_releases_what_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = HostLocal::new(&config(
        dir.path(),
        json!([[{"subnet": "198.18.144.0/24"}], [{"subnet": "fd00::/126"}]]),
    ))
    .unwrap();
    // fd00::/126 has exactly two addresses to give: ::2 and ::3.
    one(&ipam, "a");
    one(&ipam, "b");
    let before: Vec<String> = files(dir.path())
        .into_keys()
        .filter(|n| n.contains('.') && !n.starts_with("last"))
        .collect();
    let error = ipam.allocate("c", "eth0", &[]).unwrap_err();
    assert!(
        matches!(error, IpamError::RangeSetFailed { index: 1, .. }),
        "{error}"
    );
    let after: Vec<String> = files(dir.path())
        .into_keys()
        .filter(|n| n.contains('.') && !n.starts_with("last"))
        .collect();
    assert_eq!(
        before, after,
        "the IPv4 lease of the failed ADD must be gone"
    );
    assert!(ipam.check("c", "eth0").is_err());
}

#[test]
fn failed_retry_keeps_the_leases_of_the_earlier_add() {
    let dir = tempfile::tempdir().unwrap();
    let v4_only = HostLocal::new(&config(
        dir.path(),
        json!([[{"subnet": "198.18.144.0/24"}]]),
    ))
    .unwrap();
    let earlier = v4_only.allocate("ctr", "eth0", &[]).unwrap();
    let dual = HostLocal::new(&config(
        dir.path(),
        json!([[{"subnet": "198.18.144.0/24"}], [{"subnet": "fd00::/64"}]]),
    ))
    .unwrap();
    dual.allocate("ctr", "eth0", &[ip("fd00::1")]).unwrap_err();
    let held = dual.check("ctr", "eth0").unwrap();
    assert_eq!(
        held.iter().map(|l| l.ip).collect::<Vec<_>>(),
        addrs(&earlier)
    );
}

#[test]
fn legacy_lease_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "198.18.128.10", b"ctr1");
    let ipam = small(dir.path());
    // Found by CHECK for any interface of that container.
    assert_eq!(
        ipam.check("ctr1", "eth9").unwrap()[0].owner,
        LeaseOwner::Legacy {
            container_id: "ctr1".into()
        }
    );
    // Duplicate allocation in the same set is refused, as in Go.
    let error = ipam.allocate("ctr1", "eth0", &[]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("198.18.128.10 has been allocated to ctr1"),
        "{error}"
    );
    // Another container skips the address.
    assert_eq!(one(&ipam, "ctr2"), ip("198.18.128.11"));
    // DEL falls back to the legacy file when no current-format file matches.
    assert_eq!(ipam.release("ctr1", "eth0").unwrap(), [ip("198.18.128.10")]);
}

#[test]
fn release_prefers_current_format_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "198.18.128.10", b"ctr1\r\neth0");
    write(dir.path(), "198.18.128.11", b"ctr1");
    write(dir.path(), "198.18.128.12", b"ctr1\r\neth1");
    let ipam = small(dir.path());
    assert_eq!(ipam.release("ctr1", "eth0").unwrap(), [ip("198.18.128.10")]);
    assert_eq!(ipam.release("ctr1", "eth0").unwrap(), [ip("198.18.128.11")]);
    assert!(files(dir.path()).contains_key("198.18.128.12"));
}

#[test]
fn odd_lease_contents() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "198.18.128.10", b"ctr1\r\neth0\n");
    write(dir.path(), "198.18.128.11", b"\x00\xffgarbage\nmore");
    write(dir.path(), "198.18.128.12", b"");
    let ipam = small(dir.path());
    // A trailing newline still matches, for CHECK and for an idempotent ADD.
    assert_eq!(ipam.check("ctr1", "eth0").unwrap().len(), 1);
    assert_eq!(
        addrs(&ipam.allocate("ctr1", "eth0", &[]).unwrap()),
        [ip("198.18.128.10")]
    );
    // Garbage and empty files are someone's reservations: never handed out, never matched.
    assert!(ipam.allocate("ctr2", "eth0", &[]).is_err());
    assert!(ipam.check("garbage", "eth0").is_err());
    assert_eq!(ipam.release("ctr1", "eth0").unwrap(), [ip("198.18.128.10")]);
    // GC removes them because no valid attachment owns them.
    let released: Vec<_> = ipam.gc(&[]).unwrap().into_iter().map(|l| l.ip).collect();
    assert_eq!(released, [ip("198.18.128.11"), ip("198.18.128.12")]);
}

#[test]
fn a_directory_named_like_an_address_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(NETWORK).join("198.18.128.10")).unwrap();
    let ipam = small(dir.path());
    assert_eq!(one(&ipam, "a"), ip("198.18.128.11"));
    ipam.gc(&[]).unwrap();
    assert!(dir.path().join(NETWORK).join("198.18.128.10").is_dir());
}

#[test]
fn check_and_check_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path());
    let error = ipam.check("ctr", "eth0").unwrap_err();
    assert_eq!(error.cni_code(), 3);
    assert_eq!(
        error.to_string(),
        "host-local: Failed to find address added by container ctr"
    );
    one(&ipam, "ctr");
    assert_eq!(
        ipam.check("ctr", "eth0").unwrap()[0].ip,
        ip("198.18.128.10")
    );
    ipam.check_addresses("ctr", "eth0", &[ip("198.18.128.10")])
        .unwrap();
    let error = ipam
        .check_addresses("ctr", "eth0", &[ip("198.18.128.11")])
        .unwrap_err();
    assert!(matches!(error, IpamError::AddressNotReserved { .. }));
    assert_eq!(error.cni_code(), 3);
    assert!(ipam.check("ctr", "eth1").is_err());
}

#[test]
fn gc_keeps_valid_attachments_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.18.128.0/24"}));
    for id in ["keep", "drop"] {
        one(&ipam, id);
    }
    write(dir.path(), "198.18.128.50", b"legacykeep");
    write(dir.path(), "198.18.128.51", b"legacydrop");
    write(dir.path(), "README", b"drop");
    write(dir.path(), "last_reserved_ip.7", b"198.18.128.9");
    let valid = [
        AttachmentId::new(NETWORK, "keep", "eth0"),
        AttachmentId::new(NETWORK, "legacykeep", "eth3"),
    ];
    let mut released: Vec<_> = ipam.gc(&valid).unwrap().into_iter().map(|l| l.ip).collect();
    released.sort();
    assert_eq!(released, [ip("198.18.128.3"), ip("198.18.128.51")]);
    let names: Vec<String> = files(dir.path()).into_keys().collect();
    assert_eq!(
        names,
        [
            "198.18.128.2",
            "198.18.128.50",
            "README",
            "last_reserved_ip.0",
            "last_reserved_ip.7",
            "lock"
        ]
    );
    assert_eq!(files(dir.path())["last_reserved_ip.0"], b"198.18.128.3");
    // A valid attachment with another interface name does not keep a current-format lease.
    let released = ipam
        .gc(&[AttachmentId::new(NETWORK, "keep", "eth1")])
        .unwrap();
    assert_eq!(released.len(), 2);
}

#[test]
fn status_reports_exhaustion() {
    let dir = tempfile::tempdir().unwrap();
    // 198.18.128.0/30: .1 is the gateway, .3 the broadcast address, so only .2 can be handed out.
    let ipam = single(dir.path(), json!({"subnet": "198.18.128.0/30"}));
    ipam.status().unwrap();
    one(&ipam, "a");
    let error = ipam.status().unwrap_err();
    assert!(
        matches!(error, IpamError::StatusExhausted { index: 0, .. }),
        "{error}"
    );
    assert_eq!(error.cni_code(), 50);
    ipam.release("a", "eth0").unwrap();
    ipam.status().unwrap();
    // Leases outside the bounds (left by an older config) do not count.
    write(dir.path(), "198.18.128.9", b"x\r\neth0");
    ipam.status().unwrap();
    // The status probe leaves nothing behind.
    let names: Vec<String> = files(dir.path()).into_keys().collect();
    assert_eq!(names, ["198.18.128.9", "last_reserved_ip.0", "lock"]);
}

#[test]
fn data_dir_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let ipam = single(&file, json!({"subnet": "198.18.128.0/24"}));
    let error = ipam.allocate("a", "eth0", &[]).unwrap_err();
    assert!(matches!(error, IpamError::Io { .. }), "{error}");
    assert_eq!(error.cni_code(), 5);
    let error = ipam.status().unwrap_err();
    assert!(
        matches!(error, IpamError::StatusNotWritable { .. }),
        "{error}"
    );
    assert_eq!(error.cni_code(), 50);
}

/// Root ignores permission bits, so an unwritable directory is simulated with procfs: `/proc/self`
/// exists but accepts no new files, and nothing can be created directly under `/proc`.
#[test]
fn data_dir_on_procfs() {
    let ranges = json!([[{"subnet": "198.18.128.0/24"}]]);
    let existing = HostLocal::from_parts(
        config(Path::new("/"), ranges.clone()).range_sets,
        "self",
        Path::new("/proc"),
    )
    .unwrap();
    let error = existing.status().unwrap_err();
    assert!(
        matches!(error, IpamError::StatusNotWritable { .. }),
        "{error}"
    );
    assert_eq!(error.cni_code(), 50);
    assert_eq!(
        existing.allocate("a", "eth0", &[]).unwrap_err().cni_code(),
        5
    );

    let missing = HostLocal::from_parts(
        config(Path::new("/"), ranges).range_sets,
        "rcni-ipam-test",
        Path::new("/proc"),
    )
    .unwrap();
    assert!(matches!(
        missing.status().unwrap_err(),
        IpamError::StatusNotWritable { .. }
    ));
}

#[test]
fn identifiers_that_could_escape_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path());
    for id in ["../x", "a/b", "", ".hidden", "a\r\nb", "a\0"] {
        let error = ipam.allocate(id, "eth0", &[]).unwrap_err();
        assert!(
            matches!(error, IpamError::InvalidContainerId { .. }),
            "{id:?}"
        );
        assert_eq!(error.cni_code(), 4);
        assert!(ipam.release(id, "eth0").is_err());
        assert!(ipam.check(id, "eth0").is_err());
    }
    for ifname in ["", "..", "a/b", "e\r\n", "0123456789abcdef"] {
        let error = ipam.allocate("ctr", ifname, &[]).unwrap_err();
        assert!(
            matches!(error, IpamError::InvalidIfName { .. }),
            "{ifname:?}"
        );
    }
    for network in ["..", "../etc", "a/b", "", "x\0"] {
        let error =
            HostLocal::from_parts(ipam.range_sets().to_vec(), network, dir.path()).unwrap_err();
        assert!(
            matches!(
                error,
                IpamError::Config(ConfigError::InvalidNetworkName { .. })
            ),
            "{network:?}"
        );
        assert_eq!(error.cni_code(), 7);
    }
    // Nothing was created anywhere.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn lock_is_a_flock_on_the_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = small(dir.path()).with_lock_timeout(Some(Duration::from_millis(100)));
    one(&ipam, "a");
    // Another open file description holding flock on `lock`, as the Go plugin would.
    let holder = File::open(dir.path().join(NETWORK).join("lock")).unwrap();
    holder.lock().unwrap();
    let error = ipam.allocate("b", "eth0", &[]).unwrap_err();
    assert!(matches!(error, IpamError::LockTimeout { .. }), "{error}");
    assert_eq!(error.cni_code(), 11);
    holder.unlock().unwrap();
    assert_eq!(one(&ipam, "b"), ip("198.18.128.11"));
}

#[test]
fn resolv_conf_from_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolv.conf");
    std::fs::write(&path, "nameserver 1.1.1.1\nsearch a b\n").unwrap();
    let value = json!({"name": "n", "ipam": {"subnet": "198.18.128.0/24", "resolvConf": path}});
    let config = cni_ipam::HostLocalConfig::parse(value.to_string().as_bytes(), None).unwrap();
    let dns = cni_ipam::parse_resolv_conf(config.resolv_conf.as_deref().unwrap()).unwrap();
    assert_eq!(dns.nameservers, ["1.1.1.1"]);
    assert_eq!(dns.search, ["a", "b"]);
}

/// The round-robin hint is overwritten in place (its inode stays, as with Go's write), and a
/// shorter address leaves no digit of a longer one behind.
#[test]
fn the_hint_is_rewritten_in_place_and_cut_to_length() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(
        dir.path(),
        json!({"subnet": "198.18.128.0/24", "rangeStart": "198.18.128.99"}),
    );
    let hint = dir.path().join(NETWORK).join("last_reserved_ip.0");
    assert_eq!(one(&ipam, "a"), ip("198.18.128.99"));
    let inode = std::fs::metadata(&hint).unwrap().ino();
    assert_eq!(one(&ipam, "b"), ip("198.18.128.100"));
    assert_eq!(std::fs::read(&hint).unwrap(), b"198.18.128.100");
    ipam.release("a", "eth0").unwrap();
    write(dir.path(), "last_reserved_ip.0", b"198.18.128.254");
    // Wraps to the start of the range: the shorter text replaces the longer one whole.
    assert_eq!(one(&ipam, "c"), ip("198.18.128.99"));
    assert_eq!(std::fs::read(&hint).unwrap(), b"198.18.128.99");
    assert_eq!(std::fs::metadata(&hint).unwrap().ino(), inode);
}
