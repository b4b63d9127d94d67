//! vrf (Go: containernetworking/plugins `plugins/meta/vrf/`): puts `CNI_IFNAME` into a VRF device
//! in the container, creating the VRF (`vrfname`, with `table` or the lowest table no other VRF
//! uses) or reusing it, and keeps the interface's addresses and routes: IPv6 global addresses the
//! kernel drops on enslaving are added back and the interface's universe-scope routes are re-added
//! in the VRF table.
//!
//! - [`conf`]: the keys; [`device`]: finding VRFs; [`add`] (transactional: a VRF it created is
//!   deleted and the interface released on failure), [`del`] (releases the interface; deletes
//!   the VRF when no interface is left in it) and [`check`]. STATUS and GC are no-ops, as in Go.
//!
//! Needs `CONFIG_NET_VRF`; a kernel without it answers EOPNOTSUPP, reported as "... the
//! kernel lacks VRF support (CONFIG_NET_VRF)".
//!
//! Deliberate differences from the Go plugin: ADD rolls back; DEL succeeds when the
//! interface is already gone (and still deletes an empty VRF), as Go's open PR #1282 does.

pub mod add;
pub mod check;
pub mod conf;
pub mod del;
pub mod device;

use cni_plugin::FnPlugin;

/// The vrf plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin::new(add::add, del::del, check::check);
