//! Cache interop with Go libcni (`cacheAdd`, `getCachedResult`, `GetCachedAttachments` in
//! `libcni/api.go`). The fixtures in `tests/fixtures/` are entries in the exact byte layout libcni
//! writes: `go-v1.3-*` as libcni ≥ v1.2 writes it (with `netns`), `go-v1.1.2-*` as the Debian
//! libcni v1.1.2 writes it (no `netns`, a 0.4.0 result with `"dns":{}`).

mod common;

use std::fs;
use std::path::Path;

use cni_runtime::{Attachment, CacheEntry, Network, ResultCache};
use common::Fake;
use serde_json::json;

fn fixture(name: &str) -> Vec<u8> {
    fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

/// Installs a fixture as the cache entry `<net>-<cid>-<if>` and returns the network its
/// `config` holds.
fn install(f: &Fake, fixture_name: &str, file: &str) -> Network {
    let bytes = fixture(fixture_name);
    let dir = f.cache().join("results");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(file), &bytes).unwrap();
    let entry = CacheEntry::decode(&bytes).unwrap();
    Network::from_list_bytes(&entry.config).unwrap()
}

// Decoding and re-encoding a Go entry gives the same bytes.
#[test]
fn go_entries_round_trip_byte_for_byte() {
    for name in ["go-v1.3-dbnet-ctr1-eth0", "go-v1.1.2-oldnet-ctr2-eth0"] {
        let bytes = fixture(name);
        let entry = CacheEntry::decode(&bytes).unwrap();
        assert_eq!(
            entry.to_go_json().unwrap().as_bytes(),
            bytes.as_slice(),
            "{name}"
        );
    }
}

// What rcni writes for an ADD equals what libcni writes for the same ADD.
#[test]
fn rcni_writes_the_go_layout() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let golden = fixture("go-v1.3-dbnet-ctr1-eth0");
    let entry = CacheEntry::decode(&golden).unwrap();
    let net = Network::from_list_bytes(&entry.config).unwrap();
    // The last plugin reports the result the fixture holds (key order shuffled on purpose).
    f.answer(
        "C",
        "ADD",
        r#"{"routes":[{"dst":"0.0.0.0/0"}],"cniVersion":"1.1.0","ips":[{"interface":0,"gateway":"198.18.0.1","address":"198.18.0.5/16"}],"interfaces":[{"sandbox":"/run/netns/x","name":"eth0"}]}"#,
        0,
    );
    let att = Attachment::new("ctr1", "/run/netns/x", "eth0")
        .with_args(vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAME".into(), "p".into()),
        ])
        .with_capability(
            "portMappings",
            json!([{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]),
        )
        .with_capability("mac", json!("00:11:22:33:44:55"));
    f.runtime().add(&net, &att).unwrap();
    let written = fs::read(f.cache_file("dbnet", "ctr1", "eth0")).unwrap();
    assert_eq!(
        String::from_utf8(written).unwrap(),
        String::from_utf8(golden).unwrap()
    );
}

// Go entries drive CHECK and DEL: prevResult from the entry, converted to the list version.
#[test]
fn go_entry_drives_check_and_del() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let net = install(&f, "go-v1.3-dbnet-ctr1-eth0", "dbnet-ctr1-eth0");
    let rt = f.runtime();
    let att = Attachment::new("ctr1", "/run/netns/x", "eth0");
    rt.check(&net, &att).unwrap();
    assert_eq!(f.calls_str(), ["A CHECK", "B CHECK", "C CHECK"]);
    let prev = &f.stdin(1)["prevResult"];
    assert_eq!(prev["ips"][0]["address"], "198.18.0.5/16");
    assert_eq!(prev["cniVersion"], "1.1.0");
    f.clear_log();
    // DEL with the cached arguments, as a runtime repeating the ADD parameters does.
    rt.del_with_cached_args(&net, &Attachment::new("ctr1", "", "eth0"))
        .unwrap();
    assert_eq!(f.calls_str(), ["C DEL", "B DEL", "A DEL"]);
    assert_eq!(f.env(1)["CNI_ARGS"], "IgnoreUnknown=1;K8S_POD_NAME=p");
    assert_eq!(f.env(1)["CNI_NETNS"], "/run/netns/x");
    assert_eq!(f.stdin(3)["runtimeConfig"]["mac"], "00:11:22:33:44:55");
    assert_eq!(f.stdin(1)["prevResult"]["interfaces"][0]["name"], "eth0");
    assert!(!f.cache_file("dbnet", "ctr1", "eth0").exists());
}

// A v1.1.2 entry (0.4.0 result, no netns) is listed and converted.
#[test]
fn old_go_entry_is_listed_and_converted() {
    let f = Fake::new();
    f.plugins(&["A", "B"]);
    let net = install(&f, "go-v1.1.2-oldnet-ctr2-eth0", "oldnet-ctr2-eth0");
    let cache = ResultCache::new(f.cache());
    let listed = cache.attachments(Some("ctr2"));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].network_name, "oldnet");
    assert_eq!(listed[0].netns, Path::new(""));
    let att = Attachment::new("ctr2", "", "eth0");
    let prev = cache
        .load_result("oldnet", &att, cni_runtime::SpecVersion::V1_0_0)
        .unwrap()
        .unwrap();
    assert!(prev["ips"][0].get("version").is_none());
    f.runtime().check(&net, &att).unwrap();
    assert_eq!(f.stdin(1)["prevResult"]["ips"][0]["version"], "4");
    // GC with no valid attachments deletes it (cnitool semantics).
    f.clear_log();
    f.runtime().gc(&net, &[]).unwrap();
    assert_eq!(f.calls_str(), ["B DEL", "A DEL"]);
    assert!(cache.attachments(None).is_empty());
}

// The netns is kept byte for byte: a UTF-8 path (even one Go would escape nothing in, with
// spaces and non-ASCII) comes back from the entry unchanged and reaches DEL as CNI_NETNS; one
// that is not UTF-8 cannot be written in the entry, so ADD is refused (code 4) before any
// plugin runs and nothing is cached.
#[test]
fn netns_paths_round_trip_or_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let net = common::chain("1.0.0", "");
    let rt = f.runtime();
    let odd = Path::new("/run/netns/pod ü\u{1F600}\"x");
    rt.add(&net, &Attachment::new("c1", odd, "eth0")).unwrap();
    let listed = ResultCache::new(f.cache()).attachments(Some("c1"));
    assert_eq!(listed[0].netns.as_os_str(), odd.as_os_str());
    f.clear_log();
    rt.del_with_cached_args(&net, &Attachment::new("c1", "", "eth0"))
        .unwrap();
    assert_eq!(f.env(1)["CNI_NETNS"], odd.to_str().unwrap());

    f.clear_log();
    let bad = Path::new(std::ffi::OsStr::from_bytes(b"/run/netns/\xffx"));
    let e = rt
        .add(&net, &Attachment::new("c2", bad, "eth0"))
        .unwrap_err();
    assert_eq!(e.code(), 4, "{e}"); // invalid environment variables
    assert!(
        e.to_string().contains("CNI_NETNS is not valid UTF-8"),
        "{e}"
    );
    assert!(f.calls().is_empty());
    assert!(ResultCache::new(f.cache())
        .attachments(Some("c2"))
        .is_empty());
}
