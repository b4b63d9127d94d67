//! The hashes names are built from (Go's `utils.MustFormatHashWithPrefix` and
//! `utils.FormatChainName` hash SHA-512 and keep the first hex digits).

use sha2::{Digest, Sha512};

/// Lowercase hex SHA-512 of `text`.
pub(crate) fn sha512_hex(text: &str) -> String {
    Sha512::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first `len` hex digits of SHA-512(`text`).
pub(crate) fn hash_hex(text: &str, len: usize) -> String {
    let mut hex = sha512_hex(text);
    hex.truncate(len);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_string_hashes_as_sha512_does() {
        assert_eq!(hash_hex("", 16), "cf83e1357eefb8bd");
        assert_eq!(sha512_hex("").len(), 128);
    }
}
