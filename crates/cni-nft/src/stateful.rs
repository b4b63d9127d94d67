//! Stateful objects: named counters and rate limits ([`crate::ObjectKind`], [`crate::Limit`])
//! that live in a table and that any number of rules refer to by name (`counter name "x"`,
//! `limit name "y"`). A named object keeps its state while rules come and go, and a counter
//! can be read with one request ([`Nft::counter`]) instead of a listing of rules.

use crate::attr::{self, AttrWriter};
use crate::batch::Batch;
use crate::client::Nft;
use crate::expr::{Limit, ObjectKind};
use crate::message::NfMsg;
use crate::objects::{check_name, Family};
use crate::sys::*;
use crate::Error;

/// What a named counter has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterValue {
    pub packets: u64,
    pub bytes: u64,
}

impl Batch {
    /// Creates named counter `name` in `family table` if it does not exist.
    pub fn add_counter(&mut self, family: Family, table: &str, name: &str) -> Result<(), Error> {
        self.add_object(family, table, name, ObjectKind::Counter, |_| {})
    }

    /// Creates named rate limit `name` in `family table` if it does not exist (an existing
    /// one keeps its rate: delete it first to change it).
    pub fn add_limit(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        limit: Limit,
    ) -> Result<(), Error> {
        self.add_object(family, table, name, ObjectKind::Limit, |d| {
            limit.encode_data(d)
        })
    }

    fn add_object(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        kind: ObjectKind,
        data: impl FnOnce(&mut AttrWriter),
    ) -> Result<(), Error> {
        check_name("table", table)?;
        check_name(kind.name(), name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_OBJ_TABLE, table)
            .str(NFTA_OBJ_NAME, name)
            .be32(NFTA_OBJ_TYPE, kind.number())
            .nested(NFTA_OBJ_DATA, data);
        self.push(
            NFT_MSG_NEWOBJ,
            NLM_F_CREATE,
            family,
            a,
            format!("add {} {family} {table} {name}", kind.name()),
        )
    }

    /// Deletes named object `name` of `kind`; fails if it does not exist or a rule uses it.
    pub fn delete_object(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
        kind: ObjectKind,
    ) -> Result<(), Error> {
        check_name("table", table)?;
        check_name(kind.name(), name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_OBJ_TABLE, table)
            .str(NFTA_OBJ_NAME, name)
            .be32(NFTA_OBJ_TYPE, kind.number());
        self.push(
            NFT_MSG_DELOBJ,
            0,
            family,
            a,
            format!("delete {} {family} {table} {name}", kind.name()),
        )
    }
}

impl Nft {
    /// What named counter `name` of `family table` has counted; `None` when it (or its table)
    /// does not exist.
    pub fn counter(
        &mut self,
        family: Family,
        table: &str,
        name: &str,
    ) -> Result<Option<CounterValue>, Error> {
        check_name("table", table)?;
        check_name("counter", name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_OBJ_TABLE, table)
            .str(NFTA_OBJ_NAME, name)
            .be32(NFTA_OBJ_TYPE, ObjectKind::Counter.number());
        let what = format!("get counter {family} {table} {name}");
        let msg = NfMsg::nftables(NFT_MSG_GETOBJ, 0, family.number(), a.finish(&what)?);
        let items = match self.request(msg, &what) {
            Ok(items) => items,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(item) = items.first() else {
            return Ok(None);
        };
        decode_counter(&item.attrs).map(Some)
    }
}

/// The packets and bytes of a counter object's attributes.
fn decode_counter(attrs: &[u8]) -> Result<CounterValue, Error> {
    let attrs = attr::parse(attrs)?;
    let data = attr::find(&attrs, NFTA_OBJ_DATA)
        .ok_or_else(|| Error::Decode("counter object without data".into()))?
        .nested()?;
    let value = |ty: u16| -> Result<u64, Error> {
        attr::find(&data, ty)
            .map(|a| a.be64())
            .transpose()
            .map(Option::unwrap_or_default)
    };
    Ok(CounterValue {
        packets: value(NFTA_COUNTER_PACKETS)?,
        bytes: value(NFTA_COUNTER_BYTES)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message;

    #[test]
    fn a_limit_object_carries_its_rate_period_and_burst() {
        let mut b = Batch::new();
        b.add_limit(Family::Inet, "t", "l", Limit::per_second(100, 20))
            .unwrap();
        let msg = &b.entries()[0].msg;
        assert_eq!(msg.msg_type, (NFNL_SUBSYS_NFTABLES << 8) | 18);
        assert_eq!(b.entries()[0].what, "add limit inet t l");
        let attrs = attr::parse(&msg.attrs).unwrap();
        assert_eq!(
            attr::find(&attrs, NFTA_OBJ_TYPE).unwrap().be32().unwrap(),
            4
        );
        let data = attr::find(&attrs, NFTA_OBJ_DATA).unwrap().nested().unwrap();
        let values: Vec<(u16, Vec<u8>)> = data.iter().map(|a| (a.ty, a.data.to_vec())).collect();
        assert_eq!(
            values,
            [
                (NFTA_LIMIT_RATE, 100u64.to_be_bytes().to_vec()),
                (NFTA_LIMIT_UNIT, 1u64.to_be_bytes().to_vec()),
                (NFTA_LIMIT_BURST, 20u32.to_be_bytes().to_vec()),
                (NFTA_LIMIT_TYPE, 0u32.to_be_bytes().to_vec()),
            ]
        );
        assert!(b.add_counter(Family::Inet, "t", "").is_err());
    }

    #[test]
    fn a_counter_reply_decodes_and_a_missing_counter_is_none() {
        let mut obj = AttrWriter::new();
        obj.str(NFTA_OBJ_TABLE, "t")
            .str(NFTA_OBJ_NAME, "c")
            .be32(NFTA_OBJ_TYPE, 1)
            .nested(NFTA_OBJ_DATA, |d| {
                d.be64(NFTA_COUNTER_BYTES, 640)
                    .be64(NFTA_COUNTER_PACKETS, 10);
            });
        let body = obj.into_bytes();
        let fake = crate::fake::FakeTransport::with_responder(move |sent| {
            let seq = message::split(sent).unwrap()[0].seq;
            let mut reply = crate::fake::dump_part(seq, 0x0a13, 1, &body);
            reply.extend(crate::fake::ack(seq));
            vec![reply]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        assert_eq!(
            nft.counter(Family::Inet, "t", "c").unwrap(),
            Some(CounterValue {
                packets: 10,
                bytes: 640
            })
        );
        let missing = crate::fake::FakeTransport::with_responder(|sent| {
            let seq = message::split(sent).unwrap()[0].seq;
            vec![crate::fake::error(seq, libc::ENOENT, None)]
        });
        let mut nft = Nft::with_transport(Box::new(missing));
        assert_eq!(nft.counter(Family::Inet, "t", "c").unwrap(), None);
    }
}
