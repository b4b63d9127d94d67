//! Verdict maps (`nft`'s `type ipv4_addr : verdict`, used as `ip saddr vmap @m`): one lookup
//! picks the chain a packet jumps to, so a ruleset dispatching per address costs one hash
//! lookup however many addresses it holds.
//!
//! The kernel validates the chains a verdict map's elements jump to when they are added
//! (they must exist in the same table and not form a loop).

use std::net::IpAddr;

use crate::attr::{self, AttrWriter};
use crate::batch::Batch;
use crate::client::Nft;
use crate::elements::ElementTarget;
use crate::expr::{Expr, PayloadBase, Reg, Verdict};
use crate::message::NfMsg;
use crate::objects::{check_name, Family, SetType};
use crate::rule::RuleBuilder;
use crate::sys::*;
use crate::Error;

/// `nft`'s data type of verdicts (`NFT_DATA_VERDICT`).
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;

/// A named map from addresses (IPv4 or IPv6) to verdicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictMap {
    /// Family of its table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Map name.
    pub name: String,
    /// [`SetType::Ipv4Addr`] or [`SetType::Ipv6Addr`].
    pub key: SetType,
}

impl VerdictMap {
    /// A map from `key` addresses to verdicts.
    pub fn new(family: Family, table: &str, name: &str, key: SetType) -> Self {
        VerdictMap {
            family,
            table: table.to_string(),
            name: name.to_string(),
            key,
        }
    }

    fn describe(&self) -> String {
        format!("{} {} {}", self.family, self.table, self.name)
    }

    fn key_bytes(&self, addr: IpAddr) -> Result<Vec<u8>, Error> {
        match (self.key, addr) {
            (SetType::Ipv4Addr, IpAddr::V4(a)) => Ok(a.octets().to_vec()),
            (SetType::Ipv6Addr, IpAddr::V6(a)) => Ok(a.octets().to_vec()),
            _ => Err(Error::Invalid(format!(
                "{addr} is not a key of verdict map {}",
                self.describe()
            ))),
        }
    }
}

impl Batch {
    /// Creates the verdict map if it does not exist.
    pub fn add_verdict_map(&mut self, map: &VerdictMap) -> Result<(), Error> {
        check_name("table", &map.table)?;
        check_name("set", &map.name)?;
        if !matches!(map.key, SetType::Ipv4Addr | SetType::Ipv6Addr) {
            return Err(Error::Invalid(format!(
                "verdict map {} needs address keys, not {:?}",
                map.describe(),
                map.key
            )));
        }
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_TABLE, &map.table)
            .str(NFTA_SET_NAME, &map.name)
            .be32(NFTA_SET_FLAGS, NFT_SET_MAP)
            .be32(NFTA_SET_KEY_TYPE, map.key.type_id())
            .be32(NFTA_SET_KEY_LEN, map.key.byte_len())
            .be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT)
            .be32(NFTA_SET_ID, self.next_set_id());
        let what = format!("add map {}", map.describe());
        self.push(NFT_MSG_NEWSET, NLM_F_CREATE, map.family, a, what)
    }

    /// Maps each address to its verdict (an existing key with another verdict fails with
    /// EBUSY: delete it first, in the same batch).
    pub fn add_verdict_elements(
        &mut self,
        map: &VerdictMap,
        elements: &[(IpAddr, Verdict)],
    ) -> Result<(), Error> {
        let mut list = Vec::with_capacity(elements.len());
        for (addr, verdict) in elements {
            list.push((map.key_bytes(*addr)?, Some(verdict)));
        }
        self.verdict_elements(map, &list, NFT_MSG_NEWSETELEM, NLM_F_CREATE)
    }

    /// Removes the addresses from the map; each must be in it.
    pub fn delete_verdict_elements(
        &mut self,
        map: &VerdictMap,
        addrs: &[IpAddr],
    ) -> Result<(), Error> {
        let mut list = Vec::with_capacity(addrs.len());
        for addr in addrs {
            list.push((map.key_bytes(*addr)?, None));
        }
        self.verdict_elements(map, &list, NFT_MSG_DELSETELEM, 0)
    }

    fn verdict_elements(
        &mut self,
        map: &VerdictMap,
        elements: &[(Vec<u8>, Option<&Verdict>)],
        kind: u8,
        flags: u16,
    ) -> Result<(), Error> {
        let target = ElementTarget {
            family: map.family,
            table: &map.table,
            set: &map.name,
            noun: "map",
            kind,
            flags,
        };
        self.push_element_lists(&target, elements.len(), |i, list| {
            let (key, verdict) = &elements[i];
            list.nested(NFTA_LIST_ELEM, |e| {
                e.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.bytes(NFTA_DATA_VALUE, key);
                });
                if let Some(v) = verdict {
                    e.nested(NFTA_SET_ELEM_DATA, |d| {
                        d.nested(NFTA_DATA_VERDICT, |vd| v.encode_attrs(vd));
                    });
                }
            });
        })
    }
}

