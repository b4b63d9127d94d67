//! Turning kernel links into result entries.

use cni_linux::rtnl::link::Link;
use cni_types::Interface;

/// The link's MAC as Go prints it (lower-case, colon-separated), empty when it has none.
pub fn mac_string(link: &Link) -> String {
    link.mac.map(|m| m.to_string()).unwrap_or_default()
}

/// A result `interfaces` entry for `link`; `sandbox` is the netns path, empty on the host.
pub fn interface_of(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: mac_string(link),
        sandbox: sandbox.to_string(),
        ..Interface::default()
    }
}
