//! The network the lab proves and the plugins it runs.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use cni_runtime::Network;

use super::Prepared;
use crate::scratch::Scratch;

/// Every plugin name the multi-call binary may answer to.
pub const PLUGIN_NAMES: &[&str] = &[
    "loopback",
    "bridge",
    "ptp",
    "host-local",
    "static",
    "portmap",
    "firewall",
    "tuning",
    "bandwidth",
    "macvlan",
    "ipvlan",
    "vlan",
    "host-device",
    "dummy",
    "tap",
    "sbr",
    "vrf",
    "dhcp",
];

/// The built-in network: bridge + host-local on a subnet that exists only inside the lab.
fn default_conflist() -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": "rcni-lab",
        "plugins": [{
            "type": "bridge",
            "bridge": "rcnilab0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "198.18.203.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}]
            }
        }]
    })
}

/// `bin` as given, or a directory of links named after every plugin pointing at the
/// `rcni-plugins` binary installed next to this executable.
pub fn plugin_dir(bin: Option<&Path>, scratch: &Scratch) -> Result<PathBuf, String> {
    if let Some(b) = bin {
        return Ok(b.to_path_buf());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let multi = exe.with_file_name("rcni-plugins");
    if !multi.is_file() {
        return Err(format!(
            "{} not found; build it (cargo build -p cni-plugins) or pass --bin-dir",
            multi.display()
        ));
    }
    let dir = scratch.path().join("bin");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for name in PLUGIN_NAMES {
        std::os::unix::fs::symlink(&multi, dir.join(name)).map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

/// tuning's backups go to `/run/cni/tuning` unless `dataDir` says otherwise: the lab's go to
/// its scratch directory instead, so nothing outside it changes.
pub fn keep_tuning_in_scratch(plugin: &mut Value, scratch: &Scratch) {
    let Some(p) = plugin.as_object_mut() else {
        return;
    };
    if p.get("type").and_then(Value::as_str) != Some("tuning") {
        return;
    }
    let unset = p
        .get("dataDir")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if unset {
        let dir = scratch.path().join("tuning");
        p.insert("dataDir".into(), json!(dir.display().to_string()));
    }
}

/// Loads the conflist and keeps host-local's leases inside the scratch directory: a config
/// without `dataDir` would otherwise write to /var/lib/cni on the real host.
pub fn prepare(config: Option<&Path>, scratch: &Scratch) -> Result<Prepared, String> {
    let raw = match config {
        None => serde_json::to_vec_pretty(&default_conflist()).map_err(|e| e.to_string())?,
        Some(p) => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
    };
    let mut list: Value = serde_json::from_slice(&raw).map_err(|e| match config {
        Some(p) => format!("{}: {e}", p.display()),
        None => e.to_string(),
    })?;
    let lease_root = scratch.path().join("ipam");
    let mut note = match config {
        None => "built-in bridge + host-local, plus the loopback network on lo".to_string(),
        Some(p) => format!("{}, plus the loopback network on lo", p.display()),
    };
    let mut data_dir = None;
    if let Some(plugins) = list.get_mut("plugins").and_then(Value::as_array_mut) {
        for p in plugins.iter_mut() {
            keep_tuning_in_scratch(p, scratch);
        }
        for p in plugins {
            let Some(ipam) = p.get_mut("ipam").and_then(Value::as_object_mut) else {
                continue;
            };
            if ipam.get("type").and_then(Value::as_str) != Some("host-local") {
                continue;
            }
            let given = ipam
                .get("dataDir")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if given.is_empty() {
                ipam.insert("dataDir".into(), json!(lease_root.display().to_string()));
                data_dir = Some(lease_root.clone());
                if config.is_some() {
                    note.push_str("; host-local dataDir set to the lab's scratch dir");
                }
            } else {
                data_dir = Some(PathBuf::from(given));
            }
        }
    }
    let bytes = serde_json::to_vec(&list).map_err(|e| e.to_string())?;
    let network = Network::from_list_bytes(&bytes).map_err(|e| e.to_string())?;
    let lease_dir = data_dir.map(|d| d.join(network.name()));
    Ok(Prepared {
        network,
        lease_dir,
        note,
        list,
        raw,
        source: config.map_or("built-in".into(), |p| p.display().to_string()),
    })
}
