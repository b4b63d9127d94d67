//! The files the agent writes for the node's container runtime and for flannel-aware tools:
//! `<cni-conf-dir>/10-rcni.conflist` and the subnet file (`FLANNEL_*` keys).
//!
//! The conflist chains bridge (`rcni0`, gateway and default gateway, host-local over the node
//! subnets, one range set per family, with a route to each cluster network, its leases under
//! the agent's state dir), portmap and tuning (its backups under the state dir too). Its
//! `cniVersion` and `cniVersions` come from [`crate::cni_version`]: 1.0.0 for runtimes that
//! read only `cniVersion`, and the list up to the plugins' highest common version (1.1.0 with
//! rcni's plugins, so that runtimes reading the list ask STATUS and GC).
//! Masquerade is not the bridge plugin's `ipMasq`: that one masquerades everything leaving the
//! *node* subnet, which would hide pod addresses from pods on other nodes; the agent masquerades
//! only what leaves the *cluster* network ([`crate::masq`]). The bridge entry carries
//! `rcniNodeStatus`, the status file its STATUS and ADD read (daemon-backed STATUS; ADD is
//! refused while the agent is not healthy), and `rcniNodeName`, so that a plugin can name the
//! node when the status file is missing; with NetworkPolicy on, also `rcniNodeSocket`, the
//! agent's pod socket, which the bridge plugin tells about each pod at ADD and DEL (see
//! [`crate::policy`]).
//!
//! The conflist is rewritten only when its content changes (a restarted agent leaves the file
//! and the directory the runtime watches untouched), through [`crate::files::publish`].

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde_json::{json, Value};

use crate::cni_version::ConfVersions;
use crate::files::{publish, write_atomic};
use crate::lease::Subnets;
use crate::network::NetworkConfig;

/// The file name of the conflist.
pub const CONFLIST_NAME: &str = "10-rcni.conflist";
/// The network name in the conflist.
pub const NETWORK_NAME: &str = "rcni";
/// The node bridge.
pub const BRIDGE_NAME: &str = "rcni0";

/// Everything the two files say about the node.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    /// The network config.
    pub network: NetworkConfig,
    /// The node's subnets.
    pub subnet: Subnets,
    /// The pod MTU.
    pub mtu: u32,
    /// The status file the plugins' STATUS reads.
    pub status_file: PathBuf,
    /// host-local's data directory.
    pub ipam_dir: PathBuf,
    /// tuning's backup directory (beside the leases, so that everything the agent's network
    /// keeps on disk lives under its state dir and not in `/run/cni`, which Go plugins share).
    pub tuning_dir: PathBuf,
    /// The conflist's `cniVersion` and `cniVersions`.
    pub versions: ConfVersions,
    /// The node's name.
    pub node_name: String,
    /// The agent's pod socket the bridge plugin tells about pods at ADD and DEL
    /// (`rcniNodeSocket`), when the agent enforces NetworkPolicy.
    pub pod_socket: Option<PathBuf>,
}

fn node_nets(subnet: Subnets) -> Vec<IpNet> {
    subnet
        .v4
        .map(IpNet::V4)
        .into_iter()
        .chain(subnet.v6.map(IpNet::V6))
        .collect()
}

