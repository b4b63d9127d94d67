//! Reading back what exists: tables, chains, and the rules of a chain as (handle, comment,
//! jump target),
//! plus "select by comment, delete by handle" in one batch.

use crate::attr::{self, AttrWriter};
use crate::batch::Batch;
use crate::client::{DumpItem, Nft};
use crate::expr::{CmpOp, MetaKey};
use crate::message::NfMsg;
use crate::objects::{check_name, Family};
use crate::sys::*;
use crate::Error;

/// A rule as listed: where it is, its handle, and its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    /// Table name.
    pub table: String,
    /// Chain name.
    pub chain: String,
    /// The kernel's handle, used to delete the rule or to position another one.
    pub handle: u64,
    /// The `nft` comment from the rule's userdata, if any.
    pub comment: Option<String>,
}

/// A chain as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    /// Chain name.
    pub name: String,
    /// The kernel's handle.
    pub handle: u64,
    /// True for a base chain (attached to a hook).
    pub is_base: bool,
}

/// Extracts the comment TLV from rule userdata, as `nft` writes it.
pub(crate) fn comment_from_userdata(mut ud: &[u8]) -> Option<String> {
    while ud.len() >= 2 {
        let (ty, len) = (ud[0], usize::from(ud[1]));
        let value = ud.get(2..2 + len)?;
        if ty == NFTNL_UDATA_RULE_COMMENT {
            let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
            return String::from_utf8(value[..end].to_vec()).ok();
        }
        ud = &ud[2 + len..];
    }
    None
}

/// The chain a rule's `jump`/`goto` verdict names: the `immediate` expression with a verdict
/// carrying a chain (iptables-nft's `-j <chain>` is encoded the same way).
fn jump_target(exprs: &[u8]) -> Result<Option<String>, Error> {
    for elem in attr::parse(exprs)? {
        let e = elem.nested()?;
        let is_immediate = attr::find(&e, NFTA_EXPR_NAME)
            .map(|a| a.str())
            .transpose()?
            == Some("immediate");
        let Some(data) = attr::find(&e, NFTA_EXPR_DATA).filter(|_| is_immediate) else {
            continue;
        };
        let verdict = attr::find(&data.nested()?, NFTA_IMMEDIATE_DATA)
            .map(|d| d.nested())
            .transpose()?
            .and_then(|d| attr::find(&d, NFTA_DATA_VERDICT));
        if let Some(v) = verdict {
            if let Some(chain) = attr::find(&v.nested()?, NFTA_VERDICT_CHAIN) {
                return Ok(Some(chain.str()?.to_string()));
            }
        }
    }
    Ok(None)
}

/// The interface name of the rule's `iifname <name>` match (a `meta iifname` load, then an
/// equality `cmp`), `None` without one.
fn iifname_match(exprs: &[u8]) -> Result<Option<String>, Error> {
    let mut loaded = false;
    for elem in attr::parse(exprs)? {
        let e = elem.nested()?;
        let name = attr::find(&e, NFTA_EXPR_NAME)
            .map(|a| a.str())
            .transpose()?;
        let Some(data) = attr::find(&e, NFTA_EXPR_DATA) else {
            continue;
        };
        let data = data.nested()?;
        let number = |ty: u16| attr::find(&data, ty).map(|a| a.be32()).transpose();
        match name {
            Some("meta") => loaded = number(NFTA_META_KEY)? == Some(MetaKey::IifName.number()),
            Some("cmp") if loaded && number(NFTA_CMP_OP)? == Some(CmpOp::Eq.number()) => {
                let value = attr::find(&data, NFTA_CMP_DATA)
                    .map(|d| d.nested())
                    .transpose()?
                    .and_then(|d| attr::find(&d, NFTA_DATA_VALUE).map(|v| v.data.to_vec()));
                if let Some(v) = value {
                    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
                    return Ok(Some(String::from_utf8_lossy(&v[..end]).into_owned()));
                }
                loaded = false;
            }
            _ => loaded = false,
        }
    }
    Ok(None)
}

/// What [`Nft::list_rules_with`] reads from a rule's expressions besides its [`RuleInfo`].
type Extract = fn(&[u8]) -> Result<Option<String>, Error>;

fn rule_info(item: &DumpItem, extract: Extract) -> Result<(RuleInfo, Option<String>), Error> {
    let attrs = attr::parse(&item.attrs)?;
    let text = |ty: u16| -> Result<String, Error> {
        attr::find(&attrs, ty)
            .map(|a| a.str().map(str::to_string))
            .transpose()?
            .ok_or_else(|| Error::Decode(format!("rule without attribute {ty}")))
    };
    let handle = attr::find(&attrs, NFTA_RULE_HANDLE)
        .ok_or_else(|| Error::Decode("rule without handle".into()))?
        .be64()?;
    let jump = match attr::find(&attrs, NFTA_RULE_EXPRESSIONS) {
        Some(a) => extract(a.data)?,
        None => None,
    };
    let info = RuleInfo {
        table: text(NFTA_RULE_TABLE)?,
        chain: text(NFTA_RULE_CHAIN)?,
        handle,
        comment: attr::find(&attrs, NFTA_RULE_USERDATA).and_then(|a| comment_from_userdata(a.data)),
    };
    Ok((info, jump))
}

