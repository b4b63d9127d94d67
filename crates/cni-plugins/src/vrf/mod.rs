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

use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult};

/// The vrf plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Vrf;

impl Plugin for Vrf {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check::check(args)
    }

    fn about(&self) -> String {
        crate::about("vrf")
    }
}
