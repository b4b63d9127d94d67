//! The length rule for the comments attribution writes into nf_tables objects.

/// Longest comment accepted, in bytes (`nft`'s limit; the Go plugins cut theirs to this).
pub const MAX_COMMENT_LEN: usize = 128;

/// Makes any text a valid comment: NULs removed, cut to [`MAX_COMMENT_LEN`] bytes on a
/// character boundary (the Go plugins also cut their comments to 128 characters).
pub fn fit_comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_COMMENT_LEN));
    for c in text.chars().filter(|c| *c != '\0') {
        if out.len() + c.len_utf8() > MAX_COMMENT_LEN {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_char_boundaries_and_drops_nuls() {
        assert_eq!(fit_comment("a\0b"), "ab");
        assert_eq!(fit_comment(&"é".repeat(100)).len(), 128);
    }
}
