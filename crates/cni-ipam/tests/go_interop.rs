//! Sharing a data directory with the Go host-local binary (Debian's containernetworking-plugins).
//! Skipped with a message when the binary is not installed.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use cni_ipam::HostLocal;
use common::{files, ip, NETWORK};
use serde_json::{json, Value};

const GO_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

fn go_host_local() -> Option<PathBuf> {
    let found = GO_DIRS
        .iter()
        .map(|dir| Path::new(dir).join("host-local"))
        .find(|path| path.is_file());
    if found.is_none() {
        eprintln!(
            "skipped: Go host-local not found in {GO_DIRS:?} (package containernetworking-plugins)"
        );
    }
    found
}

fn net_config(data_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "type": "bridge",
        "ipam": {"type": "host-local", "dataDir": data_dir, "ranges": [[{"subnet": "198.19.16.0/24"}]]}
    })
}

/// Runs the Go plugin; returns its stdout on success, panics with its output otherwise.
fn go(binary: &Path, command: &str, id: &str, config: &Value) -> Value {
    go_with_args(binary, command, id, config, "")
}

/// Starts the Go plugin with `CNI_ARGS`; its stdin is written and closed.
fn spawn_go(
    binary: &Path,
    command: &str,
    id: &str,
    config: &Value,
    cni_args: &str,
) -> std::process::Child {
    let mut child = Command::new(binary)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", "/var/run/netns/rcni-ipam-interop-unused")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_ARGS", cni_args)
        .env("CNI_PATH", binary.parent().unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(config.to_string().as_bytes())
        .unwrap();
    child
}

fn go_with_args(binary: &Path, command: &str, id: &str, config: &Value, cni_args: &str) -> Value {
    go_output(spawn_go(binary, command, id, config, cni_args), command, id)
}

fn go_output(child: std::process::Child, command: &str, id: &str) -> Value {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Go host-local {command} {id} failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or(Value::Null)
}

fn go_ip(result: &Value) -> IpAddr {
    let address = result["ips"][0]["address"].as_str().unwrap();
    address.split('/').next().unwrap().parse().unwrap()
}

#[test]
fn alternating_with_go_keeps_round_robin_and_recognises_leases() {
    let Some(binary) = go_host_local() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = net_config(dir.path());
    let ipam = HostLocal::new(
        &cni_ipam::HostLocalConfig::parse(config.to_string().as_bytes(), None).unwrap(),
    )
    .unwrap();

    assert_eq!(
        go_ip(&go(&binary, "ADD", "goctr1", &config)),
        ip("198.19.16.2")
    );
    assert_eq!(files(dir.path())["198.19.16.2"], b"goctr1\r\neth0");
    // We continue after Go's last_reserved_ip.0 ...
    assert_eq!(
        ipam.allocate("rsctr1", "eth0", &[]).unwrap()[0]
            .address
            .addr(),
        ip("198.19.16.3")
    );
    // ... and Go continues after ours.
    assert_eq!(
        go_ip(&go(&binary, "ADD", "goctr2", &config)),
        ip("198.19.16.4")
    );

    // Go's CHECK finds our lease, Go's DEL removes it.
    go(&binary, "CHECK", "rsctr1", &config);
    go(&binary, "DEL", "rsctr1", &config);
    assert!(!files(dir.path()).contains_key("198.19.16.3"));
    // Our CHECK and DEL work on Go's leases.
    ipam.check("goctr1", "eth0").unwrap();
    assert_eq!(ipam.release("goctr1", "eth0").unwrap(), [ip("198.19.16.2")]);
    assert!(ipam.check("goctr1", "eth0").is_err());
}

