//! The constant part of a plugin's nf_tables layout (its table, chains, and the fixed jump rules
//! of its base chains) is written only when it is missing or not as expected.
//!
//! Why: a transaction that re-declares a table or base chain, or flushes a base chain, costs the
//! kernel far more than one that only adds per-attachment rules. The Go plugins rewrite the
//! skeleton on every ADD; rcni checks first with read-only dumps. Concurrent first ADDs all write the skeleton, and because each rewrite
//! is one atomic flush-and-fill batch, exactly one copy remains.

use cni_nft::{Error as NftError, Family, Nft};

/// Where the skeleton lives and what makes it complete.
pub struct Skeleton<'a> {
    pub family: Family,
    pub table: &'a str,
    /// Every chain the skeleton declares.
    pub chains: &'a [&'a str],
    /// Base chains with fixed rules, and how many; those rules carry [`Skeleton::marker`].
    pub fixed: &'a [(&'a str, usize)],
    /// The comment on every fixed rule; change it when the fixed rules change.
    pub marker: &'a str,
}

impl Skeleton<'_> {
    /// True when the table, every chain, and exactly the expected marked fixed rules exist.
    pub fn in_place(&self, nft: &mut Nft) -> Result<bool, NftError> {
        if !nft.table_exists(self.family, self.table)? {
            return Ok(false);
        }
        let present = nft.list_chains(self.family, self.table)?;
        if !self
            .chains
            .iter()
            .all(|c| present.iter().any(|p| p.name == *c))
        {
            return Ok(false);
        }
        for (chain, count) in self.fixed {
            let rules = nft.list_rules(self.family, self.table, chain)?;
            let marked = rules
                .iter()
                .all(|r| r.comment.as_deref() == Some(self.marker));
            if rules.len() != *count || !marked {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
