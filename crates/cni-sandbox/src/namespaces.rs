//! Network namespaces the sandbox creates for itself. This crate stays above the kernel
//! (it depends on the runtime only), so the caller hands in the code that creates and
//! removes named namespaces (rcni passes cni-linux's); tests can hand in a fake.

use std::path::{Path, PathBuf};

/// Creates and removes named network namespaces (`/run/netns/<name>`, as `ip netns` does).
pub trait Namespaces: Send + Sync {
    /// The path the namespace `name` gets (recorded before it is created).
    fn path(&self, name: &str) -> PathBuf {
        Path::new("/run/netns").join(name)
    }
    /// Creates the namespace `name` (at [`Namespaces::path`]) and returns its path.
    fn create(&self, name: &str) -> Result<PathBuf, String>;
    /// Removes the namespace `name`; an already missing one is success.
    fn remove(&self, name: &str) -> Result<(), String>;
    /// True when `path` is a network namespace that still exists (a DEL for a vanished one,
    /// or for a leftover plain file at its path, gets an empty `CNI_NETNS`).
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// The namespace name of sandbox `id`: `rcni-<id>`, so a namespace on the node names the
/// sandbox it belongs to.
pub fn netns_name(id: &str) -> String {
    format!("rcni-{id}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_carry_the_sandbox_id() {
        assert_eq!(super::netns_name("abc"), "rcni-abc");
    }
}
