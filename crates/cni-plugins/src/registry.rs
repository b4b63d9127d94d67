//! The plugins this executable contains, by the name it is invoked as: the one place a
//! plugin is registered. Each entry names a plugin value: a plugin whose commands live in
//! their own files is a [`FnPlugin`](cni_plugin::FnPlugin) table in its module (`ptp::PLUGIN`), a plugin written in
//! one file implements [`Plugin`] itself. The about line every plugin prints comes from here.
//!
//! Adding a plugin: declare its module in `lib.rs` and add one `entry(...)` line here.

use cni_plugin::{CmdArgs, Plugin, RepairAnswer, RepairMode};
use cni_types::{CniError, CniResult, SpecVersion};

use crate::{
    bandwidth, bridge, dhcp, dummy, firewall, host_device, host_local, ipvlan, loopback, macvlan,
    portmap, ptp, sbr, static_ipam, tap, tuning, vlan, vrf,
};

/// One plugin of the multi-call binary.
#[derive(Clone, Copy)]
pub struct PluginEntry {
    /// The executable name (`CNI "type"`), e.g. `host-local`.
    pub name: &'static str,
    /// One line for `--help`.
    pub summary: &'static str,
    /// The plugin's commands.
    pub plugin: &'static dyn Plugin,
}

const fn entry(
    name: &'static str,
    summary: &'static str,
    plugin: &'static dyn Plugin,
) -> PluginEntry {
    PluginEntry {
        name,
        summary,
        plugin,
    }
}

/// Every plugin, in `--help` order.
pub const PLUGINS: &[PluginEntry] = &[
    entry(
        "loopback",
        "set the loopback interface up",
        &loopback::Loopback,
    ),
    entry(
        "bridge",
        "connect the container to a Linux bridge through a veth pair",
        &bridge::PLUGIN,
    ),
    entry(
        "ptp",
        "routed veth pair between the container and the host",
        &ptp::PLUGIN,
    ),
    entry(
        "macvlan",
        "a macvlan link on a host interface in the container",
        &macvlan::PLUGIN,
    ),
    entry(
        "ipvlan",
        "an ipvlan link on a host interface in the container",
        &ipvlan::PLUGIN,
    ),
    entry(
        "vlan",
        "an 802.1Q VLAN sub-interface of a host interface in the container",
        &vlan::PLUGIN,
    ),
    entry("dummy", "a dummy link in the container", &dummy::Dummy),
    entry(
        "host-device",
        "move an existing host device into the container",
        &host_device::PLUGIN,
    ),
    entry(
        "tap",
        "a persistent tap device in the container, optionally on a bridge",
        &tap::PLUGIN,
    ),
    entry(
        "sbr",
        "source-based routing: a table and a rule per container address",
        &sbr::PLUGIN,
    ),
    entry(
        "vrf",
        "put the container interface into a VRF (CONFIG_NET_VRF)",
        &vrf::PLUGIN,
    ),
    entry(
        "portmap",
        "forward host ports to the container (nftables)",
        &portmap::Portmap,
    ),
    entry(
        "firewall",
        "accept forwarded container traffic, isolate bridges (nftables)",
        &firewall::Firewall,
    ),
    entry(
        "tuning",
        "container sysctls and link attributes, restored on DEL",
        &tuning::Tuning,
    ),
    entry(
        "bandwidth",
        "shape container traffic with tbf qdiscs and an ifb device",
        &bandwidth::BandwidthPlugin,
    ),
    entry(
        "host-local",
        "allocate addresses from ranges, leases kept on disk",
        &host_local::HostLocal,
    ),
    entry(
        "dhcp",
        "addresses from a DHCP server via `rcni-plugins dhcp daemon`",
        &dhcp::PLUGIN,
    ),
    entry(
        "static",
        "fixed addresses, routes and DNS from the config",
        &static_ipam::StaticIpam,
    ),
];

/// The plugin called `name`, if this binary contains it.
pub fn plugin_by_name(name: &str) -> Option<Box<dyn Plugin>> {
    PLUGINS
        .iter()
        .find(|p| p.name == name)
        .map(|entry| Box::new(Registered(entry)) as Box<dyn Plugin>)
}

/// The "about" line every plugin prints when run without `CNI_COMMAND`.
fn about(plugin: &str) -> String {
    format!(
        "CNI {plugin} plugin (rcni-plugins v{})",
        env!("CARGO_PKG_VERSION")
    )
}

/// A plugin as the registry hands it out: its own commands, and the about line of its name.
struct Registered(&'static PluginEntry);

impl Plugin for Registered {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        self.0.plugin.add(args)
    }
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.0.plugin.del(args)
    }
    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.0.plugin.check(args)
    }
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.0.plugin.status(args)
    }
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        self.0.plugin.gc(args)
    }
    fn repair(&self, args: &CmdArgs, mode: RepairMode) -> Result<RepairAnswer, CniError> {
        self.0.plugin.repair(args, mode)
    }
    fn supported_versions(&self) -> Vec<SpecVersion> {
        self.0.plugin.supported_versions()
    }
    fn about(&self) -> String {
        about(self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_unique_names() {
        assert!(plugin_by_name("loopback").is_some());
        assert!(plugin_by_name("rcni-plugins").is_none());
        assert!(plugin_by_name("").is_none());
        let mut names: Vec<&str> = PLUGINS.iter().map(|p| p.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PLUGINS.len());
        for name in names {
            assert!(!name.contains('/') && !name.is_empty());
            assert!(plugin_by_name(name).unwrap().about().contains(name));
        }
    }
}
