//! macvlan (Go: containernetworking/plugins `plugins/main/macvlan/macvlan.go`): a macvlan link on a
//! master interface, created under a temporary name straight into the container namespace and
//! renamed there, with or without IPAM.
//!
//! - [`conf`]: the config keys and the MAC sources; [`add`], [`del`], [`check`]: the commands.
//!   STATUS goes to the IPAM plugin when `ipam.type` is set; GC deletes the links of
//!   attachments not in the valid list through their records (a killed direct ADD's
//!   included, see [`crate::common::sublink_record`]), then goes to the IPAM plugin.
//!
//! Deliberate differences from the Go plugin (nothing a runtime depends on changes):
//! - a failed ADD deletes the link and releases the IPAM lease (Go keeps the link on IPAM
//!   and configuration errors);
//! - DEL does not resolve the master, keeps going after a failed IPAM DEL and reports all
//!   errors together;
//! - the temporary name is derived from the attachment (Go: random), so DEL removes a link a
//!   killed ADD left under it, and the link carries its attachment's tag as its alias (see
//!   [`crate::common::sublink`]); an rcni-only `dataDir` key (default
//!   `/run/rcni/sublink`) holds one record per attachment for GC (Go's GC is a no-op);
//! - config values of the wrong type, an unknown mode and an MTU above the master's are
//!   code 7 (Go: 999).

pub mod add;
pub mod check;
pub mod conf;
pub mod del;

use cni_plugin::{ipam, FnPlugin};

use crate::common::sublink;

/// The macvlan plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: ipam::ipam_status_if_configured,
    gc: sublink::gc,
    ..FnPlugin::new(add::add, del::del, check::check)
};
