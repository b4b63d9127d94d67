//! The files the agent writes for the node's container runtime and for flannel-aware tools:
//! `<cni-conf-dir>/10-rcni.conflist` and the subnet file (`FLANNEL_*` keys).
//!
//! The conflist chains bridge (`rcni0`, gateway and default gateway, host-local over the node
//! subnet with a route to the cluster network, its leases under the agent's state dir), portmap
//! and tuning; `cniVersion` 1.1.0 so that runtimes ask STATUS. Masquerade is not the
//! bridge plugin's `ipMasq`: that one masquerades everything leaving the *node* subnet, which
//! would hide pod addresses from pods on other nodes; the agent masquerades only what leaves the
//! *cluster* network ([`crate::masq`]). The bridge entry carries `rcniNodeStatus`, the status
//! file its STATUS reads (daemon-backed STATUS).

use std::io;
use std::path::Path;

use ipnet::Ipv4Net;
use serde_json::{json, Value};

use crate::files::write_atomic;
use crate::network::NetworkConfig;

/// The file name of the conflist.
pub const CONFLIST_NAME: &str = "10-rcni.conflist";
/// The network name in the conflist.
pub const NETWORK_NAME: &str = "rcni";
/// The node bridge.
pub const BRIDGE_NAME: &str = "rcni0";

/// The node's conflist.
pub fn conflist(
    network: &NetworkConfig,
    subnet: Ipv4Net,
    mtu: u32,
    status_file: &Path,
    ipam_dir: &Path,
) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE_NAME,
                "isGateway": true,
                "isDefaultGateway": true,
                "mtu": mtu,
                "rcniNodeStatus": status_file,
                "ipam": {
                    "type": "host-local",
                    "dataDir": ipam_dir,
                    "ranges": [[{"subnet": subnet.to_string()}]],
                    "routes": [{"dst": network.network.to_string()}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "tuning", "capabilities": {"mac": true}}
        ]
    })
}

/// flannel's `subnet.env`: the cluster network, the node subnet as its first address with the
/// prefix length, the pod MTU and whether the node masquerades.
pub fn subnet_env(network: &NetworkConfig, subnet: Ipv4Net, mtu: u32, ip_masq: bool) -> String {
    let first = Ipv4Net::new(
        std::net::Ipv4Addr::from(u32::from(subnet.network()) + 1),
        subnet.prefix_len(),
    )
    .expect("same prefix length");
    format!(
        "FLANNEL_NETWORK={}\nFLANNEL_SUBNET={first}\nFLANNEL_MTU={mtu}\nFLANNEL_IPMASQ={ip_masq}\n",
        network.network
    )
}

/// The node subnet recorded in a subnet file, if the file exists and names one.
pub fn read_subnet_file(path: &Path) -> Option<Ipv4Net> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("FLANNEL_SUBNET="))
        .and_then(|v| v.trim().parse::<Ipv4Net>().ok())
        .map(|n| n.trunc())
}

/// Writes both files atomically.
pub fn write_all(
    conf_dir: &Path,
    subnet_file: &Path,
    network: &NetworkConfig,
    subnet: Ipv4Net,
    mtu: u32,
    status_file: &Path,
    ipam_dir: &Path,
) -> io::Result<()> {
    let list = conflist(network, subnet, mtu, status_file, ipam_dir);
    let mut text = serde_json::to_vec_pretty(&list).map_err(io::Error::other)?;
    text.push(b'\n');
    write_atomic(&conf_dir.join(CONFLIST_NAME), &text)?;
    write_atomic(
        subnet_file,
        subnet_env(network, subnet, mtu, true).as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network() -> NetworkConfig {
        NetworkConfig::parse(br#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan"}}"#).unwrap()
    }

    #[test]
    fn conflist_is_bridge_host_local_portmap_tuning_with_the_node_subnet() {
        let list = conflist(
            &network(),
            "198.19.4.0/24".parse().unwrap(),
            1450,
            Path::new("/run/rcni/node-status.json"),
            Path::new("/var/lib/rcni/ipam"),
        );
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "rcni0");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["mtu"], 1450);
        assert_eq!(bridge.get("ipMasq"), None);
        assert_eq!(bridge["rcniNodeStatus"], "/run/rcni/node-status.json");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "198.19.4.0/24");
        assert_eq!(bridge["ipam"]["routes"][0]["dst"], "198.19.0.0/16");
        assert_eq!(bridge["ipam"]["dataDir"], "/var/lib/rcni/ipam");
        assert_eq!(list["plugins"][1]["type"], "portmap");
        assert_eq!(list["plugins"][2]["type"], "tuning");
        // The runtime's parser accepts it.
        let text = serde_json::to_vec(&list).unwrap();
        cni_types::config::NetConfList::parse(&text).unwrap();
    }

    #[test]
    fn subnet_file_has_flannels_keys_and_reads_back() {
        let env = subnet_env(&network(), "198.19.4.0/24".parse().unwrap(), 1450, true);
        assert_eq!(
            env,
            "FLANNEL_NETWORK=198.19.0.0/16\nFLANNEL_SUBNET=198.19.4.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        std::fs::write(&path, env).unwrap();
        assert_eq!(
            read_subnet_file(&path),
            Some("198.19.4.0/24".parse().unwrap())
        );
        assert_eq!(read_subnet_file(&dir.path().join("missing")), None);
    }
}