impl NodeFiles {
    /// The node's conflist.
    pub fn conflist(&self) -> Value {
        let ranges: Vec<Value> = node_nets(self.subnet)
            .iter()
            .map(|n| json!([{"subnet": n.to_string()}]))
            .collect();
        let routes: Vec<Value> = self
            .network
            .networks()
            .iter()
            .map(|n| json!({"dst": n.to_string()}))
            .collect();
        let mut list = json!({
            "cniVersion": self.versions.cni_version.to_string(),
            "name": NETWORK_NAME,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE_NAME,
                    "isGateway": true,
                    "isDefaultGateway": true,
                    "mtu": self.mtu,
                    "rcniNodeStatus": self.status_file,
                    "rcniNodeName": self.node_name,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": self.ipam_dir,
                        "ranges": ranges,
                        "routes": routes
                    }
                },
                {"type": "portmap", "capabilities": {"portMappings": true}},
                {"type": "tuning", "capabilities": {"mac": true}, "dataDir": self.tuning_dir}
            ]
        });
        if let Some(socket) = &self.pod_socket {
            list["plugins"][0][cni_types::node_agent::SOCKET_KEY] = json!(socket);
        }
        if !self.versions.cni_versions.is_empty() {
            let offered: Vec<String> = self
                .versions
                .cni_versions
                .iter()
                .map(|v| v.to_string())
                .collect();
            list["cniVersions"] = json!(offered);
        }
        list
    }

    /// flannel's `subnet.env`: the cluster networks, each node subnet as its first address with
    /// the prefix length, the pod MTU and whether the node masquerades; then rcni's
    /// `RCNI_NODE_NAME` (flannel's readers skip keys they do not know).
    pub fn subnet_env(&self, ip_masq: bool) -> String {
        let first = |n: IpNet| {
            let next = match n.network() {
                IpAddr::V4(a) => IpAddr::V4((u32::from(a) + 1).into()),
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) + 1).into()),
            };
            IpNet::new(next, n.prefix_len()).expect("same prefix length")
        };
        let mut out = String::new();
        if let (Some(range), Some(sub)) = (self.network.ipv4, self.subnet.v4) {
            out += &format!(
                "FLANNEL_NETWORK={}\nFLANNEL_SUBNET={}\n",
                range.network,
                first(IpNet::V4(sub))
            );
        }
        if let (Some(range), Some(sub)) = (self.network.ipv6, self.subnet.v6) {
            out += &format!(
                "FLANNEL_IPV6_NETWORK={}\nFLANNEL_IPV6_SUBNET={}\n",
                range.network,
                first(IpNet::V6(sub))
            );
        }
        out += &format!(
            "FLANNEL_MTU={}\nFLANNEL_IPMASQ={ip_masq}\nRCNI_NODE_NAME={}\n",
            self.mtu, self.node_name
        );
        out
    }

    /// Writes both files atomically; the conflist only when its content changed.
    pub fn write_all(&self, conf_dir: &Path, subnet_file: &Path) -> io::Result<()> {
        let mut text = serde_json::to_vec_pretty(&self.conflist()).map_err(io::Error::other)?;
        text.push(b'\n');
        publish(&conf_dir.join(CONFLIST_NAME), &text)?;
        write_atomic(subnet_file, self.subnet_env(true).as_bytes())
    }
}

