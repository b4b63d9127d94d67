//! WireGuard nodes: what a simulated node needs that a real one has by itself, and the
//! independent views of its tunnels.
//!
//! wireguard-go serves a device's configuration socket at `/run/wireguard/<device>.sock`, a
//! path every simulated node would share (they share the test's mount namespace). So each
//! node's agent, and every `wg` run for that node, sees its own directory there: it runs in a
//! mount namespace of its own (`ip netns exec` makes one per run) with the node's
//! `wireguard-run/` directory bound over `/run/wireguard` (created empty on the host when
//! missing, as wireguard-tools would). A restarted agent binds the same directory and so finds
//! the socket of the wireguard-go its previous run started.
//!
//! Every wireguard-go an agent started is found through its socket (`SO_PEERCRED`) and killed
//! by PID when the cluster is dropped.

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use cni_linux::wireguard::uapi::UserspaceDevice;
use serde_json::Value;

use super::{wait_for, Node};

/// The backend config's type is `wireguard`.
pub fn is_wireguard(backend: &Value) -> bool {
    backend["Type"] == "wireguard"
}

impl Node {
    /// The node's own `/run/wireguard`.
    pub fn wireguard_run_dir(&self) -> PathBuf {
        self.dir.join("wireguard-run")
    }

    /// What goes between `ip netns exec <ns>` and a program so that it sees the node's own
    /// `/run/wireguard`.
    pub fn wireguard_mounts(&self) -> Vec<OsString> {
        let dir = self.wireguard_run_dir();
        fs::create_dir_all(&dir).unwrap();
        vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /run/wireguard && mount --bind \"$0\" /run/wireguard && exec \"$@\"".into(),
            dir.into_os_string(),
        ]
    }

    /// `wg <args>` on this node (read-only uses: `show`).
    pub fn wg(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns.name])
            .args(self.wireguard_mounts())
            .arg("wg")
            .args(args)
            .output()
            .expect("run wg (Debian package wireguard-tools)");
        assert!(
            out.status.success(),
            "wg {args:?} on node{}: {}",
            self.index,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The peers of `device` as `wg show <device> dump` lists them: public key, endpoint,
    /// allowed IPs, latest handshake (Unix s), rx and tx bytes.
    pub fn wg_peers(&self, device: &str) -> Vec<WgPeer> {
        self.wg(&["show", device, "dump"])
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                WgPeer {
                    public_key: f[0].into(),
                    preshared_key: f[1].into(),
                    endpoint: f[2].into(),
                    allowed_ips: f[3].into(),
                    latest_handshake: f[4].parse().unwrap(),
                    rx: f[5].parse().unwrap(),
                    tx: f[6].parse().unwrap(),
                }
            })
            .collect()
    }

    /// The pid of the wireguard-go serving `device` on this node, if one does.
    pub fn wireguard_go_pid(&self, device: &str) -> Option<u32> {
        let socket = self.wireguard_run_dir().join(format!("{device}.sock"));
        let pid = UserspaceDevice::new(socket).server_pid().ok()?;
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == "wireguard-go").then_some(pid)
    }

    /// Kills (SIGKILL) every wireguard-go serving a socket of this node; waits until each is
    /// gone.
    pub fn kill_wireguard_go(&self) {
        let Ok(entries) = fs::read_dir(self.wireguard_run_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(device) = name.strip_suffix(".sock") else {
                continue;
            };
            if let Some(pid) = self.wireguard_go_pid(device) {
                kill_pid(pid);
            }
        }
    }
}

/// SIGKILL to `pid`, then waits (up to 5 s) until it has exited.
pub fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    wait_for(Duration::from_secs(5), || {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
    });
}

/// One line of `wg show <device> dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgPeer {
    pub public_key: String,
    pub preshared_key: String,
    pub endpoint: String,
    pub allowed_ips: String,
    pub latest_handshake: u64,
    pub rx: u64,
    pub tx: u64,
}

/// Whether the kernel has WireGuard (the module loaded, or loadable), asked from inside the
/// test's namespace `ns`.
pub fn kernel_has_wireguard(ns: &cni_testkit::Netns) -> bool {
    let ns = cni_linux::NetNs::open(&ns.path).unwrap();
    ns.run(|| cni_linux::wireguard::genl::Genl::open().is_ok())
        .unwrap()
}
