//! What the kernel's `inet rcni_policy` table holds, read over netlink in the namespace
//! doctor runs in: its chains, the jumps of the pod chains the program should have, the
//! dispatch verdict maps and the peer sets the program should have.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cni_nft::{ConcatSet, Family, Nft, SetType, Verdict};
use cni_policy::nft::{map, MAPS, TABLE};

use super::expected::Expected;

/// The table as listed.
#[derive(Debug, Default)]
pub struct Observed {
    pub table: bool,
    pub chains: BTreeSet<String>,
    /// The chains attached to a hook.
    pub base_chains: BTreeSet<String>,
    /// The chains each listed pod chain jumps to, in rule order.
    pub jumps: BTreeMap<String, Vec<String>>,
    /// Verdict map elements, by map name.
    pub maps: BTreeMap<String, BTreeMap<IpAddr, Verdict>>,
    /// Members of the listed peer sets (a missing set lists as empty).
    pub sets: BTreeMap<String, BTreeSet<IpAddr>>,
}

/// Reads what `expected` needs to be compared with.
pub fn read(expected: &Expected) -> Result<Observed, cni_nft::Error> {
    let mut nft = Nft::new()?;
    let mut out = Observed {
        table: nft.table_exists(Family::Inet, TABLE)?,
        ..Observed::default()
    };
    if !out.table {
        return Ok(out);
    }
    for chain in nft.list_chains(Family::Inet, TABLE)? {
        if chain.is_base {
            out.base_chains.insert(chain.name.clone());
        }
        out.chains.insert(chain.name);
    }
    for plan in expected.pods.iter().flat_map(|p| &p.directions) {
        if !out.chains.contains(&plan.chain) {
            continue;
        }
        let jumps = nft.list_rule_jumps(Family::Inet, TABLE, &plan.chain)?;
        let targets = jumps.into_iter().filter_map(|(_, target)| target).collect();
        out.jumps.insert(plan.chain.clone(), targets);
    }
    for (name, _) in MAPS {
        let elements = nft.list_verdict_elements(&map(name))?;
        out.maps
            .insert(name.to_string(), elements.into_iter().collect());
    }
    for name in expected.peer_sets.keys() {
        // Listing reads the kernel's keys whatever the set's type: one dump per set.
        let set = ConcatSet::set(Family::Inet, TABLE, name, &[SetType::Ipv4Addr]);
        let elements = nft.list_concat_elements(&set)?;
        let members = elements.iter().filter_map(|e| address(&e.key)).collect();
        out.sets.insert(name.clone(), members);
    }
    Ok(out)
}

fn address(key: &[u8]) -> Option<IpAddr> {
    match key.len() {
        4 => <[u8; 4]>::try_from(key).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(key).ok().map(IpAddr::from),
        _ => None,
    }
}
