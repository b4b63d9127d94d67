//! The skeleton's guard against `CNI_NETNS` being the plugin's own network namespace
//! (Go's `pkg/skel/skel.go`, error code 8).
//!
//! Namespaces are compared by (device, inode) of the files, which is all a namespace identity
//! is; no Linux-specific API is needed. A path that cannot be opened passes: the plugin itself
//! decides what a missing namespace means for its command.

use std::path::Path;

use cni_types::CniError;

/// Where the calling thread's network namespace is visible.
const OWN_NETNS_PATHS: [&str; 2] = ["/proc/thread-self/ns/net", "/proc/self/ns/net"];

/// Fails with code 8 when `netns` is the namespace this process runs in.
pub(crate) fn ensure_not_own_netns(netns: &Path) -> Result<(), CniError> {
    if is_own_netns(netns) {
        return Err(CniError::invalid_netns(
            "plugin's netns and netns from CNI_NETNS should not be the same",
        ));
    }
    Ok(())
}

#[cfg(unix)]
fn is_own_netns(netns: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if netns.as_os_str().is_empty() {
        return false;
    }
    let Ok(target) = std::fs::metadata(netns) else {
        return false;
    };
    OWN_NETNS_PATHS
        .iter()
        .find_map(|p| std::fs::metadata(p).ok())
        .is_some_and(|own| own.dev() == target.dev() && own.ino() == target.ino())
}

#[cfg(not(unix))]
fn is_own_netns(_netns: &Path) -> bool {
    let _ = OWN_NETNS_PATHS;
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    // The own namespace is rejected with code 8; unopenable paths pass.
    #[test]
    fn detects_own_namespace() {
        if std::fs::metadata(OWN_NETNS_PATHS[1]).is_err() {
            eprintln!("skipped: no /proc/self/ns/net on this system");
            return;
        }
        let e = ensure_not_own_netns(Path::new("/proc/self/ns/net")).unwrap_err();
        assert_eq!(e.code, cni_types::code::INVALID_NETNS);
        assert!(ensure_not_own_netns(Path::new("/nonexistent/netns")).is_ok());
        assert!(ensure_not_own_netns(Path::new("")).is_ok());
        // Another namespace type of the same process is a different inode.
        assert!(ensure_not_own_netns(Path::new("/proc/self/ns/mnt")).is_ok());
    }
}
