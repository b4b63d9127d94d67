//! cni-linux: the only crate of rcni that talks to the kernel.
//!
//! - [`netns`]: network-namespace handles, running work inside a namespace on a short-lived
//!   thread, and persistent named namespaces.
//! - [`rtnl`]: a synchronous rtnetlink client ([`rtnl::Handle`]) for links, addresses, routes,
//!   neighbours, bridge ports, bridge VLANs and traffic-control qdiscs and filters.
//! - [`sysctl`]: `/proc/sys` reads and writes, IP forwarding.
//! - [`tun`]: persistent tap and tun devices through `/dev/net/tun` ioctls.
//! - [`wireguard`]: WireGuard devices, the kernel's over generic netlink and a userspace
//!   implementation's over its configuration socket, behind one interface.
//! - [`mac`]: the MAC address type.
//! - [`counters`]: optional counts and times of the kernel work above, for phase tracing.
//!
//! Nothing here runs an external program.

pub mod counters;
pub mod mac;
pub mod netns;
pub mod rtnl;
pub mod sysctl;
pub mod tun;
pub mod wireguard;

pub use mac::MacAddr;
pub use netns::{NetNs, NsError};
pub use rtnl::{Error as NetlinkError, Handle};