/// The node subnets recorded in a subnet file, if the file exists and names any.
pub fn read_subnet_file(path: &Path) -> Option<Subnets> {
    let text = std::fs::read_to_string(path).ok()?;
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
    };
    let subnets = Subnets {
        v4: value("FLANNEL_SUBNET")
            .and_then(|v| v.parse::<Ipv4Net>().ok())
            .map(|n| n.trunc()),
        v6: value("FLANNEL_IPV6_SUBNET")
            .and_then(|v| v.parse::<Ipv6Net>().ok())
            .map(|n| n.trunc()),
    };
    (subnets != Subnets::default()).then_some(subnets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(json: &str, subnet: Subnets, version: &str) -> NodeFiles {
        let version = cni_types::version::SpecVersion::parse(version).unwrap();
        NodeFiles {
            network: NetworkConfig::parse(json.as_bytes()).unwrap(),
            subnet,
            mtu: 1450,
            status_file: "/run/rcni/node-status.json".into(),
            ipam_dir: "/var/lib/rcni/ipam".into(),
            tuning_dir: "/var/lib/rcni/tuning".into(),
            versions: ConfVersions {
                cni_version: version,
                cni_versions: Vec::new(),
            },
            node_name: "node-a".into(),
            pod_socket: None,
        }
    }

    const V4: &str = r#"{"Network":"198.19.0.0/16","Backend":{"Type":"vxlan"}}"#;
    const DUAL: &str = r#"{"Network":"198.19.0.0/16","EnableIPv6":true,"IPv6Network":"2001:2::/48","Backend":{"Type":"vxlan"}}"#;

    fn dual_subnets() -> Subnets {
        Subnets {
            v4: Some("198.19.4.0/24".parse().unwrap()),
            v6: Some("2001:2:0:4::/64".parse().unwrap()),
        }
    }

    #[test]
    fn conflist_is_bridge_host_local_portmap_tuning_with_the_node_subnet() {
        let f = files(
            V4,
            "198.19.4.0/24".parse::<Ipv4Net>().unwrap().into(),
            "1.1.0",
        );
        let list = f.conflist();
        assert_eq!(list["cniVersion"], "1.1.0");
        assert_eq!(
            list.get("cniVersions"),
            None,
            "a pinned version has no list"
        );
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "rcni0");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["mtu"], 1450);
        assert_eq!(bridge.get("ipMasq"), None);
        assert_eq!(bridge["rcniNodeStatus"], "/run/rcni/node-status.json");
        assert_eq!(bridge["rcniNodeName"], "node-a");
        assert_eq!(
            bridge.get("rcniNodeSocket"),
            None,
            "no NetworkPolicy: no socket"
        );
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "198.19.4.0/24");
        assert_eq!(bridge["ipam"]["ranges"].as_array().unwrap().len(), 1);
        assert_eq!(bridge["ipam"]["routes"][0]["dst"], "198.19.0.0/16");
        assert_eq!(bridge["ipam"]["dataDir"], "/var/lib/rcni/ipam");
        assert_eq!(list["plugins"][1]["type"], "portmap");
        assert_eq!(list["plugins"][2]["type"], "tuning");
        assert_eq!(list["plugins"][2]["dataDir"], "/var/lib/rcni/tuning");
        // The runtime's parser accepts it.
        let text = serde_json::to_vec(&list).unwrap();
        cni_types::config::NetConfList::parse(&text).unwrap();
    }

    #[test]
    fn the_offered_versions_are_listed_and_the_runtimes_parser_picks_the_highest() {
        let mut f = files(
            V4,
            "198.19.4.0/24".parse::<Ipv4Net>().unwrap().into(),
            "1.0.0",
        );
        f.versions.cni_versions = ["0.4.0", "1.0.0", "1.1.0"]
            .iter()
            .map(|v| cni_types::version::SpecVersion::parse(v).unwrap())
            .collect();
        let list = f.conflist();
        assert_eq!(list["cniVersion"], "1.0.0");
        assert_eq!(list["cniVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
        let parsed =
            cni_types::config::NetConfList::parse(&serde_json::to_vec(&list).unwrap()).unwrap();
        assert_eq!(
            parsed.select_version().unwrap(),
            cni_types::version::SpecVersion::V1_1_0
        );
    }

    #[test]
    fn a_dual_stack_conflist_has_a_range_and_a_route_per_family() {
        let list = files(DUAL, dual_subnets(), "1.0.0").conflist();
        assert_eq!(list["cniVersion"], "1.0.0");
        let ipam = &list["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], "198.19.4.0/24");
        assert_eq!(ipam["ranges"][1][0]["subnet"], "2001:2:0:4::/64");
        assert_eq!(ipam["routes"][0]["dst"], "198.19.0.0/16");
        assert_eq!(ipam["routes"][1]["dst"], "2001:2::/48");
        cni_types::config::NetConfList::parse(&serde_json::to_vec(&list).unwrap()).unwrap();
    }

    #[test]
    fn with_network_policy_the_bridge_names_the_agents_pod_socket() {
        let mut f = files(
            V4,
            "198.19.4.0/24".parse::<Ipv4Net>().unwrap().into(),
            "1.0.0",
        );
        f.pod_socket = Some("/run/rcni/pods.sock".into());
        let list = f.conflist();
        assert_eq!(list["plugins"][0]["rcniNodeSocket"], "/run/rcni/pods.sock");
    }

    #[test]
    fn subnet_file_has_flannels_keys_and_reads_back() {
        let f = files(
            V4,
            "198.19.4.0/24".parse::<Ipv4Net>().unwrap().into(),
            "1.1.0",
        );
        let env = f.subnet_env(true);
        assert_eq!(
            env,
            "FLANNEL_NETWORK=198.19.0.0/16\nFLANNEL_SUBNET=198.19.4.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\nRCNI_NODE_NAME=node-a\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        std::fs::write(&path, env).unwrap();
        assert_eq!(read_subnet_file(&path), Some(f.subnet));
        assert_eq!(read_subnet_file(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_dual_stack_subnet_file_has_flannels_ipv6_keys_and_reads_back() {
        let f = files(DUAL, dual_subnets(), "1.1.0");
        let env = f.subnet_env(true);
        assert_eq!(
            env,
            "FLANNEL_NETWORK=198.19.0.0/16\nFLANNEL_SUBNET=198.19.4.1/24\n\
             FLANNEL_IPV6_NETWORK=2001:2::/48\nFLANNEL_IPV6_SUBNET=2001:2:0:4::1/64\n\
             FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\nRCNI_NODE_NAME=node-a\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        std::fs::write(&path, env).unwrap();
        assert_eq!(read_subnet_file(&path), Some(dual_subnets()));
    }
}
