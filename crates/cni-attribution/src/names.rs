//! Every table, chain, directory and file name the plugins and `rcni-node` give what they
//! make, in one place. Where a layout is shared with the Go reference plugins the names are
//! theirs, so either implementation recognises (and tears down) the other's objects; a name
//! must never change, since objects carrying it are already on nodes.
//!
//! Per-attachment names are derived from [`crate::AttachmentId`]; the ones here are fixed.

/// An nf_tables address family, as the tables here live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NftFamily {
    Inet,
    Ip,
    Ip6,
    Bridge,
}

/// bridge/ptp `ipMasq`: the Go plugins' nftables backend layout, family `inet`.
pub mod masquerade {
    use super::NftFamily;

    pub const FAMILY: NftFamily = NftFamily::Inet;
    pub const TABLE: &str = "cni_plugins_masquerade";
    /// The per-address (tagged) rules.
    pub const CHECKS_CHAIN: &str = "masq_checks";
    /// The base chain.
    pub const POSTROUTING_CHAIN: &str = "postrouting";
}

/// portmap: one table per family (`ip`, `ip6`).
pub mod portmap {
    use super::NftFamily;

    pub const TABLE: &str = "cni_hostport";
    pub const HOSTPORTS: &str = "hostports";
    pub const HOSTIP_HOSTPORTS: &str = "hostip_hostports";
    pub const PREROUTING: &str = "prerouting";
    pub const OUTPUT: &str = "output";
    pub const MASQUERADING: &str = "masquerading";
    /// The chains holding per-attachment (tagged) rules.
    pub const RULE_CHAINS: [&str; 3] = [HOSTPORTS, HOSTIP_HOSTPORTS, MASQUERADING];
    /// Both tables.
    pub const TABLES: [(NftFamily, &str); 2] = [(NftFamily::Ip, TABLE), (NftFamily::Ip6, TABLE)];
}

/// firewall's isolation (`ingressPolicy: same-bridge`), family `inet`.
pub mod firewall_isolation {
    use super::NftFamily;

    pub const FAMILY: NftFamily = NftFamily::Inet;
    pub const TABLE: &str = "cni_firewall";
    pub const FORWARD: &str = "forward";
    pub const STAGE1: &str = "isolation_stage1";
    pub const STAGE2: &str = "isolation_stage2";
    /// The chain of earlier rcni versions' accept rules, cleaned by DEL and GC.
    pub const OLD_ACCEPTS: &str = "cni_forward";
    /// The chains holding per-attachment (tagged) rules.
    pub const RULE_CHAINS: [&str; 2] = [STAGE1, STAGE2];
    /// The chains DEL and GC clean.
    pub const CLEANED_CHAINS: [&str; 3] = [STAGE1, STAGE2, OLD_ACCEPTS];
}

/// firewall's iptables backend layout (the `filter` table iptables-nft keeps, `ip` and `ip6`).
pub mod firewall_iptables {
    use super::NftFamily;

    pub const TABLE: &str = "filter";
    pub const FORWARD: &str = "FORWARD";
    pub const CNI_FORWARD: &str = "CNI-FORWARD";
    /// The default `iptablesAdminChainName`.
    pub const DEFAULT_ADMIN_CHAIN: &str = "CNI-ADMIN";
    /// The chains holding per-attachment (tagged) rules.
    pub const RULE_CHAINS: [&str; 1] = [CNI_FORWARD];
    /// Both families' tables.
    pub const TABLES: [(NftFamily, &str); 2] = [(NftFamily::Ip, TABLE), (NftFamily::Ip6, TABLE)];
}

/// bridge `macspoofchk` (Go's `pkg/link/spoofcheck.go`): table `bridge nat`, and per
/// attachment two chains and a rule comment ([`spoofcheck::names`]). Go's names carry no
/// network, so neither do these.
pub mod spoofcheck {
    use super::NftFamily;

    pub const FAMILY: NftFamily = NftFamily::Bridge;
    pub const TABLE: &str = "nat";
    /// The base chain.
    pub const PREROUTING_CHAIN: &str = "PREROUTING";
    /// `cni-br-iface-<cid>-<ifname>` (and `...-mac`): an attachment's chains.
    pub const CHAIN_PREFIX: &str = "cni-br-iface-";
    /// `macspoofchk-<cid>-<ifname>`: the comment of every rule of an attachment.
    pub const COMMENT_PREFIX: &str = "macspoofchk-";

