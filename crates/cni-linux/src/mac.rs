//! A 6-byte Ethernet hardware address with the usual `aa:bb:cc:dd:ee:ff` text form.

use std::fmt;
use std::str::FromStr;

/// An Ethernet MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

/// A MAC address string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}")]
pub struct MacParseError(pub String);

impl MacAddr {
    /// The address bytes.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// Builds an address from a slice of exactly 6 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 6]>::try_from(bytes).ok().map(MacAddr)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = MacParseError;

    /// Accepts six hex pairs separated by `:` or `-`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.to_string());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in out.iter_mut() {
            let part = parts.next().ok_or_else(err)?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mac: MacAddr = "0A:1b:2c:3d:4e:5F".parse().unwrap();
        assert_eq!(mac.0, [0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f]);
        assert_eq!(mac.to_string(), "0a:1b:2c:3d:4e:5f");
        assert_eq!("0a-1b-2c-3d-4e-5f".parse::<MacAddr>().unwrap(), mac);
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "",
            "0a:1b:2c:3d:4e",
            "0a:1b:2c:3d:4e:5f:00",
            "0a:1b:2c:3d:4e:zz",
            "a:1b:2c:3d:4e:5f0",
            "+a:1b:2c:3d:4e:5f",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert!(MacAddr::from_slice(&[1, 2, 3]).is_none());
    }
}
