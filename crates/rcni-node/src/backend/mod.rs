//! The data planes that connect this node to the others, behind one [`Backend`] trait
//! (flannel's split): [`host_gw`] routes each remote subnet through the remote node's public
//! IP; [`vxlan`] tunnels it through one VXLAN device per address family; [`wireguard`]
//! encrypts it through WireGuard devices (the kernel's, or wireguard-go supervised by the
//! agent). Each family of a lease (its IPv4 subnet with `PublicIP`, its IPv6 subnet with
//! `PublicIPv6`) gets its own path.
//!
//! Everything a backend creates is attributable to the agent: routes carry the routing
//! protocol number [`RTPROT_RCNI`], and neighbour and FDB entries live only on the agent's own
//! VXLAN device. A resync compares what the leases want with what the kernel has, puts back
//! what is missing and removes only stale objects carrying that attribution.

pub mod host_gw;
pub mod vxlan;
pub mod wireguard;

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

/// What a backend's periodic upkeep ([`Backend::upkeep`]) found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upkeep {
    /// Something the remote paths depend on was made again (a device, a process): the next
    /// resync must program every remote node.
    pub resync: bool,
    /// What the node publishes in its lease changed (a rotated key): publish it again.
    pub republish: bool,
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
    /// Programs the paths to many new remote nodes (a full list of leases); one by one,
    /// past failures (each logged, the last returned), unless the backend does better.
    fn add_remotes(&mut self, leases: &[Lease]) -> Result<(), BackendError> {
        let mut failed = None;
        for lease in leases {
            if let Err(e) = self.add_remote(lease) {
                log::warn!("path to {}: {e}", lease.subnet);
                failed = Some(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }
    /// Moves the path to one remote node from what `old` published to what `new` does without
    /// a gap: `new`'s objects first (replacing those of the same key), then what is left of
    /// `old`'s.
    fn update_remote(&mut self, old: &Lease, new: &Lease) -> Result<(), BackendError>;
    /// Removes the path to one remote node (missing objects are fine).
    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError>;
    /// Makes the kernel match exactly `remotes` (for what the backend owns).
    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError>;
    /// Checks, every second, what runs besides kernel objects (a supervised process, a key
    /// file) and puts it back or follows it (nothing by default).
    fn upkeep(&mut self) -> Result<Upkeep, BackendError> {
        Ok(Upkeep::default())
    }
    /// The encrypted tunnels and their peers, read at each resync (none by default).
    fn tunnel_status(&mut self) -> Option<wireguard::status::TunnelStatus> {
        None
    }
}

/// Sets the one address of `want`'s family on the agent's device `index` to `want` (the node
/// subnet's first address, the source of the node's own traffic to remote pods); other
/// addresses of that family go, link-local ones stay.
pub(crate) fn set_device_address(
    nl: &mut cni_linux::Handle,
    index: u32,
    want: ipnet::IpNet,
) -> Result<(), BackendError> {
    use std::net::IpAddr;
    let current = nl
        .addresses(Some(index))
        .map_err(nl_err("list device addresses"))?;
    let link_local = |ip: IpAddr| matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local());
    for addr in current.iter().filter(|a| {
        a.addr != want
            && a.addr.addr().is_ipv4() == want.addr().is_ipv4()
            && !link_local(a.addr.addr())
    }) {
        gone_is_fine(nl.delete_address(index, addr.addr))
            .map_err(nl_err(format!("delete old address {}", addr.addr)))?;
    }
    if !current.iter().any(|a| a.addr == want) {
        // No duplicate address detection: the address is the node's own by its lease.
        nl.add_address(
            index,
            want,
            cni_linux::rtnl::addr::AddAddressOptions { nodad: true },
        )
        .map_err(nl_err(format!("address {want}")))?;
    }
    Ok(())
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