    /// An attachment's (iface chain, mac chain, rule comment).
    pub fn names(container_id: &str, ifname: &str) -> (String, String, String) {
        let iface = format!("{CHAIN_PREFIX}{container_id}-{ifname}");
        let mac = mac_chain(&iface);
        (
            iface,
            mac,
            format!("{COMMENT_PREFIX}{container_id}-{ifname}"),
        )
    }

    /// The mac chain an iface chain jumps to.
    pub fn mac_chain(iface_chain: &str) -> String {
        format!("{iface_chain}-mac")
    }
}

/// The `nat` tables iptables-nft keeps (`ip`, `ip6`), where the Go plugins' ipMasq chains
/// ([`crate::AttachmentId::go_masq_chain`]) live.
pub const GO_NAT_TABLE: &str = "nat";

/// rcni-node's masquerade of pod traffic leaving the cluster network: its own table in `ip`
/// and `ip6` (the table name is the attribution).
pub mod rcni_node {
    pub const TABLE: &str = "rcni-node";
    pub const CHAIN: &str = "postrouting";
    /// The WireGuard device of the `wireguard` backend (the IPv4 one in flannel's `separate`
    /// mode, the only one otherwise); every peer on it is the agent's.
    pub const WIREGUARD_DEVICE: &str = "rcni-wg";
    /// The IPv6 WireGuard device of `separate` mode.
    pub const WIREGUARD_DEVICE_V6: &str = "rcni-wg-v6";
    /// The WireGuard status (per peer its node, last handshake and bytes), relative to the
    /// agent's state directory, where its `node-status.json` is.
    pub const WIREGUARD_STATUS: &str = "wireguard/status.json";
}

/// The multi-call executable every rcni plugin name links to (`rcni-plugins install`): the
/// runtime sends rcni's own repair commands only to it.
pub const PLUGINS_EXECUTABLE: &str = "rcni-plugins";

/// The tables whose rules carry attachment tags ([`crate::AttachmentId::comment`]).
pub fn tagged_tables() -> Vec<(NftFamily, &'static str)> {
    let mut t = vec![
        (masquerade::FAMILY, masquerade::TABLE),
        (firewall_isolation::FAMILY, firewall_isolation::TABLE),
    ];
    t.extend(portmap::TABLES);
    t.extend(firewall_iptables::TABLES);
    t
}

/// host-local's lease directory when the config names no `dataDir` (Go's):
/// `<dataDir>/<network>/<ip>`, holding [`host_local_lease`].
pub const HOST_LOCAL_DATA_DIR: &str = "/var/lib/cni/networks";
/// Separator between container ID and interface name in a host-local lease file.
pub const HOST_LOCAL_LINE_BREAK: &str = "\r\n";

/// `<containerID>\r\n<ifname>`: what host-local writes into a lease file of the network's
/// directory (Go's format, the container ID trimmed as Go writes it).
pub fn host_local_lease(container_id: &str, ifname: &str) -> String {
    format!("{}{HOST_LOCAL_LINE_BREAK}{ifname}", container_id.trim())
}

/// `<containerID>_<ifname>.json`: the backup file of tuning and the state file of
/// host-device (the Go tuning plugin's name, so either restores the other's backup). Go's
/// name carries no network, so neither does this.
pub fn backup_file_name(container_id: &str, ifname: &str) -> String {
    format!("{container_id}_{ifname}.json")
}

/// tuning's backups when the config names no `dataDir` (Go's): [`backup_file_name`].
pub const TUNING_DATA_DIR: &str = "/run/cni/tuning";

/// host-device's state when the config names no `dataDir` (rcni only):
/// [`backup_file_name`].
pub const HOST_DEVICE_DATA_DIR: &str = "/run/cni/rcni-host-device";

/// The dhcp daemon's lease records (rcni only; Go's daemon keeps leases in memory):
/// [`crate::AttachmentId::dhcp_lease_file_name`].
pub const DHCP_STATE_DIR: &str = "/var/lib/rcni/dhcp";

/// bandwidth's records: [`crate::AttachmentId::record_file_name`].
pub const BANDWIDTH_RECORD_DIR: &str = "/run/rcni/bandwidth";

/// The sub-link plugins' records when the config names no `dataDir`:
/// [`crate::AttachmentId::record_file_name`].
pub const SUBLINK_RECORD_DIR: &str = "/run/rcni/sublink";

/// `rcni-node`'s state directory when `--state-dir` is not given (its status file, its pods'
/// leases, its sockets).
pub const NODE_STATE_DIR: &str = "/run/rcni";

/// The root-only unix socket in `rcni-node`'s state directory on which it serves its flows
/// (`rcni flows`).
pub const NODE_FLOWS_SOCKET: &str = "flows.sock";
