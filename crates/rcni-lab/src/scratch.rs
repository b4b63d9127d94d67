//! Disposable things of the lab and the conformance suite: a scratch directory and named
//! namespaces, both removed on drop.

use std::path::{Path, PathBuf};

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::NetNs;

/// A scratch directory for configs, the result cache and the IPAM leases.
pub struct Scratch(PathBuf);

impl Scratch {
    /// `<tmp>/<prefix>-<pid>`.
    pub fn new(prefix: &str) -> Result<Scratch, String> {
        let p = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Scratch(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Named namespaces (`<prefix>-<pid>-<label>`), deleted on drop even on panic.
pub struct Namespaces {
    prefix: &'static str,
    names: Vec<String>,
}

impl Namespaces {
    pub fn new(prefix: &'static str) -> Self {
        Namespaces {
            prefix,
            names: Vec::new(),
        }
    }

    pub fn create(&mut self, label: &str) -> Result<NetNs, String> {
        let name = format!("{}-{}-{label}", self.prefix, std::process::id());
        let ns = NetNs::create_named(&name).map_err(|e| format!("{name}: {e}"))?;
        self.names.push(name);
        // Loopback up, so the namespace behaves like a real host or pod.
        let mut h = cni_linux::Handle::in_netns(&ns).map_err(|e| e.to_string())?;
        let lo = h.link_by_name("lo").map_err(|e| e.to_string())?;
        h.change_link(&LinkChange::of(lo.index).up())
            .map_err(|e| e.to_string())?;
        Ok(ns)
    }

    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Deletes every namespace; reports the first error but tries them all.
    pub fn remove_all(&mut self) -> Result<(), String> {
        let mut first = Ok(());
        for name in self.names.drain(..) {
            if let Err(e) = NetNs::delete_named(&name) {
                if !e.is_not_found() && first.is_ok() {
                    first = Err(format!("{name}: {e}"));
                }
            }
        }
        first
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let _ = self.remove_all();
    }
}
