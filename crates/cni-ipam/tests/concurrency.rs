//! Many allocators on one data directory at once: the flock on `lock` (one open file description
//! per operation) and the exclusive creates keep every address unique.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Barrier};

use cni_ipam::HostLocal;
use common::{addrs, config, files};
use serde_json::json;

#[test]
fn threads_never_share_an_address() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let ranges = json!([[{"subnet": "198.18.240.0/24"}], [{"subnet": "fd07::/120"}]]);
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            // Each thread builds its own allocator, like separate plugin processes would.
            let ipam = HostLocal::new(&config(dir.path(), ranges.clone())).unwrap();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut got: Vec<IpAddr> = Vec::new();
                for n in 0..PER_THREAD {
                    let id = format!("t{t}-c{n}");
                    got.extend(addrs(&ipam.allocate(&id, "eth0", &[]).unwrap()));
                    // Churn: release every third attachment again.
                    if n % 3 == 0 {
                        let released = ipam.release(&id, "eth0").unwrap();
                        got.retain(|ip| !released.contains(ip));
                    }
                }
                got
            })
        })
        .collect();
    let all: Vec<IpAddr> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let unique: BTreeSet<IpAddr> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "an address was handed out twice");
    let kept_per_thread = PER_THREAD - PER_THREAD.div_ceil(3);
    assert_eq!(all.len(), THREADS * kept_per_thread * 2);
    let lease_files = files(dir.path())
        .into_keys()
        .filter(|name| name.parse::<IpAddr>().is_ok())
        .count();
    assert_eq!(lease_files, all.len());
}
