//! Opening `CNI_NETNS` and the CNI errors for namespaces that are not there.
//!
//! One rule for every plugin: ADD and CHECK need a network namespace (a missing one is code 3,
//! anything else that is not a network namespace code 8, answered at once: opening never
//! blocks), while DEL treats a path that is missing *or* is not a network namespace (a FIFO, a
//! mount or UTS namespace, a symlink loop, an over-long name) as a namespace that is gone:
//! nothing to do inside it, host-side cleanup still runs, success.

use std::path::Path;

use cni_linux::{NetNs, NsError};
use cni_types::{code, CniError};

/// What opening the namespace found.
pub enum Opened {
    Ns(NetNs),
    /// The path is missing, or not (or no longer) a network namespace.
    Gone(NsError),
}

/// Opens `path`; a missing or non-network-namespace path is [`Opened::Gone`], other failures
/// (permissions, system-call errors) are errors.
pub fn open(path: &Path) -> Result<Opened, CniError> {
    match NetNs::open(path) {
        Ok(ns) => Ok(Opened::Ns(ns)),
        Err(e) if e.is_not_found() || e.is_not_a_network_namespace() => Ok(Opened::Gone(e)),
        Err(e) => Err(CniError::new(
            code::INVALID_NETNS,
            format!("cannot open CNI_NETNS {path:?}: {e}"),
        )),
    }
}

/// Opens `path` for ADD or CHECK, where the namespace must exist: a missing one is code 3
/// (the container is gone), a path that is not a network namespace code 8.
pub fn open_required(path: &Path) -> Result<NetNs, CniError> {
    match open(path)? {
        Opened::Ns(ns) => Ok(ns),
        Opened::Gone(e @ NsError::NotFound(_)) => Err(CniError::unknown_container(format!(
            "CNI_NETNS {path:?}: {e}"
        ))),
        Opened::Gone(e) => Err(CniError::invalid_netns(format!("CNI_NETNS {path:?}: {e}"))),
    }
}
