//! The store under readers that take no lock, after failed writes, and in directories other
//! users could write to.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_ipam::{DiskStore, IpamError, LockedStore, TEMP_PREFIX};
use common::{files, ip, single, NETWORK};
use serde_json::json;

fn temp_files(data_dir: &std::path::Path) -> Vec<String> {
    files(data_dir)
        .into_keys()
        .filter(|name| name.starts_with(TEMP_PREFIX) || name.ends_with(".tmp"))
        .collect()
}

fn with_store<T>(data_dir: &std::path::Path, f: impl FnOnce(&LockedStore<'_>) -> T) -> T {
    let store = DiskStore::new(data_dir, NETWORK).unwrap();
    let locked = store.lock().unwrap();
    f(&locked)
}

// A reader that takes no lock (the Go plugin's readers, tools) sees a lease or the hint either
// whole or not at all. Before: the lease was created empty and then written, and readers
// caught the empty file.
#[test]
fn a_lockless_reader_never_sees_a_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let addr = ip("198.19.16.5");
    let id = "c".repeat(200);
    let content = format!("{id}\r\neth0");
    let lease = data.join(NETWORK).join("198.19.16.5");
    let hint = data.join(NETWORK).join("last_reserved_ip.0");
    with_store(&data, |_| ());

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = Arc::clone(&stop);
        let (lease, hint, content) = (lease.clone(), hint.clone(), content.clone());
        std::thread::spawn(move || {
            let (mut whole, mut bad) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match std::fs::read_to_string(&lease) {
                    Ok(text) if text == content => whole += 1,
                    Ok(text) => bad.push(format!("lease {text:?}")),
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
                }
                match std::fs::read_to_string(&hint) {
                    Ok(text) if text == "198.19.16.5" => {}
                    Ok(text) => bad.push(format!("hint {text:?}")),
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
                }
            }
            (whole, bad)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut cycles = 0;
    while Instant::now() < deadline {
        with_store(&data, |s| {
            assert!(s.reserve(&id, "eth0", addr, 0).unwrap());
            s.unreserve(addr).unwrap();
        });
        cycles += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (whole, bad) = reader.join().unwrap();
    eprintln!("{cycles} reservations, {whole} whole reads");
    assert!(whole > 0, "the reader never saw the lease");
    assert!(
        bad.is_empty(),
        "partial reads: {:?}",
        &bad[..bad.len().min(5)]
    );
    assert_eq!(temp_files(&data), Vec::<String>::new());
}

// A reservation that fails (address taken) leaves no temp file, and neither does a success.
#[test]
fn no_temp_file_stays_after_a_reservation() {
    let dir = tempfile::tempdir().unwrap();
    with_store(dir.path(), |s| {
        assert!(s.reserve("a", "eth0", ip("198.19.16.2"), 0).unwrap());
        assert!(!s.reserve("b", "eth0", ip("198.19.16.2"), 0).unwrap());
    });
    assert_eq!(files(dir.path())["198.19.16.2"], b"a\r\neth0");
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
}

// A temp file left by a killed writer is removed by the next lock holder, and never read as a
// lease meanwhile.
#[test]
fn a_killed_writers_temp_file_is_removed_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let ipam = single(dir.path(), json!({"subnet": "198.19.17.0/24"}));
    ipam.allocate("c1", "eth0", &[]).unwrap();
    let stale = format!("{TEMP_PREFIX}0123456789abcdef");
    common::write(dir.path(), &stale, b"c2\r\neth0");
    assert!(ipam.release("c2", "eth0").unwrap().is_empty());
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
    assert!(files(dir.path()).contains_key("198.19.17.2"));
}

#[test]
fn the_lock_file_is_created_0600() {
    let dir = tempfile::tempdir().unwrap();
    with_store(dir.path(), |_| ());
    let lock = dir.path().join(NETWORK).join("lock");
    let mode = std::fs::metadata(lock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o600, 0, "{mode:o}");
}

fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn refused(data_dir: &std::path::Path) -> String {
    let store = DiskStore::new(data_dir, NETWORK).unwrap();
    let message = match store.lock() {
        Err(e @ IpamError::UnsafeDirectory { .. }) => {
            assert_eq!(e.cni_code(), 5);
            e.to_string()
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a directory others can write to was used"),
    };
    message
}

// The data directory and the network directory are checked before anything is opened in
// them: writable by group or others, or owned by another user, is refused with the reason.
#[test]
fn directories_others_can_write_to_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let net = data.join(NETWORK);
    std::fs::create_dir_all(&net).unwrap();
    for (path, mode) in [
        (&data, 0o777),
        (&data, 0o1777),
        (&net, 0o775),
        (&net, 0o757),
    ] {
        chmod(path, mode);
        let msg = refused(&data);
        assert!(msg.contains(path.to_str().unwrap()), "{msg}");
        assert!(msg.contains("other users"), "{msg}");
        chmod(path, 0o755);
    }
    assert!(
        !net.join("lock").exists(),
        "nothing is created in a refused directory"
    );
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&net, Some(12345), None).unwrap();
        let msg = refused(&data);
        assert!(msg.contains("owned by uid 12345"), "{msg}");
        std::os::unix::fs::chown(&net, Some(0), None).unwrap();
    }
    DiskStore::new(&data, NETWORK).unwrap().lock().unwrap();
}
