//! Unique, short network-namespace names and the sweep of names left by dead test processes.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Every name this kit creates starts with this prefix (namespaces and temp dirs alike).
pub const PREFIX: &str = "rcnit-";

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_RUN_DIR: &str = "/run/netns";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `rcnit-<pid>-<counter>-<4 hex>`: unique within the process (counter) and across
/// processes (pid), with a random suffix so a recycled pid cannot meet a leftover name.
pub(crate) fn unique_name() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX}{}-{n}-{:04x}", std::process::id(), random_u16())
}

fn random_u16() -> u16 {
    let mut buf = [0u8; 2];
    let from_urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .is_ok();
    if from_urandom {
        return u16::from_ne_bytes(buf);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ (nanos >> 16)) as u16
}

/// The pid embedded in a name made by [`unique_name`], if `name` is one.
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// True when `name` was made by a process that no longer runs.
///
/// Test processes killed by a timeout never run their Drop guards; the next
/// sandbox removes what they left behind.
pub(crate) fn is_stale(name: &str) -> bool {
    match owner_pid(name) {
        Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_short() {
        let a = unique_name();
        let b = unique_name();
        assert_ne!(a, b);
        assert!(a.starts_with(PREFIX));
        assert!(a.len() < 40, "{a}");
        assert_eq!(owner_pid(&a), Some(std::process::id()));
    }

    #[test]
    fn own_names_are_not_stale_and_foreign_names_are_ignored() {
        assert!(!is_stale(&unique_name()));
        assert!(!is_stale("cni-1234"));
        assert!(!is_stale("rcnit-notapid-1-abcd"));
        // pid_max is at most 2^22, so this pid cannot be running
        assert!(is_stale("rcnit-99999999-0-abcd"));
    }
}
