//! Masquerade of pod traffic that leaves the cluster network, and only that: pod-to-pod traffic
//! across nodes keeps its source address.
//!
//! The rules live in the agent's own nf_tables table `ip rcni-node` (the table name is the
//! attribution), replaced as a whole in one atomic batch, so a restart or a network change never
//! leaves half a rule set and nothing else's rules are touched:
//!
//! ```text
//! table ip rcni-node { chain postrouting { type nat hook postrouting priority srcnat;
//!   ip saddr <net> ip daddr <net> return
//!   ip saddr <net> ip daddr 224.0.0.0/4 return
//!   ip saddr <net> masquerade } }
//! ```

use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Rule};
use ipnet::Ipv4Net;

/// The agent's table.
pub const TABLE: &str = "rcni-node";
const CHAIN: &str = "postrouting";
const COMMENT: &str = "rcni-node: masquerade what leaves the cluster network";

/// The batch that (re)creates the table with the rules for `network`.
pub fn batch(network: Ipv4Net) -> Result<Batch, cni_nft::Error> {
    let multicast: Ipv4Net = "224.0.0.0/4".parse().expect("literal");
    let mut b = Batch::new();
    b.add_table(Family::Ip, TABLE)?;
    b.destroy_table(Family::Ip, TABLE)?;
    b.add_table(Family::Ip, TABLE)?;
    b.add_chain(&Chain::base(
        Family::Ip,
        TABLE,
        CHAIN,
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))?;
    let rule = || Rule::builder(Family::Ip, TABLE, CHAIN).saddr(network);
    b.add_rule(&rule().daddr(network).ret().comment(COMMENT).build()?);
    b.add_rule(&rule().daddr(multicast).ret().comment(COMMENT).build()?);
    b.add_rule(&rule().masquerade().comment(COMMENT).build()?);
    Ok(b)
}

/// Installs (or replaces) the rules in the calling thread's namespace.
pub fn install(network: Ipv4Net) -> Result<(), cni_nft::Error> {
    Nft::new()?.commit(&batch(network)?)
}
