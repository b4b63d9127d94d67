//! Root-only: WireGuard devices configured through `cni_linux::wireguard` in a throwaway
//! namespace and read back through the crate and independently with `wg show` (Debian's
//! wireguard-tools): the userspace implementation (Debian's wireguard-go on a persistent tun
//! device) over its configuration socket, and the kernel's over generic netlink where the
//! kernel has it (skipped, naming the module, where it has not).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cni_linux::rtnl::link_add::LinkAdd;
use cni_linux::wireguard::genl::{Genl, KernelDevice};
use cni_linux::wireguard::uapi::{socket_path, UserspaceDevice};
use cni_linux::wireguard::{
    DeviceControl, DeviceUpdate, Error, PeerChange, PeerConfig, PublicKey, SecretKey,
};
use common::TestNs;

/// A wireguard-go stopped on drop: SIGTERM, so that it removes its socket, then SIGKILL if
/// it is still there after a second.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peer(byte: u8, endpoint: &str, nets: &[&str], psk: Option<SecretKey>) -> PeerConfig {
    PeerConfig {
        public_key: PublicKey([byte; 32]),
        preshared_key: psk,
        endpoint: Some(endpoint.parse().unwrap()),
        persistent_keepalive: 25,
        allowed_ips: nets.iter().map(|n| n.parse().unwrap()).collect(),
    }
    .normalized()
}

/// A private key with Curve25519's clamping (as `wg genkey` makes them).
fn private_key() -> SecretKey {
    let mut k = [0x42u8; 32];
    k[0] &= 248;
    k[31] = (k[31] & 127) | 64;
    SecretKey::from_bytes(k)
}

/// Configures `dev` with a key, a port and two peers, reads it back, checks `wg show dump`,
/// then removes a peer and replaces them all.
fn configure_and_read_back(t: &TestNs, name: &str, dev: &mut dyn DeviceControl) {
    let psk = SecretKey::from_bytes([9; 32]);
    let a = peer(
        2,
        "198.18.10.3:51820",
        &["198.19.2.0/24", "2001:2:1:2::/64"],
        Some(psk),
    );
    let b = peer(3, "[2001:2::3]:51821", &["198.19.3.0/24"], None);
    dev.apply(&DeviceUpdate {
        private_key: Some(private_key()),
        listen_port: Some(51999),
        replace_peers: true,
        peers: vec![PeerChange::Set(a.clone()), PeerChange::Set(b.clone())],
    })
    .unwrap();
    let read = dev.read().unwrap();
    assert_eq!(read.private_key, Some(private_key()));
    assert_eq!(read.listen_port, 51999);
    let mut got: Vec<PeerConfig> = read.peers.iter().map(|p| p.config.clone()).collect();
    got.sort_by_key(|p| p.public_key);
    assert_eq!(got, vec![a.clone(), b.clone()]);
    assert!(read.peers.iter().all(|p| p.last_handshake.is_none()));

    let out = Command::new("ip")
        .args(["netns", "exec", &t.name, "wg", "show", name, "dump"])
        .output()
        .expect("wg (Debian package wireguard-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<Vec<&str>> = dump.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines[0][0], private_key().expose_base64());
    assert_eq!(lines[0][2], "51999");
    let line_a = lines
        .iter()
        .find(|l| l[0] == a.public_key.to_base64())
        .unwrap_or_else(|| panic!("{dump}"));
    assert_eq!(line_a[1], psk.expose_base64());
    assert_eq!(line_a[2], "198.18.10.3:51820");
    assert_eq!(line_a[3], "198.19.2.0/24,2001:2:1:2::/64");
    assert_eq!(line_a[7], "25");
    let line_b = lines
        .iter()
        .find(|l| l[0] == b.public_key.to_base64())
        .unwrap();
    assert_eq!(line_b[1], "(none)");
    assert_eq!(line_b[2], "[2001:2::3]:51821");

    dev.apply(&DeviceUpdate {
        peers: vec![PeerChange::Remove(a.public_key)],
        ..DeviceUpdate::default()
    })
    .unwrap();
    let left: Vec<PublicKey> = dev
        .read()
        .unwrap()
        .peers
        .iter()
        .map(|p| p.config.public_key)
        .collect();
    assert_eq!(left, vec![b.public_key]);
    dev.apply(&DeviceUpdate {
        replace_peers: true,
        ..DeviceUpdate::default()
    })
    .unwrap();
    assert!(dev.read().unwrap().peers.is_empty());
}

#[test]
fn a_userspace_device_is_configured_and_read_through_wireguard_gos_socket() {
    let t = TestNs::new();
    let name = format!("wgl{}", std::process::id() % 100_000);
    let dev_name = name.clone();
    t.ns.run(move || cni_linux::tun::create_tun(&dev_name))
        .unwrap()
        .unwrap();
    let child = match Command::new("ip")
        .args(["netns", "exec", &t.name, "wireguard-go", "-f", &name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => Killed(c),
        Err(e) => panic!("wireguard-go (Debian package wireguard-go): {e}"),
    };
    let socket = socket_path(&name);
    let mut dev = UserspaceDevice::new(&socket);
    // Serving (listening), not only bound.
    let start = Instant::now();
    while dev.server_pid().is_err() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        dev.server_pid().unwrap(),
        child.0.id(),
        "SO_PEERCRED names the server"
    );
    configure_and_read_back(&t, &name, &mut dev);
    // The tun device outlives its process, which removes its socket.
    drop(child);
    assert_eq!(t.ip_link(&name)["linkinfo"]["info_kind"], "tun");
    assert!(matches!(dev.read(), Err(Error::Socket { .. })));
    assert!(!socket.exists(), "{} left behind", socket.display());
}

#[test]
fn a_kernel_device_is_configured_and_read_over_generic_netlink() {
    let t = TestNs::new();
    let genl = match t.ns.run(Genl::open).unwrap() {
        Ok(g) => g,
        Err(Error::NoKernelSupport) => {
            eprintln!("skipping: this kernel has no WireGuard (the wireguard module)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let mut h = t.handle();
    h.add_link(&LinkAdd::wireguard("wg0").mtu(1440)).unwrap();
    let index = h.link_by_name("wg0").unwrap().index;
    assert_eq!(t.ip_link("wg0")["linkinfo"]["info_kind"], "wireguard");
    let mut dev = KernelDevice::new(genl, index);
    configure_and_read_back(&t, "wg0", &mut dev);
}

#[test]
fn a_kernel_without_wireguard_is_named_as_such() {
    let t = TestNs::new();
    match t.ns.run(Genl::open).unwrap() {
        Ok(_) => eprintln!("skipping: this kernel has WireGuard"),
        Err(e) => {
            assert!(matches!(e, Error::NoKernelSupport), "{e}");
            assert!(e.to_string().contains("wireguard module"), "{e}");
            let err = t.handle().add_link(&LinkAdd::wireguard("wg0")).unwrap_err();
            assert_eq!(err.errno(), Some(libc::EOPNOTSUPP), "{err}");
        }
    }
}