impl Nft {
    /// Every element of `map` with its verdict (a dump; empty when the map or its table does
    /// not exist).
    pub fn list_verdict_elements(
        &mut self,
        map: &VerdictMap,
    ) -> Result<Vec<(IpAddr, Verdict)>, Error> {
        check_name("table", &map.table)?;
        check_name("set", &map.name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_ELEM_LIST_TABLE, &map.table)
            .str(NFTA_SET_ELEM_LIST_SET, &map.name);
        let what = format!("list elements of map {}", map.describe());
        let msg = NfMsg::nftables(NFT_MSG_GETSETELEM, 0, map.family.number(), a.finish(&what)?);
        let items = match self.dump(&msg, &what) {
            Ok(items) => items,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for item in &items {
            let attrs = attr::parse(&item.attrs)?;
            let Some(list) = attr::find(&attrs, NFTA_SET_ELEM_LIST_ELEMENTS) else {
                continue;
            };
            for el in list.nested()? {
                out.push(decode_verdict_element(&el.nested()?)?);
            }
        }
        Ok(out)
    }
}

/// One element of a verdict map: its address key and its verdict.
fn decode_verdict_element(attrs: &[attr::Attr<'_>]) -> Result<(IpAddr, Verdict), Error> {
    let missing = |what: &str| Error::Decode(format!("verdict map element without {what}"));
    let key = attr::find(attrs, NFTA_SET_ELEM_KEY).ok_or_else(|| missing("key"))?;
    let key = attr::find(&key.nested()?, NFTA_DATA_VALUE).ok_or_else(|| missing("key"))?;
    let addr = match key.data.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(key.data).unwrap_or_default()),
        16 => IpAddr::from(<[u8; 16]>::try_from(key.data).unwrap_or_default()),
        n => return Err(Error::Decode(format!("verdict map key of {n} bytes"))),
    };
    let data = attr::find(attrs, NFTA_SET_ELEM_DATA).ok_or_else(|| missing("verdict"))?;
    let verdict =
        attr::find(&data.nested()?, NFTA_DATA_VERDICT).ok_or_else(|| missing("verdict"))?;
    let verdict = verdict.nested()?;
    let code = attr::find(&verdict, NFTA_VERDICT_CODE)
        .ok_or_else(|| missing("verdict code"))?
        .be32()? as i32;
    let chain = attr::find(&verdict, NFTA_VERDICT_CHAIN)
        .map(|c| c.str().map(str::to_string))
        .transpose()?;
    Ok((addr, Verdict::decode(code, chain)?))
}

impl RuleBuilder {
    /// `ip[6] saddr vmap @<map>`: jumps (or whatever the element says) by source address;
    /// an address not in the map continues with the next rule.
    pub fn saddr_vmap(self, map: &VerdictMap) -> Self {
        self.addr_vmap(map, true)
    }

    /// `ip[6] daddr vmap @<map>`.
    pub fn daddr_vmap(self, map: &VerdictMap) -> Self {
        self.addr_vmap(map, false)
    }

    fn addr_vmap(self, map: &VerdictMap, source: bool) -> Self {
        let (offset, len) = match (map.key, source) {
            (SetType::Ipv4Addr, true) => (12, 4),
            (SetType::Ipv4Addr, false) => (16, 4),
            (SetType::Ipv6Addr, true) => (8, 16),
            _ => (24, 16),
        };
        let any: IpAddr = if map.key == SetType::Ipv4Addr {
            [0u8; 4].into()
        } else {
            [0u8; 16].into()
        };
        self.address_family(any)
            .expr(Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Network,
                offset,
                len,
            })
            .expr(Expr::Lookup {
                sreg: Reg::R1,
                set: map.name.clone(),
                dreg: Some(Reg::Verdict),
                invert: false,
            })
    }
}
