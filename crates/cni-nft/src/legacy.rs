//! Read-only detection of an iptables-legacy (x_tables) `filter` table, whose FORWARD chain
//! no nf_tables rule can override: on the forward hook, x_tables' verdict and every nf_tables
//! base chain's verdict all have to be accept.
//!
//! `/proc/net/ip[6]_tables_names` lists the x_tables tables of the calling thread's network
//! namespace; iptables-nft never creates them, iptables-legacy does (Docker on a legacy host,
//! or any `iptables-legacy` command naming the table). Reading the chain's rules and policy
//! would take `IPT_SO_GET_ENTRIES`, a getsockopt whose input buffer needs `unsafe` code, which
//! this workspace forbids; so the table's presence is the signal.

use std::io;

use crate::objects::Family;
use crate::Error;

/// The names file of `family`'s x_tables tables.
pub fn names_file(family: Family) -> Result<&'static str, Error> {
    match family {
        Family::Ip => Ok("/proc/net/ip_tables_names"),
        Family::Ip6 => Ok("/proc/net/ip6_tables_names"),
        other => Err(Error::Invalid(format!(
            "x_tables exist for ip and ip6, not {other}"
        ))),
    }
}

/// True when this namespace has an iptables-legacy `filter` table for `family`.
pub fn legacy_filter_present(family: Family) -> Result<bool, Error> {
    match std::fs::read_to_string(names_file(family)?) {
        Ok(names) => Ok(lists_filter(&names)),
        // No ip_tables support in the kernel at all.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::Io(e)),
    }
}

fn lists_filter(names: &str) -> bool {
    names.lines().any(|n| n.trim() == "filter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_filter_table_counts() {
        assert!(lists_filter("nat\nfilter\n"));
        assert!(!lists_filter("nat\nmangle\n"));
        assert!(!lists_filter(""));
    }

    #[test]
    fn other_families_are_refused() {
        assert!(matches!(
            legacy_filter_present(Family::Inet),
            Err(Error::Invalid(_))
        ));
    }
}
