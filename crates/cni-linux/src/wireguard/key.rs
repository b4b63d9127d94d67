//! WireGuard's 32-byte keys as the two configuration interfaces and the people reading them
//! write them: base64 (`wg(8)`, flannel's lease `PublicKey`, key files), lowercase hex (the
//! userspace API, <https://www.wireguard.com/xplatform/#configuration-protocol>), raw bytes
//! (generic netlink).
//!
//! A [`PublicKey`] prints itself; a [`SecretKey`] (a private or preshared key) never does: its
//! `Debug` is redacted and it has no `Display`, so no log line or status file can carry one by
//! accident. Its bytes are reachable only through [`SecretKey::expose`].

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Bytes in every WireGuard key.
pub const KEY_LEN: usize = 32;

/// Why a key text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not base64, or not 32 bytes once decoded.
    #[error("not a WireGuard key (44 characters of base64 for 32 bytes)")]
    Base64,
    /// Not 64 hex digits.
    #[error("not a WireGuard key in hex (64 digits)")]
    Hex,
}

fn from_base64(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let bytes = STANDARD
        .decode(text.trim().as_bytes())
        .map_err(|_| KeyError::Base64)?;
    bytes.try_into().map_err(|_| KeyError::Base64)
}

fn from_hex(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let text = text.as_bytes();
    if text.len() != 2 * KEY_LEN {
        return Err(KeyError::Hex);
    }
    let digit = |c: u8| (c as char).to_digit(16).ok_or(KeyError::Hex);
    let mut out = [0u8; KEY_LEN];
    for (i, pair) in text.chunks(2).enumerate() {
        out[i] = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
    }
    Ok(out)
}

fn to_hex(bytes: &[u8; KEY_LEN]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A peer's (or this device's) public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    /// Parses the base64 form.
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        from_base64(text).map(PublicKey)
    }

    /// Parses the userspace API's hex form.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        from_hex(text).map(PublicKey)
    }

    /// The base64 form, as `wg(8)` and flannel write it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The userspace API's hex form.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

impl std::str::FromStr for PublicKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        PublicKey::from_base64(s)
    }
}

/// A private or preshared key: never printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretKey([u8; KEY_LEN]);

impl SecretKey {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        SecretKey(bytes)
    }

    /// Parses the base64 form (a key file, `wg genkey`, flannel's `PSK`).
    pub fn from_base64(text: &str) -> Result<Self, KeyError> {
        from_base64(text).map(SecretKey)
    }

    /// Parses the userspace API's hex form.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        from_hex(text).map(SecretKey)
    }

    /// The key's bytes, for the one place that must hand them to a device or a file.
    pub fn expose(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The base64 form, for the key file only.
    pub fn expose_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// The hex form, for the userspace API only.
    pub(crate) fn expose_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// Whether every byte is zero: how both interfaces report "no preshared key".
    pub fn is_zero(&self) -> bool {
        self.0 == [0; KEY_LEN]
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(redacted)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `wg pubkey` of the private key below, computed by wireguard-tools.
    const PRIVATE: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";

    #[test]
    fn base64_and_hex_round_trip() {
        let k = PublicKey::from_base64("HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=").unwrap();
        assert_eq!(
            k.to_string(),
            "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
        );
        assert_eq!(PublicKey::from_hex(&k.to_hex()).unwrap(), k);
        assert_eq!(k.to_hex().len(), 64);
        assert_eq!(
            PublicKey::from_base64("  HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=\n").unwrap(),
            k,
            "surrounding whitespace (a file's newline) is fine"
        );
        for bad in [
            "",
            "abc",
            "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8yk==",
            "!!!!",
        ] {
            assert_eq!(PublicKey::from_base64(bad), Err(KeyError::Base64), "{bad}");
        }
        assert_eq!(PublicKey::from_hex("zz"), Err(KeyError::Hex));
        assert_eq!(PublicKey::from_hex(&"g".repeat(64)), Err(KeyError::Hex));
    }

    #[test]
    fn a_secret_key_never_prints() {
        let s = SecretKey::from_base64(PRIVATE).unwrap();
        assert_eq!(format!("{s:?}"), "SecretKey(redacted)");
        assert_eq!(format!("{:?}", Some(s)), "Some(SecretKey(redacted))");
        assert_eq!(s.expose_base64(), PRIVATE);
        assert_eq!(SecretKey::from_hex(&s.expose_hex()).unwrap(), s);
        assert!(!s.is_zero());
        assert!(SecretKey::from_bytes([0; 32]).is_zero());
    }
}
