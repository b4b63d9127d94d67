//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use cni_ipam::{HostLocal, HostLocalConfig};
use serde_json::{json, Value};

pub const NETWORK: &str = "net1";

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A config for `NETWORK` with the given range sets, stored under `data_dir`.
pub fn config(data_dir: &Path, ranges: Value) -> HostLocalConfig {
    let value = json!({
        "cniVersion": "1.1.0",
        "name": NETWORK,
        "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": ranges}
    });
    HostLocalConfig::parse(value.to_string().as_bytes(), None).unwrap()
}

/// host-local over a single range.
pub fn single(data_dir: &Path, range: Value) -> HostLocal {
    HostLocal::new(&config(data_dir, json!([[range]]))).unwrap()
}

/// Every file of the network directory with its bytes.
pub fn files(data_dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(data_dir.join(NETWORK))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let bytes = if entry.file_type().unwrap().is_file() {
                std::fs::read(entry.path()).unwrap()
            } else {
                b"<dir>".to_vec()
            };
            (name, bytes)
        })
        .collect()
}

/// Writes a file into the network directory (creating it), as another implementation would.
pub fn write(data_dir: &Path, name: &str, bytes: &[u8]) {
    let dir = data_dir.join(NETWORK);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// The addresses of allocations, without prefix.
pub fn addrs(allocations: &[cni_ipam::Allocation]) -> Vec<IpAddr> {
    allocations.iter().map(|a| a.address.addr()).collect()
}
