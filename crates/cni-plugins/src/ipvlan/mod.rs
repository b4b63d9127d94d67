//! ipvlan (Go: containernetworking/plugins `plugins/main/ipvlan/ipvlan.go`): an ipvlan link on a
//! master interface, created under a temporary name straight into the container namespace and
//! renamed there. IPAM is required unless the plugin is chained after one whose `prevResult`
//! already holds the IPs.
//!
//! - [`conf`]: the config keys, the chained master and address rules; [`add`], [`del`],
//!   [`check`]: the commands. STATUS goes to the IPAM plugin when set; GC deletes stale attachments' links
//!   through their records (`dataDir`, as macvlan), then goes to IPAM (Go: GC is a no-op).
//!
//! Needs `CONFIG_IPVLAN` (`IPVLAN_L3S` for l3s); a kernel without it answers EOPNOTSUPP,
//! reported as "failed to create ipvlan: ... (the kernel lacks ipvlan support)".
//!
//! Deliberate differences from the Go plugin: a failed ADD deletes the link and releases the
//! IPAM lease (Go rolls back neither); DEL never looks up the master; CHECK of a chained
//! master from `prevResult` does not look the master up again; config errors are code 7.

pub mod add;
pub mod check;
pub mod conf;
pub mod del;

use cni_plugin::{ipam, FnPlugin};

use crate::common::sublink;

/// The ipvlan plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status_if_configured,
    gc: sublink::gc,
    ..FnPlugin::new(add::add, del::del, check::check)
};
