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

/// A packet capture with `tcpdump` on one interface of a namespace, into a pcap file; stopped
/// (and its process killed by PID) on [`Capture::stop`] or drop.
pub struct Capture {
    file: PathBuf,
    process: super::Guard,
}

impl Capture {
    /// Starts capturing every packet on `iface` in `ns` into `file`; returns once tcpdump
    /// listens.
    pub fn start(ns: &str, iface: &str, file: PathBuf) -> Capture {
        let log = file.with_extension("log");
        let child = Command::new("ip")
            .args([
                "netns", "exec", ns, "tcpdump", "-i", iface, "-n", "-U", "-s", "0", "-w",
            ])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("tcpdump (Debian package tcpdump)");
        let capture = Capture {
            file,
            process: super::Guard(Some(child)),
        };
        let listening = wait_for(Duration::from_secs(10), || {
            fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on"))
        });
        assert!(
            listening.is_some(),
            "tcpdump on {iface}: {}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        capture
    }

    /// Stops the capture (SIGTERM: tcpdump writes what it has) and returns the file's bytes.
    pub fn stop(mut self) -> Vec<u8> {
        // Packets still in the kernel's queue reach the file first.
        std::thread::sleep(Duration::from_millis(300));
        self.process.terminate();
        fs::read(&self.file).unwrap()
    }
}

/// An IP packet of an Ethernet capture: addresses, protocol, ports (TCP and UDP) and the
/// whole frame.
#[derive(Debug, Clone)]
pub struct CapturedPacket {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    /// IP protocol number (17 UDP, 6 TCP, ...).
    pub protocol: u8,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
    pub frame: Vec<u8>,
}

/// The IP packets of a pcap file of Ethernet frames (tcpdump's own byte order, microsecond
/// or nanosecond magic); other frames (ARP) are left out.
pub fn ip_packets(pcap: &[u8]) -> Vec<CapturedPacket> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    assert!(pcap.len() >= 24, "not a pcap file");
    let magic = u32::from_le_bytes(pcap[..4].try_into().unwrap());
    let le = matches!(magic, 0xa1b2_c3d4 | 0xa1b2_3c4d);
    let u32_at = |b: &[u8], at: usize| {
        let bytes: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(bytes)
        } else {
            u32::from_be_bytes(bytes)
        }
    };
    assert_eq!(u32_at(pcap, 20), 1, "an Ethernet capture");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let len = u32_at(pcap, at + 8) as usize;
        let frame = &pcap[at + 16..(at + 16 + len).min(pcap.len())];
        at += 16 + len;
        if frame.len() < 14 {
            continue;
        }
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        let ip = &frame[14..];
        let (src, dst, protocol, l4): (IpAddr, IpAddr, u8, &[u8]) = match ethertype {
            0x0800 if ip.len() >= 20 => {
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
                let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
                (src.into(), dst.into(), ip[9], &ip[ihl.min(ip.len())..])
            }
            0x86dd if ip.len() >= 40 => {
                let src: [u8; 16] = ip[8..24].try_into().unwrap();
                let dst: [u8; 16] = ip[24..40].try_into().unwrap();
                (
                    Ipv6Addr::from(src).into(),
                    Ipv6Addr::from(dst).into(),
                    ip[6],
                    &ip[40..],
                )
            }
            _ => continue,
        };
        let ports = (matches!(protocol, 6 | 17) && l4.len() >= 4).then(|| {
            (
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            )
        });
        out.push(CapturedPacket {
            src,
            dst,
            protocol,
            src_port: ports.map(|p| p.0),
            dst_port: ports.map(|p| p.1),
            frame: frame.to_vec(),
        });
    }
    out
}

/// Whether `needle` occurs in `haystack`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
