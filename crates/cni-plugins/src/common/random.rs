//! Random bytes from the kernel (`/dev/urandom`), for interface names and MACs.

use std::io::Read;

use cni_linux::MacAddr;

/// `n` random bytes.
pub fn bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

/// `veth` and 8 random lower-case hex digits, the Go plugins' host-side name style.
pub fn veth_name() -> std::io::Result<String> {
    Ok(veth_name_from(bytes::<4>()?))
}

fn veth_name_from(b: [u8; 4]) -> String {
    format!("veth{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
}

/// A random unicast, locally administered MAC. Giving the host veth an explicit address makes
/// its `addr_assign_type` "set", which udev's `MACAddressPolicy=persistent` leaves alone
/// (the cause of the CHECK failures in containernetworking/plugins issue #805).
pub fn local_mac() -> std::io::Result<MacAddr> {
    Ok(local_mac_from(bytes::<6>()?))
}

fn local_mac_from(mut b: [u8; 6]) -> MacAddr {
    b[0] = (b[0] & 0xfe) | 0x02;
    MacAddr(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_names_look_like_go() {
        assert_eq!(veth_name_from([0, 0xab, 0x1, 0xff]), "veth00ab01ff");
        let n = veth_name().unwrap();
        assert_eq!(n.len(), 12);
        assert!(n[4..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn macs_are_local_unicast() {
        assert_eq!(local_mac_from([0xff; 6]).0[0], 0xfe);
        assert_eq!(local_mac_from([0; 6]).0[0], 0x02);
        let m = local_mac().unwrap();
        assert_eq!(m.0[0] & 0x03, 0x02);
    }
}
