//! Validation of names that end up in paths and kernel objects (SPEC.md, Sections 1 and 2; Go's
//! `pkg/utils/utils.go`).

use crate::error::CniError;

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, the rule for network names and container IDs.
fn is_valid_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

/// Network name: code 7 when missing or malformed.
pub fn validate_network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::invalid_config("missing network name"));
    }
    if !is_valid_identifier(name) {
        return Err(
            CniError::invalid_config("invalid characters found in network name").with_details(name),
        );
    }
    Ok(())
}

/// Container ID: code 3 when missing (as Go), code 4 when malformed.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::unknown_container("missing containerID"));
    }
    if !is_valid_identifier(id) {
        return Err(
            CniError::invalid_environment("invalid characters in containerID").with_details(id),
        );
    }
    Ok(())
}

/// Interface name: 1–15 bytes, not `.`/`..`, no `/`, `:`, whitespace or control characters;
/// code 4 otherwise. The kernel takes control bytes, Go's check does too; rcni refuses them, as
/// no tool shows such a name faithfully.
pub fn validate_interface_name(name: &str) -> Result<(), CniError> {
    let bad = |msg: &str| Err(CniError::invalid_environment(msg.to_string()).with_details(name));
    if name.is_empty() {
        return bad("interface name is empty");
    }
    if name.len() > 15 {
        return bad("interface name is too long, it must be at most 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("interface name is . or ..");
    }
    if name.contains('/') {
        return bad("'/' is not allowed in interface names");
    }
    if name.contains(':') {
        return bad("':' is not allowed in interface names");
    }
    if name.chars().any(char::is_whitespace) {
        return bad("interface name contains whitespace");
    }
    if name.chars().any(char::is_control) {
        return bad("interface name contains a control character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;

    // Network names, as `ValidateNetworkName`.
    #[test]
    fn network_names() {
        assert!(validate_network_name("cbr0").is_ok());
        assert!(validate_network_name("my_net-1.2").is_ok());
        assert_eq!(
            validate_network_name("").unwrap_err().code,
            code::INVALID_NETWORK_CONFIG
        );
        for bad in ["../x", "a/b", "-a", ".a", "a b", "a\nb"] {
            let e = validate_network_name(bad).unwrap_err();
            assert_eq!(e.code, code::INVALID_NETWORK_CONFIG, "{bad}");
            assert_eq!(e.details, bad);
        }
    }

    // Container IDs, as `ValidateContainerID`.
    #[test]
    fn container_ids() {
        assert!(validate_container_id("abc123").is_ok());
        assert_eq!(
            validate_container_id("").unwrap_err().code,
            code::UNKNOWN_CONTAINER
        );
        for bad in ["../../etc", "a/b", "a;b", " a"] {
            assert_eq!(
                validate_container_id(bad).unwrap_err().code,
                code::INVALID_ENVIRONMENT
            );
        }
    }

    // Interface names, as `ValidateInterfaceName`.
    #[test]
    fn interface_names() {
        assert!(validate_interface_name("eth0").is_ok());
        assert!(validate_interface_name("abcdefghijklmno").is_ok());
        for bad in [
            "",
            "abcdefghijklmnop",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\u{1}b",
            "a\0",
            "eth\u{7f}",
            "eth\u{85}",
        ] {
            assert_eq!(
                validate_interface_name(bad).unwrap_err().code,
                code::INVALID_ENVIRONMENT,
                "{bad:?}"
            );
        }
    }
}
