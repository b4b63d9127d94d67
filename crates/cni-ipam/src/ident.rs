//! Checks on the identifiers host-local turns into paths or file contents, so that none of them can
//! leave the data directory or forge another attachment's lease.

use crate::error::IpamError;

/// The CNI rule for container IDs and network names: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
/// It excludes `/`, NUL, whitespace and `..` on its own (a name cannot start with a dot).
pub fn is_valid_name(name: &str) -> bool {
    cni_types::validate_network_name(name).is_ok()
}

/// The CNI rule for interface names: 1–15 bytes, not `.` or `..`, no `/`, `:`, whitespace or NUL.
pub fn is_valid_ifname(name: &str) -> bool {
    cni_types::validate_interface_name(name).is_ok()
}

/// Rejects a container ID or interface name that does not follow the CNI rules.
pub fn check_attachment(container_id: &str, ifname: &str) -> Result<(), IpamError> {
    if !is_valid_name(container_id) {
        return Err(IpamError::InvalidContainerId {
            id: container_id.to_string(),
        });
    }
    if !is_valid_ifname(ifname) {
        return Err(IpamError::InvalidIfName {
            name: ifname.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "ctr1", "0abc", "my-net_1.conf", "A.."] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "", ".", "..", "../x", "a/b", "/abs", "a\0b", "a b", "-x", "_x", "é", "a\r\nb",
        ] {
            assert!(!is_valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn ifnames() {
        for good in ["eth0", "net1", "a", "123456789012345", "veth.x"] {
            assert!(is_valid_ifname(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\0",
            "1234567890123456",
            "e\r\n",
        ] {
            assert!(!is_valid_ifname(bad), "{bad:?}");
        }
    }

    #[test]
    fn attachment_errors_are_typed() {
        assert!(matches!(
            check_attachment("../x", "eth0"),
            Err(IpamError::InvalidContainerId { .. })
        ));
        assert!(matches!(
            check_attachment("ctr", "eth/0"),
            Err(IpamError::InvalidIfName { .. })
        ));
        assert!(check_attachment("ctr", "eth0").is_ok());
    }
}
