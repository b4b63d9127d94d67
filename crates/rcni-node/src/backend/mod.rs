//! The data planes that connect this node to the others, behind one [`Backend`] trait
//! (flannel's split): [`host_gw`] routes each remote subnet through the remote node's public
//! IP; [`vxlan`] tunnels it through one VXLAN device per address family. Each family of a lease
//! (its IPv4 subnet with `PublicIP`, its IPv6 subnet with `PublicIPv6`) gets its own path.
//!
//! Everything a backend creates is attributable to the agent: routes carry the routing
//! protocol number [`RTPROT_RCNI`], and neighbour and FDB entries live only on the agent's own
//! VXLAN device. A resync compares what the leases want with what the kernel has, puts back
//! what is missing and removes only stale objects carrying that attribution.

pub mod host_gw;
pub mod vxlan;

use crate::lease::Lease;

/// `rtm_protocol` of every route the agent makes ("124" in `ip route`).
pub const RTPROT_RCNI: u8 = 124;

/// A kernel operation of a backend failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A netlink request failed.
    #[error("{what}: {source}")]
    Netlink {
        /// What was being done.
        what: String,
        /// The kernel's answer.
        #[source]
        source: cni_linux::NetlinkError,
    },
    /// The setup cannot be done as asked.
    #[error("{0}")]
    Setup(String),
}

pub(crate) fn nl_err(
    what: impl Into<String>,
) -> impl FnOnce(cni_linux::NetlinkError) -> BackendError {
    let what = what.into();
    move |source| BackendError::Netlink { what, source }
}

/// What one resync changed in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Repairs {
    /// Objects that were missing (or wrong) and were put back.
    pub restored: usize,
    /// Stale objects of the agent that were removed.
    pub removed: usize,
    /// Objects the backend keeps for the remote nodes after the resync.
    pub programmed: usize,
}

/// A data plane for remote nodes.
pub trait Backend: Send {
    /// What this node publishes in its lease's `BackendData`.
    fn backend_data(&self) -> Option<crate::lease::BackendData>;
    /// What this node publishes in its lease's `BackendV6Data` (none by default).
    fn backend_v6_data(&self) -> Option<crate::lease::BackendData> {
        None
    }
    /// Programs the node's own subnets where the backend needs them (the VXLAN device
    /// addresses).
    fn configure_local(&mut self, subnet: crate::lease::Subnets) -> Result<(), BackendError>;
    /// Programs the path to one remote node.
    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError>;
    /// Moves the path to one remote node from what `old` published to what `new` does without
    /// a gap: `new`'s objects first (replacing those of the same key), then what is left of
    /// `old`'s.
    fn update_remote(&mut self, old: &Lease, new: &Lease) -> Result<(), BackendError>;
    /// Removes the path to one remote node (missing objects are fine).
    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError>;
    /// Makes the kernel match exactly `remotes` (for what the backend owns).
    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError>;
}

/// Ignores "already gone" for a delete.
pub(crate) fn gone_is_fine(
    r: Result<(), cni_linux::NetlinkError>,
) -> Result<(), cni_linux::NetlinkError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}