impl Nft {
    /// True if table `family name` exists.
    pub fn table_exists(&mut self, family: Family, name: &str) -> Result<bool, Error> {
        check_name("table", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_TABLE_NAME, name);
        let what = format!("get table {family} {name}");
        let msg = NfMsg::nftables(NFT_MSG_GETTABLE, 0, family.number(), a.finish(&what)?);
        match self.request(msg, &what) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// True if the chain exists (false also when its table does not).
    pub fn chain_exists(&mut self, family: Family, table: &str, name: &str) -> Result<bool, Error> {
        check_name("table", table)?;
        check_name("chain", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, name);
        let what = format!("get chain {family} {table} {name}");
        let msg = NfMsg::nftables(NFT_MSG_GETCHAIN, 0, family.number(), a.finish(&what)?);
        match self.request(msg, &what) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The chains of a table (empty if the table does not exist).
    pub fn list_chains(&mut self, family: Family, table: &str) -> Result<Vec<ChainInfo>, Error> {
        check_name("table", table)?;
        let msg = NfMsg::nftables(NFT_MSG_GETCHAIN, 0, family.number(), Vec::new());
        let items = self.dump(&msg, &format!("list chains {family}"))?;
        let mut out = Vec::new();
        for item in items.iter().filter(|i| i.family == family.number()) {
            let attrs = attr::parse(&item.attrs)?;
            let in_table = attr::find(&attrs, NFTA_CHAIN_TABLE)
                .map(|a| a.str())
                .transpose()?
                == Some(table);
            if !in_table {
                continue;
            }
            let name = attr::find(&attrs, NFTA_CHAIN_NAME)
                .ok_or_else(|| Error::Decode("chain without name".into()))?
                .str()?
                .to_string();
            let handle = attr::find(&attrs, NFTA_CHAIN_HANDLE)
                .map(|a| a.be64())
                .transpose()?
                .unwrap_or(0);
            out.push(ChainInfo {
                name,
                handle,
                is_base: attr::find(&attrs, NFTA_CHAIN_HOOK).is_some(),
            });
        }
        Ok(out)
    }

    /// The rules of one chain in order, as (handle, comment). A missing table or chain
    /// lists as empty.
    pub fn list_rules(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<RuleInfo>, Error> {
        Ok(self
            .list_rule_jumps(family, table, chain)?
            .into_iter()
            .map(|(info, _)| info)
            .collect())
    }

    /// Like [`Nft::list_rules`], with the chain each rule jumps or goes to (`None` for rules
    /// without such a verdict): finds a jump whoever wrote it, with or without a comment.
    pub fn list_rule_jumps(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<(RuleInfo, Option<String>)>, Error> {
        self.list_rules_with(family, table, chain, jump_target)
    }

    /// Like [`Nft::list_rules`], with the interface name each rule's `iifname <name>` match
    /// compares with (`None` for rules without one).
    pub fn list_rule_iifnames(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<(RuleInfo, Option<String>)>, Error> {
        self.list_rules_with(family, table, chain, iifname_match)
    }

    fn list_rules_with(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
        extract: Extract,
    ) -> Result<Vec<(RuleInfo, Option<String>)>, Error> {
        check_name("table", table)?;
        check_name("chain", chain)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
        let what = format!("list rules {family} {table} {chain}");
        let msg = NfMsg::nftables(NFT_MSG_GETRULE, 0, family.number(), a.finish(&what)?);
        let items = match self.dump(&msg, &what) {
            Ok(items) => items,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for item in items.iter().filter(|i| i.family == family.number()) {
            let (info, jump) = rule_info(item, extract)?;
            // Older kernels ignore the chain filter of a dump; filter here as well.
            if info.table == table && info.chain == chain {
                out.push((info, jump));
            }
        }
        Ok(out)
    }

    /// Deletes, in one transaction, every rule of `chains` (in table `family table`) for which
    /// `select` is true, and returns how many were deleted. Missing chains are skipped. If a
    /// selected rule vanished between listing and deleting, the whole selection is retried once.
    pub fn delete_rules_where(
        &mut self,
        family: Family,
        table: &str,
        chains: &[&str],
        select: impl Fn(&RuleInfo) -> bool,
    ) -> Result<usize, Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut batch = Batch::new();
            for chain in chains {
                for rule in self.list_rules(family, table, chain)? {
                    if select(&rule) {
                        batch.delete_rule(family, table, chain, rule.handle)?;
                    }
                }
            }
            if batch.is_empty() {
                return Ok(0);
            }
            match self.commit(&batch) {
                Ok(()) => return Ok(batch.len()),
                Err(e) if e.is_not_found() && attempt < 2 => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes every rule of `chains` whose comment is exactly `comment`.
    pub fn delete_rules_with_comment(
        &mut self,
        family: Family,
        table: &str,
        chains: &[&str],
        comment: &str,
    ) -> Result<usize, Error> {
        self.delete_rules_where(family, table, chains, |r| {
            r.comment.as_deref() == Some(comment)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, FakeTransport};
    use crate::message;
    use crate::{Expr, Verdict};

    #[test]
    fn jump_target_is_found_after_other_expressions() {
        let encode = |exprs: &[Expr]| {
            let mut list = AttrWriter::new();
            for e in exprs {
                e.encode(&mut list);
            }
            list.into_bytes()
        };
        let jump = encode(&[
            crate::xt::conntrack_state(2),
            Expr::Counter,
            Expr::Verdict(Verdict::Jump("CNI-FORWARD".into())),
        ]);
        assert_eq!(jump_target(&jump).unwrap().as_deref(), Some("CNI-FORWARD"));
        let accept = encode(&[Expr::Counter, Expr::Verdict(Verdict::Accept)]);
        assert_eq!(jump_target(&accept).unwrap(), None);
    }

    #[test]
    fn the_iifname_of_a_match_is_read_back() {
        let exprs = |b: crate::RuleBuilder| {
            let rule = b.build().unwrap();
            let mut list = AttrWriter::new();
            for e in rule.exprs() {
                e.encode(&mut list);
            }
            list.into_bytes()
        };
        let b = || crate::Rule::builder(Family::Bridge, "nat", "PREROUTING");
        let with = exprs(b().iifname("veth1234").jump("c"));
        assert_eq!(iifname_match(&with).unwrap().as_deref(), Some("veth1234"));
        assert_eq!(
            iifname_match(&exprs(b().iifname_not("veth1").jump("c"))).unwrap(),
            None
        );
        assert_eq!(
            iifname_match(&exprs(b().oifname("veth1").jump("c"))).unwrap(),
            None
        );
    }

    fn rule_attrs(chain: &str, handle: u64, comment: Option<&str>) -> Vec<u8> {
        let mut a = AttrWriter::new();
        a.str(NFTA_RULE_TABLE, "t")
            .str(NFTA_RULE_CHAIN, chain)
            .be64(NFTA_RULE_HANDLE, handle);
        if let Some(c) = comment {
            let mut ud = vec![NFTNL_UDATA_RULE_COMMENT, (c.len() + 1) as u8];
            ud.extend_from_slice(c.as_bytes());
            ud.push(0);
            a.bytes(NFTA_RULE_USERDATA, &ud);
        }
        a.into_bytes()
    }

    #[test]
    fn userdata_comment_is_found_among_other_tlvs() {
        assert_eq!(
            comment_from_userdata(&[5, 1, 9, 0, 3, b'a', b'b', 0]),
            Some("ab".to_string())
        );
        assert_eq!(comment_from_userdata(&[0, 9, b'a']), None);
        assert_eq!(comment_from_userdata(&[]), None);
    }

    #[test]
    fn select_by_comment_then_delete_by_handle_in_one_batch() {
        let rule_type = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(NFT_MSG_NEWRULE);
        let get_type = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(NFT_MSG_GETRULE);
        let fake = FakeTransport::with_responder(move |sent| {
            let msgs = message::split(sent).unwrap();
            let first = msgs[0];
            if first.msg_type == get_type {
                let mut out = vec![];
                let mut d =
                    fake::dump_part(first.seq, rule_type, 2, &rule_attrs("c", 4, Some("cid")));
                d.extend(fake::dump_part(
                    first.seq,
                    rule_type,
                    2,
                    &rule_attrs("c", 5, Some("other")),
                ));
                d.extend(fake::dump_part(
                    first.seq,
                    rule_type,
                    2,
                    &rule_attrs("c", 6, Some("cid")),
                ));
                d.extend(fake::done(first.seq));
                out.push(d);
                return out;
            }
            msgs.iter()
                .filter(|m| m.flags & NLM_F_ACK != 0)
                .map(|m| fake::ack(m.seq))
                .collect()
        });
        let mut nft = Nft::with_transport(Box::new(fake.clone()));
        let n = nft
            .delete_rules_with_comment(Family::Ip, "t", &["c"], "cid")
            .unwrap();
        assert_eq!(n, 2);
        let sent = fake.sent();
        assert_eq!(sent.len(), 2);
        let batch = message::split(&sent[1]).unwrap();
        // begin, two deletes, end
        assert_eq!(batch.len(), 4);
        let handles: Vec<u64> = batch[1..3]
            .iter()
            .map(|m| {
                let attrs = crate::message::attrs(m).unwrap();
                attr::find(&attrs, NFTA_RULE_HANDLE)
                    .unwrap()
                    .be64()
                    .unwrap()
            })
            .collect();
        assert_eq!(handles, vec![4, 6]);
    }

    #[test]
    fn missing_table_is_false() {
        let fake = FakeTransport::with_responder(|sent| {
            let m = message::split(sent).unwrap()[0];
            vec![fake::error(m.seq, 2, None)]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        assert!(!nft.table_exists(Family::Ip, "nope").unwrap());
        assert!(!nft.chain_exists(Family::Ip, "nope", "c").unwrap());
    }
}
