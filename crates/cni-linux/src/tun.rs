//! Persistent tap and tun devices through `/dev/net/tun`: `TUNSETIFF`, then `TUNSETOWNER` /
//! `TUNSETGROUP` and `TUNSETPERSIST` on the same descriptor, which is closed afterwards (the
//! device stays, like `ip tuntap add`). The device is made in the calling thread's network
//! namespace, so callers run this inside [`crate::NetNs::run`] (or from a process that lives
//! in that namespace).
//!
//! A persistent tun device outlives the process reading it: a userspace VPN that attaches to
//! it by name (wireguard-go) can die and be started again while the device, its addresses and
//! the routes through it stay.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;

// linux/if_tun.h
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb;
const TUNSETOWNER: libc::c_ulong = 0x4004_54cc;
const TUNSETGROUP: libc::c_ulong = 0x4004_54ce;
pub const IFF_TUN: u16 = 0x0001;
pub const IFF_TAP: u16 = 0x0002;
pub const IFF_MULTI_QUEUE: u16 = 0x0100;
pub const IFF_NO_PI: u16 = 0x1000;
pub const IFF_VNET_HDR: u16 = 0x4000;

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TapSpec {
    pub name: String,
    pub multi_queue: bool,
    pub vnet_hdr: bool,
    /// Only this uid may attach (`None`: anyone with access to `/dev/net/tun`).
    pub owner: Option<u32>,
    /// Only this gid may attach.
    pub group: Option<u32>,
}

impl TapSpec {
    /// The `ifr_flags` of the `TUNSETIFF` request.
    pub fn flags(&self) -> u16 {
        let mut f = IFF_TAP | IFF_NO_PI;
        if self.multi_queue {
            f |= IFF_MULTI_QUEUE;
        }
        if self.vnet_hdr {
            f |= IFF_VNET_HDR;
        }
        f
    }

    /// The 40-byte `struct ifreq` of `TUNSETIFF`: the name, then the flags.
    pub fn ifreq(&self) -> Result<[u8; 40], std::io::Error> {
        crate::rtnl::link::check_name(&self.name)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut req = [0u8; 40];
        req[..self.name.len()].copy_from_slice(self.name.as_bytes());
        req[16..18].copy_from_slice(&self.flags().to_ne_bytes());
        Ok(req)
    }
}

/// The 40-byte `struct ifreq` of `TUNSETIFF` for a tun device `name` (packet information
/// kept, as wireguard-go asks for it).
fn tun_ifreq(name: &str) -> std::io::Result<[u8; 40]> {
    crate::rtnl::link::check_name(name)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let mut req = [0u8; 40];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&IFF_TUN.to_ne_bytes());
    Ok(req)
}

// The only unsafe code of rcni: no safe binding of these ioctls exists in nix or libc.
#[allow(unsafe_code)]
fn ioctl(fd: i32, request: libc::c_ulong, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: these tun ioctls take an integer argument, or (TUNSETIFF) a pointer to a
    // 40-byte ifreq that outlives the call.
    let rc = unsafe { libc::ioctl(fd, request as _, arg) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Creates the persistent tap `spec` in the calling thread's namespace.
pub fn create_tap(spec: &TapSpec) -> std::io::Result<()> {
    let mut req = spec.ifreq()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let fd = file.as_raw_fd();
    ioctl(fd, TUNSETIFF, req.as_mut_ptr() as libc::c_ulong)?;
    if let Some(uid) = spec.owner {
        ioctl(fd, TUNSETOWNER, libc::c_ulong::from(uid))?;
    }
    if let Some(gid) = spec.group {
        ioctl(fd, TUNSETGROUP, libc::c_ulong::from(gid))?;
    }
    ioctl(fd, TUNSETPERSIST, 1)
}

/// Creates the persistent tun device `name` in the calling thread's namespace, or attaches to
/// and keeps an existing one of that name.
pub fn create_tun(name: &str) -> std::io::Result<()> {
    let mut req = tun_ifreq(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let fd = file.as_raw_fd();
    ioctl(fd, TUNSETIFF, req.as_mut_ptr() as libc::c_ulong)?;
    ioctl(fd, TUNSETPERSIST, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_carries_name_and_flags() {
        let spec = TapSpec {
            name: "tap0".into(),
            multi_queue: true,
            vnet_hdr: true,
            ..TapSpec::default()
        };
        let req = spec.ifreq().unwrap();
        assert_eq!(&req[..5], b"tap0\0");
        let flags = u16::from_ne_bytes([req[16], req[17]]);
        assert_eq!(flags, 0x0002 | 0x0100 | 0x1000 | 0x4000);
        assert!(req[18..].iter().all(|b| *b == 0));
        let plain = TapSpec::named_for_test("t");
        assert_eq!(plain.flags(), IFF_TAP | IFF_NO_PI);
        assert!(TapSpec::named_for_test("way-too-long-name")
            .ifreq()
            .is_err());
    }

    #[test]
    fn a_tun_ifreq_asks_for_a_tun_with_packet_information() {
        let req = tun_ifreq("rcni-wg").unwrap();
        assert_eq!(&req[..8], b"rcni-wg\0");
        assert_eq!(u16::from_ne_bytes([req[16], req[17]]), IFF_TUN);
        assert!(tun_ifreq("way-too-long-name").is_err());
    }

    impl TapSpec {
        fn named_for_test(n: &str) -> TapSpec {
            TapSpec {
                name: n.into(),
                ..TapSpec::default()
            }
        }
    }
}
