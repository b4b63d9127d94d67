//! Cache files are recycled instead of freed: after DEL the entry's inode
//! waits in `<cacheDir>/spare/`, and the next ADD's entry is written on it. The
//! results directory still holds nothing but entries, and GC clears the spare directory.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;

use cni_runtime::Attachment;
use common::{chain, Fake};

fn inodes(dir: &std::path::Path) -> BTreeSet<u64> {
    fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.metadata().unwrap().ino()).collect())
        .unwrap_or_default()
}

#[test]
fn add_after_del_writes_on_a_recycled_inode_and_leaves_only_entries() {
    let f = Fake::new();
    f.plugins(&["A", "B", "C"]);
    let net = chain("1.0.0", "");
    let rt = f.runtime();
    let spare = f.cache().join("spare");

    let first = Attachment::new("c1", "/run/netns/t1", "eth0");
    rt.add(&net, &first).unwrap();
    let entry = f.cache_file("net", "c1", "eth0");
    let entry_inode = fs::metadata(&entry).unwrap().ino();
    rt.del(&net, &first).unwrap();
    assert!(!entry.exists());
    let parked = inodes(&spare);
    assert!(parked.contains(&entry_inode), "the entry's inode is kept");

    let second = Attachment::new("c2", "/run/netns/t2", "eth0");
    rt.add(&net, &second).unwrap();
    let new_entry = fs::metadata(f.cache_file("net", "c2", "eth0")).unwrap();
    assert!(parked.contains(&new_entry.ino()), "ADD wrote on a spare");
    // Exactly the new entry's bytes: nothing of the longer old entry is left past them.
    let bytes = fs::read(f.cache_file("net", "c2", "eth0")).unwrap();
    let entry = cni_runtime::CacheEntry::decode(&bytes).unwrap();
    assert_eq!(entry.container_id, "c2");
    let names: Vec<String> = fs::read_dir(f.cache().join("results"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["net-c2-eth0"]);
    assert!(rt.cached_result(&net, &second).unwrap().is_some());

    // GC clears the spare directory; its stale DEL then parks the one entry it removed.
    fs::write(
        spare.join("pending-0000000000000000"),
        "left by a killed DEL",
    )
    .unwrap();
    rt.gc(&net, &[]).unwrap();
    assert_eq!(fs::read_dir(f.cache().join("results")).unwrap().count(), 0);
    let left: Vec<_> = fs::read_dir(&spare).unwrap().flatten().collect();
    assert!(left.len() <= 1, "{left:?}");
}
