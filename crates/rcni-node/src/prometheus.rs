//! What every Prometheus series of `/metrics` needs.

/// A Prometheus label value: backslash, quote and newline escaped.
pub fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
