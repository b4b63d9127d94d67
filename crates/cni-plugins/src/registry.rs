//! The plugins this executable contains, by the name it is invoked as.
//!
//! Adding a plugin: declare its module in `lib.rs` and add one `entry(...)` line here.

use cni_plugin::Plugin;

use crate::loopback;

/// One plugin of the multi-call binary.
#[derive(Clone, Copy)]
pub struct PluginEntry {
    /// The executable name (`CNI "type"`), e.g. `host-local`.
    pub name: &'static str,
    /// One line for `--help`.
    pub summary: &'static str,
    /// Makes the plugin.
    pub make: fn() -> Box<dyn Plugin>,
}

const fn entry(
    name: &'static str,
    summary: &'static str,
    make: fn() -> Box<dyn Plugin>,
) -> PluginEntry {
    PluginEntry {
        name,
        summary,
        make,
    }
}

/// Every plugin, in `--help` order.
pub const PLUGINS: &[PluginEntry] = &[
    entry("loopback", "set the loopback interface up", || {
        Box::new(loopback::Loopback)
    }),
    entry(
        "bridge",
        "connect the container to a Linux bridge through a veth pair",
        || Box::new(crate::bridge::Bridge),
    ),
    entry(
        "ptp",
        "routed veth pair between the container and the host",
        || Box::new(crate::ptp::Ptp),
    ),
    entry(
        "macvlan",
        "a macvlan link on a host interface in the container",
        || Box::new(crate::macvlan::Macvlan),
    ),
    entry(
        "ipvlan",
        "an ipvlan link on a host interface in the container",
        || Box::new(crate::ipvlan::Ipvlan),
    ),
    entry(
        "vlan",
        "an 802.1Q VLAN sub-interface of a host interface in the container",
        || Box::new(crate::vlan::Vlan),
    ),
    entry("dummy", "a dummy link in the container", || {
        Box::new(crate::dummy::Dummy)
    }),
    entry(
        "host-device",
        "move an existing host device into the container",
        || Box::new(crate::host_device::HostDevice),
    ),
    entry(
        "tap",
        "a persistent tap device in the container, optionally on a bridge",
        || Box::new(crate::tap::Tap),
    ),
    entry(
        "sbr",
        "source-based routing: a table and a rule per container address",
        || Box::new(crate::sbr::Sbr),
    ),
    entry(
        "vrf",
        "put the container interface into a VRF (CONFIG_NET_VRF)",
        || Box::new(crate::vrf::Vrf),
    ),
    entry(
        "portmap",
        "forward host ports to the container (nftables)",
        || Box::new(crate::portmap::Portmap),
    ),
    entry(
        "firewall",
        "accept forwarded container traffic, isolate bridges (nftables)",
        || Box::new(crate::firewall::Firewall),
    ),
    entry(
        "tuning",
        "container sysctls and link attributes, restored on DEL",
        || Box::new(crate::tuning::Tuning),
    ),
    entry(
        "bandwidth",
        "shape container traffic with tbf qdiscs and an ifb device",
        || Box::new(crate::bandwidth::BandwidthPlugin),
    ),
    entry(
        "host-local",
        "allocate addresses from ranges, leases kept on disk",
        || Box::new(crate::host_local::HostLocal),
    ),
    entry(
        "dhcp",
        "addresses from a DHCP server via `rcni-plugins dhcp daemon`",
        || Box::new(crate::dhcp::Dhcp),
    ),
    entry(
        "static",
        "fixed addresses, routes and DNS from the config",
        || Box::new(crate::static_ipam::StaticIpam),
    ),
];

/// The plugin called `name`, if this binary contains it.
pub fn plugin_by_name(name: &str) -> Option<Box<dyn Plugin>> {
    PLUGINS.iter().find(|p| p.name == name).map(|p| (p.make)())
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
