//! tap (Go: containernetworking/plugins `plugins/main/tap/tap.go`): a persistent tap device made
//! through `/dev/net/tun` on a thread inside the container namespace, under a temporary name and
//! renamed to `CNI_IFNAME`, with `mac`, `mtu`, `multiQueue`, `owner`, `group`, an optional `bridge`
//! in the container to enslave it to, and optional IPAM.
//!
//! - [`conf`]: the config keys; [`add`]: transactional ADD; [`del`]: DEL and CHECK. STATUS
//!   goes to the IPAM plugin when `ipam.type` is set; GC is a no-op, as in Go.
//!
//! Deliberate differences from the Go plugin:
//! - no `ip tuntap` subprocess: the ioctls are made directly whatever `owner`/`group` say;
//!   as in Go, `IFF_VNET_HDR` is set only when both `owner` and `group` are given (Go's
//!   netlink path; its `ip tuntap` path sets no vnet header);
//! - `selinuxcontext` is refused (code 7): rcni does not label the devices it makes;
//! - a failed ADD deletes the tap and releases the lease; DEL runs both steps and reports
//!   every error; CHECK also checks the link is a tap with the result's MAC (and bridge).

pub mod add;
pub mod conf;
pub mod del;

use cni_plugin::{ipam, FnPlugin};

/// The tap plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status_if_configured,
    ..FnPlugin::new(add::add, del::del, del::check)
};
