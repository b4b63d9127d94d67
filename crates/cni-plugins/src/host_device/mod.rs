//! host-device (Go: containernetworking/plugins `plugins/main/host-device/host-device.go`): moves
//! an existing host link into the container namespace, renamed to `CNI_IFNAME`, optionally
//! addressed by IPAM; DEL moves it back under its original name and MTU.
//!
//! - [`conf`]: the config keys and how the device is found (`device`, `hwaddr`,
//!   `kernelpath`, `pciBusID` or `runtimeConfig.deviceID`); [`state`]: what DEL needs to
//!   restore, written before ADD changes anything; [`add`]: transactional ADD; [`del`]: DEL;
//!   [`check`]: CHECK; [`restore`]: moving the device back, for DEL and a failed ADD. STATUS
//!   goes to the IPAM plugin when `ipam.type` is set; GC is a no-op, as in Go.
//!
//! Attribution: while in the container the link's alias holds its host name (exactly as the
//! Go plugin sets it, so either plugin's DEL can move the other's device back) and
//! `<dataDir>/<containerID>_<ifname>.json` (default `/run/cni/rcni-host-device`) holds the
//! host name, MTU and former alias.
//!
//! Deliberate differences from the Go plugin:
//! - DEL also restores the MTU and the former alias, and releases the IPAM lease even when
//!   the namespace is gone (Go returns early and leaks it: cni #1167);
//! - a failed ADD moves the device back and releases the lease;
//! - the move goes through a temporary host name (`hd` + 8 hex digits) rather than a
//!   temporary namespace;
//! - DPDK (devices without a kernel netdev, `deviceID` of a vfio-bound PCI function) and
//!   auxiliary-bus devices are refused with a clear error (`DPDKMode` too) rather than passed through;
//!   `kernelpath` must start with `/sys/devices/` as in Go.

pub mod add;
pub mod check;
pub mod conf;
pub mod del;
pub mod restore;
pub mod state;

use cni_plugin::{ipam, FnPlugin};

/// The host-device plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status_if_configured,
    ..FnPlugin::new(add::add, del::del, check::check)
};
