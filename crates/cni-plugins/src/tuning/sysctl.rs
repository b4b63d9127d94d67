//! tuning's sysctl keys: from a config key to a file under `/proc/sys/net/`, and
//! the optional allowlist of key patterns.

use std::path::{Path, PathBuf};

use cni_types::CniError;
use regex_lite::Regex;

/// The allowlist Go reads: one regex per line; when the file exists every key must match one.
pub const ALLOWLIST: &str = "/etc/cni/tuning/allowlist.conf";

/// Debug builds only: another allowlist path, so tests never touch `/etc`.
#[cfg(debug_assertions)]
pub const ALLOWLIST_ENV: &str = "RCNI_TUNING_ALLOWLIST";

/// A config key resolved for one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlTarget {
    /// The file, e.g. `/proc/sys/net/ipv4/conf/eth0/arp_filter` (for messages).
    pub path: PathBuf,
    /// The same file as a dotted name for `cni_linux::sysctl` (dots inside a path component
    /// written as slashes, e.g. `net.ipv4.conf.eth0/100.arp_filter`).
    pub name: String,
}

/// Resolves a key the way Go's tuning does: every dot becomes a slash, then the first
/// `IFNAME` becomes `ifname`; the cleaned path must lie below `/proc/sys/net/` (code 7).
pub fn resolve(key: &str, ifname: &str) -> Result<SysctlTarget, CniError> {
    let relative = key.replace('.', "/").replacen("IFNAME", ifname, 1);
    let mut parts: Vec<&str> = vec!["proc", "sys"];
    // Lexical clean, like Go's filepath.Join: empty and `.` parts vanish, `..` pops.
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if parts.len() < 4 || parts[..3] != ["proc", "sys", "net"] {
        return Err(CniError::invalid_config(format!(
            "tuning: invalid net sysctl key: {relative:?}: only keys under /proc/sys/net/ may be set"
        )));
    }
    let path: PathBuf = Path::new("/").join(parts.join("/"));
    let name = parts[2..]
        .iter()
        .map(|p| p.replace('.', "/"))
        .collect::<Vec<_>>()
        .join(".");
    Ok(SysctlTarget { path, name })
}

/// The allowlist path in force.
fn allowlist_path() -> PathBuf {
    #[cfg(debug_assertions)]
    if let Some(p) = std::env::var_os(ALLOWLIST_ENV) {
        return PathBuf::from(p);
    }
    PathBuf::from(ALLOWLIST)
}

/// Reads the allowlist: `None` when the file does not exist.
fn read_allowlist(path: &Path) -> Result<Option<Vec<String>>, CniError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CniError::io(format!(
            "tuning: cannot read sysctl allowlist {}: {e}",
            path.display()
        ))),
    }
}

/// Checks every key (as written in the config) against the allowlist, when there is one.
/// Patterns match anywhere in the key, as Go's `regexp.MatchString` does.
pub fn check_allowed<'k>(keys: impl IntoIterator<Item = &'k str>) -> Result<(), CniError> {
    check_allowed_by(&allowlist_path(), keys)
}

fn check_allowed_by<'k>(
    path: &Path,
    keys: impl IntoIterator<Item = &'k str>,
) -> Result<(), CniError> {
    let Some(patterns) = read_allowlist(path)? else {
        return Ok(());
    };
    let regexes = patterns
        .iter()
        .map(|p| {
            Regex::new(p).map_err(|e| {
                CniError::internal(format!(
                    "tuning: invalid pattern {p:?} in {}: {e}",
                    path.display()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for key in keys {
        if !regexes.iter().any(|r| r.is_match(key)) {
            return Err(CniError::invalid_config(format!(
                "tuning: Sysctl {key} is not allowed. Only the following sysctls are allowed: {patterns:?}"
            )));
        }
    }
    Ok(())
}

/// Compares a configured value with the kernel's, ignoring how whitespace separates the
/// fields of multi-value keys (`tcp_rmem` reads back tab-separated).
pub fn same_value(configured: &str, current: &str) -> bool {
    configured.split_whitespace().eq(current.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_resolve_below_proc_sys_net() {
        let t = resolve("net.ipv4.conf.IFNAME.arp_filter", "eth0").unwrap();
        assert_eq!(
            t.path,
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0/arp_filter")
        );
        assert_eq!(t.name, "net.ipv4.conf.eth0.arp_filter");
        // A dotted interface name stays one path component.
        let t = resolve("net/ipv4/conf/IFNAME/rp_filter", "eth0.100").unwrap();
        assert_eq!(
            t.path,
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
        assert_eq!(t.name, "net.ipv4.conf.eth0/100.rp_filter");
        assert_eq!(
            cni_linux::sysctl::sysctl_path(&t.name).unwrap(),
            t.path,
            "cni-linux maps the name back to the same file"
        );
        // Only the first IFNAME is replaced (Go).
        let t = resolve("net.IFNAME.IFNAME", "x").unwrap();
        assert_eq!(t.path, PathBuf::from("/proc/sys/net/x/IFNAME"));
        // Repeated separators collapse.
        let t = resolve("net..core.somaxconn", "eth0").unwrap();
        assert_eq!(t.name, "net.core.somaxconn");
    }

    #[test]
    fn keys_outside_net_are_code_7() {
        for bad in ["kernel.hostname", "net", "vm.swappiness", "", "netfilter.x"] {
            assert_eq!(resolve(bad, "eth0").unwrap_err().code, 7, "{bad}");
        }
        // `..` can only come from the interface name, and is cleaned away.
        assert_eq!(
            resolve("net/IFNAME/../../kernel/x", "..").unwrap_err().code,
            7
        );
        assert_eq!(
            resolve("net/a/IFNAME/kernel", "..").unwrap().name,
            "net.kernel"
        );
    }

    #[test]
    fn allowlist_patterns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.conf");
        check_allowed_by(&path, ["kernel.anything"]).unwrap();
        std::fs::write(
            &path,
            "^net.ipv4.conf.IFNAME.[a-z_]*$\n\n  ^net.core.somaxconn$  \n",
        )
        .unwrap();
        check_allowed_by(
            &path,
            ["net.ipv4.conf.IFNAME.arp_filter", "net.core.somaxconn"],
        )
        .unwrap();
        let e = check_allowed_by(&path, ["net.core.somaxconn", "net.ipv4.ip_forward"]).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("net.ipv4.ip_forward is not allowed"),
            "{}",
            e.msg
        );
        std::fs::write(&path, "net.(\n").unwrap();
        assert_eq!(check_allowed_by(&path, ["net.x"]).unwrap_err().code, 999);
    }

    #[test]
    fn values_compare_by_fields() {
        assert!(same_value("4096 87380 6291456", "4096\t87380\t6291456"));
        assert!(same_value("1", "1"));
        assert!(!same_value("1", "0"));
    }
}
