//! The Prometheus text format's one rule the agent's metrics share: how a label value is
//! written.

/// A Prometheus label value: backslash, quote and newline escaped.
pub fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_escapes_backslash_quote_and_newline() {
        assert_eq!(label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label("x\ny"), "x\\ny");
        assert_eq!(label("plain/name"), "plain/name");
    }
}
