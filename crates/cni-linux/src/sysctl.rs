//! Reading and writing kernel parameters under `/proc/sys`.
//!
//! Names use the dotted form (`net.ipv4.ip_forward`). As in the Go plugins, dots and slashes are
//! swapped to build the path, so an interface name containing dots (`eth0.100`) must be written
//! with slashes inside the dotted name (`net.ipv4.conf.eth0/100.rp_filter`); [`iface_key`] does
//! that for you. Network sysctls are per namespace: to change them in another namespace, call
//! these functions inside [`crate::netns::NetNs::run`].

use std::io;
use std::path::PathBuf;

/// Root of the sysctl tree.
const PROC_SYS: &str = "/proc/sys";

/// Errors from sysctl access.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// The name is empty or has an empty or `..` component.
    #[error("invalid sysctl name {0:?}")]
    InvalidName(String),
    /// Reading or writing the file failed.
    #[error("cannot {op} sysctl {name}: {source}")]
    Io {
        /// `read` or `write`.
        op: &'static str,
        /// The sysctl name as given.
        name: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl SysctlError {
    /// True if the key does not exist (for example IPv6 keys when IPv6 is disabled).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SysctlError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The `/proc/sys` path of a dotted sysctl name (dots and slashes swapped).
pub fn sysctl_path(name: &str) -> Result<PathBuf, SysctlError> {
    let relative: String = name
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            other => other,
        })
        .collect();
    let valid = !relative.is_empty()
        && relative
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\0'));
    if !valid {
        return Err(SysctlError::InvalidName(name.to_string()));
    }
    Ok(PathBuf::from(PROC_SYS).join(relative))
}

/// The dotted name of a per-interface key: `net.<family>.conf.<ifname>.<key>`, with dots in
/// `ifname` written as slashes. `family` is `ipv4` or `ipv6`.
pub fn iface_key(family: &str, ifname: &str, key: &str) -> String {
    format!("net.{family}.conf.{}.{key}", ifname.replace('.', "/"))
}

/// Reads a sysctl, without the trailing newline.
pub fn read(name: &str) -> Result<String, SysctlError> {
    let path = sysctl_path(name)?;
    crate::counters::timed(crate::counters::Kind::Sysctl, || {
        std::fs::read_to_string(&path)
    })
    .map(|s| s.trim_end().to_string())
    .map_err(|source| SysctlError::Io {
        op: "read",
        name: name.to_string(),
        source,
    })
}

/// Writes a sysctl unconditionally.
pub fn write(name: &str, value: &str) -> Result<(), SysctlError> {
    let path = sysctl_path(name)?;
    crate::counters::timed(crate::counters::Kind::Sysctl, || {
        std::fs::write(&path, value)
    })
    .map_err(|source| SysctlError::Io {
        op: "write",
        name: name.to_string(),
        source,
    })
}

/// Sets a sysctl to `value` unless it already has it; returns whether it wrote.
pub fn ensure(name: &str, value: &str) -> Result<bool, SysctlError> {
    if read(name)? == value {
        return Ok(false);
    }
    write(name, value)?;
    Ok(true)
}

/// Like [`ensure`], but a missing key is not an error (returns `Ok(false)`).
pub fn ensure_if_present(name: &str, value: &str) -> Result<bool, SysctlError> {
    match ensure(name, value) {
        Err(e) if e.is_not_found() => Ok(false),
        other => other,
    }
}

/// Turns on IP forwarding for the requested families in the current thread's namespace
/// (`net.ipv4.ip_forward`, `net.ipv6.conf.all.forwarding`), writing only if not already `1`.
pub fn enable_ip_forwarding(ipv4: bool, ipv6: bool) -> Result<(), SysctlError> {
    if ipv4 {
        ensure("net.ipv4.ip_forward", "1")?;
    }
    if ipv6 {
        ensure("net.ipv6.conf.all.forwarding", "1")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_names_become_paths() {
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net.ipv4.conf.eth0/100.rp_filter").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
    }

    #[test]
    fn iface_key_escapes_dots() {
        let key = iface_key("ipv6", "eth0.100", "accept_ra");
        assert_eq!(key, "net.ipv6.conf.eth0/100.accept_ra");
        assert_eq!(
            sysctl_path(&key).unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/conf/eth0.100/accept_ra")
        );
    }

    #[test]
    fn escaping_names_are_rejected() {
        for bad in ["", ".", "net..ipv4", "net./.", "net.//..x", "net.ipv4."] {
            assert!(
                matches!(sysctl_path(bad), Err(SysctlError::InvalidName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn missing_key_is_tolerated_only_when_asked() {
        let name = "net.ipv4.conf.rcni-no-such-if.arp_notify";
        assert!(read(name).unwrap_err().is_not_found());
        assert!(!ensure_if_present(name, "1").unwrap());
        assert!(ensure(name, "1").unwrap_err().is_not_found());
    }
}
