//! Opening `CNI_NETNS` and the CNI errors for namespaces that are not there.

use cni_linux::{NetNs, NsError};
use cni_types::{code, CniError};

/// What opening the namespace found.
pub enum Opened {
    Ns(NetNs),
    /// The path is missing, or no longer a namespace (an unmounted leftover file).
    Gone(NsError),
}

/// Opens `path`; a missing or non-namespace path is [`Opened::Gone`], other failures are errors.
pub fn open(path: &str) -> Result<Opened, CniError> {
    match NetNs::open(path) {
        Ok(ns) => Ok(Opened::Ns(ns)),
        Err(e @ (NsError::NotFound(_) | NsError::NotANamespace(_))) => Ok(Opened::Gone(e)),
        Err(e) => Err(CniError::new(
            code::INVALID_NETNS,
            format!("cannot open CNI_NETNS {path:?}: {e}"),
        )),
    }
}

/// Opens `path` for ADD or CHECK, where the namespace must exist: a missing one is code 3
/// (the container is gone), a path that is not a namespace code 8.
pub fn open_required(path: &str) -> Result<NetNs, CniError> {
    match open(path)? {
        Opened::Ns(ns) => Ok(ns),
        Opened::Gone(e @ NsError::NotFound(_)) => Err(CniError::unknown_container(format!(
            "CNI_NETNS {path:?}: {e}"
        ))),
        Opened::Gone(e) => Err(CniError::invalid_netns(format!("CNI_NETNS {path:?}: {e}"))),
    }
}