#[test]
fn concurrent_with_go_never_share_an_address() {
    let Some(binary) = go_host_local() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = net_config(dir.path());
    let parsed = cni_ipam::HostLocalConfig::parse(config.to_string().as_bytes(), None).unwrap();
    let mut handles = Vec::new();
    for t in 0..3 {
        let ipam = HostLocal::new(&parsed).unwrap();
        handles.push(std::thread::spawn(move || {
            (0..10)
                .map(|n| {
                    ipam.allocate(&format!("rs{t}-{n}"), "eth0", &[]).unwrap()[0]
                        .address
                        .addr()
                })
                .collect::<Vec<_>>()
        }));
    }
    for t in 0..3 {
        let binary = binary.clone();
        let config = config.clone();
        handles.push(std::thread::spawn(move || {
            (0..10)
                .map(|n| go_ip(&go(&binary, "ADD", &format!("go{t}-{n}"), &config)))
                .collect::<Vec<_>>()
        }));
    }
    let all: Vec<IpAddr> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let unique: BTreeSet<IpAddr> = all.iter().copied().collect();
    assert_eq!(all.len(), 60);
    assert_eq!(unique.len(), 60, "an address was handed out twice");
}

fn rcni(config: &Value) -> HostLocal {
    HostLocal::new(&cni_ipam::HostLocalConfig::parse(config.to_string().as_bytes(), None).unwrap())
        .unwrap()
}

// rcni's owner index is a hint: whatever Go does between two rcni calls is seen.
#[test]
fn go_changes_between_rcni_calls_are_seen() {
    let Some(binary) = go_host_local() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = net_config(dir.path());
    let ipam = rcni(&config);
    let r1 = ipam.allocate("r1", "eth0", &[]).unwrap()[0].address.addr();
    let g1 = go_ip(&go(&binary, "ADD", "g1", &config));
    // The same attachment added by rcni gets Go's address back, not a second one.
    ipam.check("g1", "eth0").unwrap();
    assert_eq!(
        ipam.allocate("g1", "eth0", &[]).unwrap()[0].address.addr(),
        g1
    );
    assert_eq!(ipam.release("g1", "eth0").unwrap(), [g1]);
    // Go releases rcni's lease: rcni no longer finds it and allocates anew.
    go(&binary, "DEL", "r1", &config);
    assert!(ipam.check("r1", "eth0").is_err());
    let again = ipam.allocate("r1", "eth0", &[]).unwrap()[0].address.addr();
    assert_ne!(again, r1);
    let names: Vec<String> = files(dir.path()).into_keys().collect();
    assert_eq!(
        names,
        [
            again.to_string(),
            "last_reserved_ip.0".into(),
            "lock".into()
        ]
    );
}

// Go deletes a lease and re-creates the same file name for another container (the inode number
// is likely reused): neither owner is confused.
#[test]
fn go_reusing_an_address_for_another_container() {
    let Some(binary) = go_host_local() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = net_config(dir.path());
    let ipam = rcni(&config);
    let a = ipam.allocate("a", "eth0", &[]).unwrap()[0].address.addr();
    go(&binary, "DEL", "a", &config);
    let b = go_ip(&go_with_args(
        &binary,
        "ADD",
        "b",
        &config,
        &format!("IP={a}"),
    ));
    assert_eq!(a, b);
    assert!(ipam.check("a", "eth0").is_err());
    assert!(ipam.release("a", "eth0").unwrap().is_empty());
    ipam.check("b", "eth0").unwrap();
    assert_eq!(
        ipam.allocate("b", "eth0", &[]).unwrap()[0].address.addr(),
        a
    );
    assert_eq!(ipam.release("b", "eth0").unwrap(), [a]);
}

// A Go ADD waiting on the lock runs the moment rcni releases it, within the same clock tick as
// rcni's last change: the index must still not be taken as complete.
#[test]
fn go_waiting_on_the_lock_is_seen() {
    let Some(binary) = go_host_local() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = net_config(dir.path());
    let ipam = rcni(&config);
    ipam.allocate("r0", "eth0", &[]).unwrap();
    for n in 0..5 {
        let id = format!("g{n}");
        let locked = ipam.store().lock().unwrap();
        let child = spawn_go(&binary, "ADD", &id, &config, "");
        // Give Go time to block on the lock (if it is late, the case is merely easier).
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(locked
            .reserve(
                &format!("r{}", n + 1),
                "eth0",
                ip(&format!("198.19.16.{}", 100 + n)),
                0
            )
            .unwrap());
        drop(locked);
        let g = go_ip(&go_output(child, "ADD", &id));
        assert_eq!(
            ipam.allocate(&id, "eth0", &[]).unwrap()[0].address.addr(),
            g
        );
        assert_eq!(ipam.release(&id, "eth0").unwrap(), [g]);
    }
}
