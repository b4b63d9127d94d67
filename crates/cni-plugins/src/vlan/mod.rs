//! vlan (Go: containernetworking/plugins `plugins/main/vlan/vlan.go`): an 802.1Q sub-interface of a
//! master, created under a temporary name straight into the container namespace and renamed there,
//! then configured from IPAM.
//!
//! - [`conf`]: the config keys; [`add`], [`del`], [`check`]: the commands. STATUS always runs
//!   the IPAM plugin's STATUS, as in Go; GC deletes stale attachments' links through their
//!   records (`dataDir`, as macvlan), then goes to the IPAM plugin (Go: no-op).
//!
//! Needs `CONFIG_VLAN_8021Q`; a kernel without it answers EOPNOTSUPP, reported as "failed
//! to create vlan: ... (the kernel lacks vlan support)".
//!
//! Deliberate differences from the Go plugin: a failed ADD deletes the link and releases the
//! IPAM lease; a missing `ipam.type` is refused before anything is created; DEL does not
//! look the master up (Go's DEL fails once the master is gone); config errors are code 7.

pub mod add;
pub mod check;
pub mod conf;
pub mod del;

use cni_plugin::{ipam, FnPlugin};

use crate::common::sublink;

/// The vlan plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status,
    gc: sublink::gc,
    ..FnPlugin::new(add::add, del::del, check::check)
};
