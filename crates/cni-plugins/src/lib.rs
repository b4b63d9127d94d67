//! rcni's CNI plugins, one module per plugin, all implementing [`cni_plugin::Plugin`], and
//! the registry the multi-call executable `rcni-plugins` dispatches with.

pub mod bandwidth;
pub mod bridge;
pub mod common;
pub mod dhcp;
pub mod dummy;
pub mod firewall;
pub mod host_device;
pub mod host_local;
pub mod install;
mod ipam_shared;
pub mod ipvlan;
pub mod loopback;
pub mod macvlan;
mod netns;
pub mod portmap;
pub mod ptp;
mod registry;
pub mod sbr;
pub mod static_ipam;
pub mod tap;
pub mod tuning;
pub mod vlan;
pub mod vrf;

pub use registry::{plugin_by_name, PluginEntry, PLUGINS};
