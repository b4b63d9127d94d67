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
//!
//! Each rule's comment says what it does with which network, so a restarted agent that finds
//! exactly the rules it wants (same chains, same comments in order) leaves them alone instead
//! of replacing the live tables.

use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Rule};
use ipnet::IpNet;

/// The agent's table (in each family) and its chain.
pub use cni_attribution::names::rcni_node::{CHAIN, TABLE};

/// The comments of the rules of `network` (in chain order): what each one does.
fn comments(network: IpNet, multicast: IpNet) -> [String; 3] {
    [
        format!("rcni-node: {network} to {network} keeps its source"),
        format!("rcni-node: {network} to {multicast} keeps its source"),
        format!("rcni-node: {network} leaving it is masqueraded"),
    ]
}

/// The network of `family` among `networks`, with that family's multicast range.
fn of_family(networks: &[IpNet], family: Family) -> Option<(IpNet, IpNet)> {
    let network = networks
        .iter()
        .find(|n| n.addr().is_ipv4() == (family == Family::Ip))?;
    let multicast = if family == Family::Ip {
        "224.0.0.0/4"
    } else {
        "ff00::/8"
    };
    Some((*network, multicast.parse().expect("literal")))
}

/// The batch that (re)creates the table of each family of `networks` with its rules and
/// removes the table of a family not there.
pub fn batch(networks: &[IpNet]) -> Result<Batch, cni_nft::Error> {
    let mut b = Batch::new();
    for family in [Family::Ip, Family::Ip6] {
        b.add_table(family, TABLE)?;
        b.destroy_table(family, TABLE)?;
        let Some((network, multicast)) = of_family(networks, family) else {
            continue;
        };
        let [to_network, to_multicast, leaving] = comments(network, multicast);
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
        b.add_rule(&rule().daddr(network).ret().comment(&to_network).build()?);
        b.add_rule(
            &rule()
                .daddr(multicast)
                .ret()
                .comment(&to_multicast)
                .build()?,
        );
        b.add_rule(&rule().masquerade().comment(&leaving).build()?);
    }
    Ok(b)
}

/// Installs the rules in the calling thread's namespace, unless they are there already;
/// returns whether it changed anything.
pub fn install(networks: &[IpNet]) -> Result<bool, cni_nft::Error> {
    let mut nft = Nft::new()?;
    if installed(&mut nft, networks)? {
        return Ok(false);
    }
    nft.commit(&batch(networks)?)?;
    Ok(true)
}

/// Whether the tables hold exactly the rules `networks` want (and no table of a family not
/// there).
fn installed(nft: &mut Nft, networks: &[IpNet]) -> Result<bool, cni_nft::Error> {
    for family in [Family::Ip, Family::Ip6] {
        let Some((network, multicast)) = of_family(networks, family) else {
            if nft.table_exists(family, TABLE)? {
                return Ok(false);
            }
            continue;
        };
        let chains = nft.list_chains(family, TABLE)?;
        if chains.len() != 1 || chains[0].name != CHAIN || !chains[0].is_base {
            return Ok(false);
        }
        let rules: Vec<Option<String>> = nft
            .list_rules(family, TABLE, CHAIN)?
            .into_iter()
            .map(|r| r.comment)
            .collect();
        let want = comments(network, multicast).map(Some);
        if rules != want {
            return Ok(false);
        }
    }
    Ok(true)
}
