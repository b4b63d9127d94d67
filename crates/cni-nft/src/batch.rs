//! [`Batch`]: the messages of one nf_tables transaction, each with a description used to name
//! the message the kernel rejected.

use crate::attr::{AttrWriter, Oversize};
use crate::message::NfMsg;
use crate::objects::{check_name, Chain, Family, Set};
use crate::rule::Rule;
use crate::sys::*;
use crate::Error;

/// One message of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) msg: NfMsg,
    /// For example `add rule ip cni_hostport hostports`.
    pub(crate) what: String,
}

/// The changes of one atomic transaction, applied with [`crate::Nft::commit`].
///
/// "Add" operations create objects only when missing (`NLM_F_CREATE` without `NLM_F_EXCL`), so
/// re-running a setup batch is harmless; rules are the exception, since every add appends one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    entries: Vec<Entry>,
    /// Last `NFTA_SET_ID` handed out (the kernel requires one per new set, unique in a batch).
    set_ids: u32,
    /// A rule whose message could not be encoded (the methods adding rules return nothing;
    /// [`crate::RuleBuilder::build`] already refuses such a rule, so this is a safety net):
    /// [`crate::Nft::commit`] refuses the batch with it.
    unencodable: Option<(String, Oversize)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The error of a rule that could not be encoded, if one was added.
    pub(crate) fn encode_error(&self) -> Option<Error> {
        self.unencodable
            .as_ref()
            .map(|(what, oversize)| oversize.error(what))
    }

    /// Appends one message; an attribute that does not fit its length field is an error
    /// naming the message, and nothing is appended.
    pub(crate) fn push(
        &mut self,
        kind: u8,
        flags: u16,
        family: Family,
        attrs: AttrWriter,
        what: String,
    ) -> Result<(), Error> {
        let attrs = attrs.finish(&what)?;
        self.entries.push(Entry {
            msg: NfMsg::nftables(kind, flags, family.number(), attrs),
            what,
        });
        Ok(())
    }

    /// Creates table `family name` if it does not exist.
    pub fn add_table(&mut self, family: Family, name: &str) -> Result<(), Error> {
        check_name("table", name)?;
        let mut a = AttrWriter::new();
        // No NFTA_TABLE_FLAGS: for an existing table the kernel then changes nothing (a flags
        // attribute would reset flags such as dormant set by someone else).
        a.str(NFTA_TABLE_NAME, name);
        self.push(
            NFT_MSG_NEWTABLE,
            NLM_F_CREATE,
            family,
            a,
            format!("add table {family} {name}"),
        )
    }

    /// Deletes table `family name` with everything in it; fails if it does not exist.
    pub fn delete_table(&mut self, family: Family, name: &str) -> Result<(), Error> {
        check_name("table", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_TABLE_NAME, name);
        self.push(
            NFT_MSG_DELTABLE,
            0,
            family,
            a,
            format!("delete table {family} {name}"),
        )
    }

    /// Deletes table `family name` whether or not it exists (it is created first, in the same
    /// transaction, which works on every kernel, unlike `NFT_MSG_DESTROYTABLE`).
    pub fn destroy_table(&mut self, family: Family, name: &str) -> Result<(), Error> {
        self.add_table(family, name)?;
        self.delete_table(family, name)
    }

    /// Creates a chain if it does not exist. For an existing base chain the kernel checks
    /// that type and hook match, and updates the policy.
    pub fn add_chain(&mut self, chain: &Chain) -> Result<(), Error> {
        check_name("table", &chain.table)?;
        check_name("chain", &chain.name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_CHAIN_TABLE, &chain.table)
            .str(NFTA_CHAIN_NAME, &chain.name);
        if let Some(base) = &chain.base {
            a.nested(NFTA_CHAIN_HOOK, |h| {
                h.be32(NFTA_HOOK_HOOKNUM, base.hook.number())
                    .be32(NFTA_HOOK_PRIORITY, base.priority as u32);
            });
            if let Some(policy) = base.policy {
                a.be32(NFTA_CHAIN_POLICY, policy.number());
            }
            a.str(NFTA_CHAIN_TYPE, base.chain_type.name());
        }
        self.push(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            chain.family,
            a,
            format!("add chain {} {} {}", chain.family, chain.table, chain.name),
        )
    }

    /// Deletes a chain; it must be empty and unreferenced, and must exist.
    pub fn delete_chain(&mut self, family: Family, table: &str, name: &str) -> Result<(), Error> {
        check_name("table", table)?;
        check_name("chain", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, name);
        self.push(
            NFT_MSG_DELCHAIN,
            0,
            family,
            a,
            format!("delete chain {family} {table} {name}"),
        )
    }

    /// Deletes every rule of a chain (`nft flush chain`); the chain must exist.
    pub fn flush_chain(&mut self, family: Family, table: &str, chain: &str) -> Result<(), Error> {
        check_name("table", table)?;
        check_name("chain", chain)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
        self.push(
            NFT_MSG_DELRULE,
            0,
            family,
            a,
            format!("flush chain {family} {table} {chain}"),
        )
    }

    fn rule_message(&mut self, rule: &Rule, flags: u16, verb: &str) {
        let mut a = AttrWriter::new();
        a.str(NFTA_RULE_TABLE, &rule.table)
            .str(NFTA_RULE_CHAIN, &rule.chain);
        if let Some(pos) = rule.position {
            a.be64(NFTA_RULE_POSITION, pos);
        }
        rule.encode_exprs(&mut a);
        if let Some(ud) = rule.userdata() {
            a.bytes(NFTA_RULE_USERDATA, &ud);
        }
        let what = match &rule.comment {
            Some(c) => format!(
                "{verb} rule {} {} {} (comment {c:?})",
                rule.family, rule.table, rule.chain
            ),
            None => format!("{verb} rule {} {} {}", rule.family, rule.table, rule.chain),
        };
        if let Err(oversize) = a.written() {
            self.unencodable.get_or_insert((what, oversize));
            return;
        }
        // Cannot fail: the attributes were just checked.
        let _ = self.push(NFT_MSG_NEWRULE, flags, rule.family, a, what);
    }

    /// Appends a rule at the end of its chain (or after the rule at its position).
    pub fn add_rule(&mut self, rule: &Rule) {
        self.rule_message(rule, NLM_F_CREATE | NLM_F_APPEND, "add");
    }

    /// Inserts a rule at the start of its chain (or before the rule at its position).
    pub fn insert_rule(&mut self, rule: &Rule) {
        self.rule_message(rule, NLM_F_CREATE, "insert");
    }

    /// Deletes the rule with `handle` from a chain.
    pub fn delete_rule(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        handle: u64,
    ) -> Result<(), Error> {
        check_name("table", table)?;
        check_name("chain", chain)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_RULE_TABLE, table)
            .str(NFTA_RULE_CHAIN, chain)
            .be64(NFTA_RULE_HANDLE, handle);
        self.push(
            NFT_MSG_DELRULE,
            0,
            family,
            a,
            format!("delete rule {family} {table} {chain} handle {handle}"),
        )
    }

    /// The next `NFTA_SET_ID` (unique within this batch).
    pub(crate) fn next_set_id(&mut self) -> u32 {
        self.set_ids += 1;
        self.set_ids
    }

    /// Creates a named set or map if it does not exist.
    pub fn add_set(&mut self, set: &Set) -> Result<(), Error> {
        check_name("table", &set.table)?;
        check_name("set", &set.name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_TABLE, &set.table)
            .str(NFTA_SET_NAME, &set.name);
        if set.data.is_some() {
            a.be32(NFTA_SET_FLAGS, NFT_SET_MAP);
        }
        a.be32(NFTA_SET_KEY_TYPE, set.key.type_id())
            .be32(NFTA_SET_KEY_LEN, set.key.byte_len());
        if let Some(data) = set.data {
            a.be32(NFTA_SET_DATA_TYPE, data.type_id())
                .be32(NFTA_SET_DATA_LEN, data.byte_len());
        }
        self.set_ids += 1;
        a.be32(NFTA_SET_ID, self.set_ids);
        self.push(
            NFT_MSG_NEWSET,
            NLM_F_CREATE,
            set.family,
            a,
            format!("add set {} {} {}", set.family, set.table, set.name),
        )
    }

    /// Deletes a named set; it must exist and no rule may use it.
    pub fn delete_set(&mut self, family: Family, table: &str, name: &str) -> Result<(), Error> {
        check_name("table", table)?;
        check_name("set", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_TABLE, table).str(NFTA_SET_NAME, name);
        self.push(
            NFT_MSG_DELSET,
            0,
            family,
            a,
            format!("delete set {family} {table} {name}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{priority, ChainType, Hook, Policy};

    #[test]
    fn table_message_golden_bytes() {
        let mut b = Batch::new();
        b.add_table(Family::Ip, "cni_hostport").unwrap();
        let e = &b.entries()[0];
        assert_eq!(e.msg.msg_type, 0x0a00);
        assert_eq!(e.msg.flags, NLM_F_CREATE);
        assert_eq!(e.msg.family, 2);
        let mut want = Vec::new();
        want.extend(17u16.to_ne_bytes());
        want.extend(1u16.to_ne_bytes());
        want.extend(b"cni_hostport\0\0\0\0");
        assert_eq!(e.msg.attrs, want);
        assert_eq!(e.what, "add table ip cni_hostport");
    }

    #[test]
    fn base_chain_carries_hook_priority_policy_and_type() {
        let mut b = Batch::new();
        let chain = Chain::base(
            Family::Inet,
            "t",
            "postrouting",
            ChainType::Nat,
            Hook::Postrouting,
            priority::SRCNAT,
        )
        .with_policy(Policy::Accept);
        b.add_chain(&chain).unwrap();
        let attrs = crate::attr::parse(&b.entries()[0].msg.attrs).unwrap();
        let tys: Vec<u16> = attrs.iter().map(|a| a.ty).collect();
        assert_eq!(
            tys,
            vec![
                NFTA_CHAIN_TABLE,
                NFTA_CHAIN_NAME,
                NFTA_CHAIN_HOOK,
                NFTA_CHAIN_POLICY,
                NFTA_CHAIN_TYPE
            ]
        );
        let hook = attrs[2].nested().unwrap();
        assert_eq!(hook[0].be32().unwrap(), 4);
        assert_eq!(hook[1].be32().unwrap(), 100);
        assert_eq!(attrs[4].str().unwrap(), "nat");

        let mut b = Batch::new();
        b.add_chain(&Chain::base(
            Family::Ip,
            "t",
            "pre",
            ChainType::Nat,
            Hook::Prerouting,
            priority::DSTNAT,
        ))
        .unwrap();
        let attrs = crate::attr::parse(&b.entries()[0].msg.attrs).unwrap();
        let hook = attrs[2].nested().unwrap();
        assert_eq!(hook[1].data, &(-100i32).to_be_bytes());
    }

    #[test]
    fn rule_flags_and_attributes() {
        let rule = Rule::builder(Family::Ip, "t", "c")
            .accept()
            .comment("cid")
            .build()
            .unwrap();
        let mut b = Batch::new();
        b.add_rule(&rule);
        b.insert_rule(&rule);
        b.delete_rule(Family::Ip, "t", "c", 9).unwrap();
        let e = b.entries();
        assert_eq!(e[0].msg.flags, NLM_F_CREATE | NLM_F_APPEND);
        assert_eq!(e[1].msg.flags, NLM_F_CREATE);
        assert_eq!(e[0].what, "add rule ip t c (comment \"cid\")");
        let attrs = crate::attr::parse(&e[0].msg.attrs).unwrap();
        let ud = crate::attr::find(&attrs, NFTA_RULE_USERDATA).unwrap();
        assert_eq!(ud.data, &[0, 4, b'c', b'i', b'd', 0]);
        let del = crate::attr::parse(&e[2].msg.attrs).unwrap();
        assert_eq!(
            crate::attr::find(&del, NFTA_RULE_HANDLE)
                .unwrap()
                .be64()
                .unwrap(),
            9
        );
        assert_eq!(e[2].msg.msg_type, 0x0a00 | u16::from(NFT_MSG_DELRULE));
    }
}
