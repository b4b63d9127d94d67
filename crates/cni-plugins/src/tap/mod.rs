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

use cni_plugin::{ipam, CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

/// The tap plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tap;

impl Plugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::check(args)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        ipam::ipam_status_if_configured(args)
    }

    fn about(&self) -> String {
        crate::about("tap")
    }
}
