//! Masquerade of pod traffic that leaves the cluster network, and only that: pod-to-pod traffic
//! across nodes keeps its source address.
//!
//! The rules live in the agent's own nf_tables tables `ip rcni-node` and, on an IPv6 network,
//! `ip6 rcni-node` (the table name is the attribution), replaced as a whole in one atomic batch,
//! so a restart or a network change never leaves half a rule set and nothing else's rules are
//! touched; the table of a family the network does not have is removed:
//!
//! ```text
//! table ip rcni-node { chain postrouting { type nat hook postrouting priority srcnat;
//!   ip saddr <net> ip daddr <net> return
//!   ip saddr <net> ip daddr 224.0.0.0/4 return
//!   ip saddr <net> masquerade } }
//! table ip6 rcni-node { ... the same with <net6> and ff00::/8 }
//! ```

use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Rule};
use ipnet::IpNet;

/// The agent's table (in each family).
pub const TABLE: &str = "rcni-node";
const CHAIN: &str = "postrouting";
const COMMENT: &str = "rcni-node: masquerade what leaves the cluster network";

/// The batch that (re)creates the table of each family of `networks` with its rules and
/// removes the table of a family not there.
pub fn batch(networks: &[IpNet]) -> Result<Batch, cni_nft::Error> {
    let mut b = Batch::new();
    for family in [Family::Ip, Family::Ip6] {
        let network = networks
            .iter()
            .find(|n| n.addr().is_ipv4() == (family == Family::Ip));
        b.add_table(family, TABLE)?;
        b.destroy_table(family, TABLE)?;
        let Some(&network) = network else {
            continue;
        };
        let multicast: IpNet = if family == Family::Ip {
            "224.0.0.0/4"
        } else {
            "ff00::/8"
        }
        .parse()
        .expect("literal");
        b.add_table(family, TABLE)?;
        b.add_chain(&Chain::base(
            family,
            TABLE,
            CHAIN,
            ChainType::Nat,
            Hook::Postrouting,
            priority::SRCNAT,
        ))?;
        let rule = || Rule::builder(family, TABLE, CHAIN).saddr(network);
        b.add_rule(&rule().daddr(network).ret().comment(COMMENT).build()?);
        b.add_rule(&rule().daddr(multicast).ret().comment(COMMENT).build()?);
        b.add_rule(&rule().masquerade().comment(COMMENT).build()?);
    }
    Ok(b)
}

/// Installs (or replaces) the rules in the calling thread's namespace.
pub fn install(networks: &[IpNet]) -> Result<(), cni_nft::Error> {
    Nft::new()?.commit(&batch(networks)?)
}
