//! Sets and maps whose keys (and values) concatenate several fields, `nft`'s
//! `type ipv4_addr . inet_service : ipv4_addr . inet_service`, optionally with interval keys
//! (`flags interval`, the kernel's `pipapo` backend), and their elements with comments.
//!
//! Each field of a concatenation occupies a whole number of 4-byte registers (a port takes 4
//! bytes, zero padded), so a key built with [`concat`] is exactly what a rule loads into
//! consecutive [`crate::Reg::R32`] registers before a lookup.
//!
//! Elements are the unit of per-owner state here: adding one with `exclusive` fails with
//! EEXIST when the key exists, so one key has one owner, and deleting by key touches nothing
//! else. A lookup in a plain (non-verdict) map never makes the kernel re-validate the table's
//! rules, which adding a rule with a jump, NAT, or mark expression does (at a cost that grows
//! with the table).

use crate::attr::{self, AttrWriter};
use crate::batch::Batch;
use crate::client::Nft;
use crate::elements::ElementTarget;
use crate::message::NfMsg;
use crate::objects::{check_name, Family, SetType};
use crate::rule::fit_comment;
use crate::sys::*;
use crate::Error;

/// Bytes one field takes in a concatenated key or value.
pub fn field_len(t: SetType) -> u32 {
    t.byte_len().div_ceil(4) * 4
}

/// Concatenates field values, zero-padding each to a multiple of 4 bytes.
pub fn concat(fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        out.extend_from_slice(f);
        out.resize(out.len().div_ceil(4) * 4, 0);
    }
    out
}

/// `nft`'s datatype number of a concatenation: each field's id shifted in, 6 bits each.
fn concat_type_id(fields: &[SetType]) -> u32 {
    fields.iter().fold(0, |id, t| (id << 6) | t.type_id())
}

fn total_len(fields: &[SetType]) -> u32 {
    fields.iter().map(|t| field_len(*t)).sum()
}

/// A named set or map with concatenated key (and value) fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcatSet {
    /// Family of its table.
    pub family: Family,
    /// Table name.
    pub table: String,
    /// Set name.
    pub name: String,
    /// Key fields, in order.
    pub key: Vec<SetType>,
    /// Value fields for a map.
    pub data: Option<Vec<SetType>>,
    /// Interval keys: each element is a range from `key` to `key_end`, per field.
    pub interval: bool,
}

impl ConcatSet {
    /// A set of concatenated keys.
    pub fn set(family: Family, table: &str, name: &str, key: &[SetType]) -> Self {
        ConcatSet {
            family,
            table: table.to_string(),
            name: name.to_string(),
            key: key.to_vec(),
            data: None,
            interval: false,
        }
    }

    /// A map from concatenated keys to concatenated values.
    pub fn map(family: Family, table: &str, name: &str, key: &[SetType], data: &[SetType]) -> Self {
        ConcatSet {
            data: Some(data.to_vec()),
            ..Self::set(family, table, name, key)
        }
    }

    /// Makes the keys ranges (`flags interval`).
    pub fn with_intervals(mut self) -> Self {
        self.interval = true;
        self
    }

    /// Key length in bytes.
    pub fn key_len(&self) -> usize {
        total_len(&self.key) as usize
    }

    /// Value length in bytes (0 for a set).
    pub fn data_len(&self) -> usize {
        self.data.as_deref().map_or(0, total_len) as usize
    }

    fn describe(&self) -> String {
        format!("{} {} {}", self.family, self.table, self.name)
    }
}

/// One element: a key (a range with `key_end` in an interval set), a value for a map, and
/// an optional comment (`nft` shows it; owners put their tag there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcatElement {
    /// The key, as built by [`concat`].
    pub key: Vec<u8>,
    /// The range end, for interval sets.
    pub key_end: Option<Vec<u8>>,
    /// The value, for maps.
    pub data: Option<Vec<u8>>,
    /// The comment.
    pub comment: Option<String>,
}

impl ConcatElement {
    /// An element with just a key.
    pub fn new(key: Vec<u8>) -> Self {
        ConcatElement {
            key,
            key_end: None,
            data: None,
            comment: None,
        }
    }

    /// Sets the range end.
    pub fn range_to(mut self, key_end: Vec<u8>) -> Self {
        self.key_end = Some(key_end);
        self
    }

    /// Sets the map value.
    pub fn value(mut self, data: Vec<u8>) -> Self {
        self.data = Some(data);
        self
    }

    /// Sets the comment (cut to what `nft` accepts).
    pub fn comment(mut self, text: &str) -> Self {
        self.comment = Some(fit_comment(text));
        self
    }

    fn check(&self, set: &ConcatSet, with_data: bool) -> Result<(), Error> {
        let key_ok = self.key.len() == set.key_len()
            && self
                .key_end
                .as_ref()
                .is_none_or(|k| k.len() == set.key_len())
            && (self.key_end.is_some() == set.interval);
        let data_ok = match (&set.data, &self.data) {
            (_, None) if !with_data => true,
            (Some(_), Some(d)) => d.len() == set.data_len(),
            (None, None) => true,
            _ => false,
        };
        if key_ok && data_ok {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "element {self:?} does not fit set {}",
                set.describe()
            )))
        }
    }

    fn encode(&self, list: &mut AttrWriter, with_data: bool) {
        list.nested(NFTA_LIST_ELEM, |e| {
            e.nested(NFTA_SET_ELEM_KEY, |k| {
                k.bytes(NFTA_DATA_VALUE, &self.key);
            });
            if let Some(end) = &self.key_end {
                e.nested(NFTA_SET_ELEM_KEY_END, |k| {
                    k.bytes(NFTA_DATA_VALUE, end);
                });
            }
            if !with_data {
                return;
            }
            if let Some(d) = &self.data {
                e.nested(NFTA_SET_ELEM_DATA, |v| {
                    v.bytes(NFTA_DATA_VALUE, d);
                });
            }
            if let Some(c) = &self.comment {
                let mut ud = vec![NFTNL_UDATA_SET_ELEM_COMMENT, (c.len() + 1) as u8];
                ud.extend_from_slice(c.as_bytes());
                ud.push(0);
                e.bytes(NFTA_SET_ELEM_USERDATA, &ud);
            }
        });
    }

    fn decode(attrs: &[attr::Attr<'_>]) -> Result<Self, Error> {
        let value = |ty: u16| -> Result<Option<Vec<u8>>, Error> {
            let Some(a) = attr::find(attrs, ty) else {
                return Ok(None);
            };
            Ok(attr::find(&a.nested()?, NFTA_DATA_VALUE).map(|v| v.data.to_vec()))
        };
        Ok(ConcatElement {
            key: value(NFTA_SET_ELEM_KEY)?
                .ok_or_else(|| Error::Decode("set element without key".into()))?,
            key_end: value(NFTA_SET_ELEM_KEY_END)?,
            data: value(NFTA_SET_ELEM_DATA)?,
            comment: attr::find(attrs, NFTA_SET_ELEM_USERDATA)
                .and_then(|a| crate::list::comment_from_userdata(a.data)),
        })
    }
}

impl Batch {
    /// Creates a concatenated set or map if it does not exist.
    pub fn add_concat_set(&mut self, set: &ConcatSet) -> Result<(), Error> {
        check_name("table", &set.table)?;
        check_name("set", &set.name)?;
        let mut flags = 0;
        if set.data.is_some() {
            flags |= NFT_SET_MAP;
        }
        if set.interval {
            flags |= NFT_SET_INTERVAL | NFT_SET_CONCAT;
        }
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_TABLE, &set.table)
            .str(NFTA_SET_NAME, &set.name)
            .be32(NFTA_SET_FLAGS, flags)
            .be32(NFTA_SET_KEY_TYPE, concat_type_id(&set.key))
            .be32(NFTA_SET_KEY_LEN, total_len(&set.key));
        if let Some(data) = &set.data {
            a.be32(NFTA_SET_DATA_TYPE, concat_type_id(data))
                .be32(NFTA_SET_DATA_LEN, total_len(data));
        }
        a.be32(NFTA_SET_ID, self.next_set_id());
        if set.interval {
            // pipapo needs each field's length to split the key.
            a.nested(NFTA_SET_DESC, |d| {
                d.nested(NFTA_SET_DESC_CONCAT, |c| {
                    for t in &set.key {
                        c.nested(NFTA_LIST_ELEM, |f| {
                            f.be32(NFTA_SET_FIELD_LEN, t.byte_len());
                        });
                    }
                });
            });
        }
        let what = format!("add set {}", set.describe());
        self.push(NFT_MSG_NEWSET, NLM_F_CREATE, set.family, a, what)
    }

    fn concat_elements(
        &mut self,
        set: &ConcatSet,
        elements: &[ConcatElement],
        kind: u8,
        flags: u16,
    ) -> Result<(), Error> {
        let with_data = kind == NFT_MSG_NEWSETELEM;
        for el in elements {
            el.check(set, with_data)?;
        }
        let target = ElementTarget {
            family: set.family,
            table: &set.table,
            set: &set.name,
            noun: "set",
            kind,
            flags,
        };
        self.push_element_lists(&target, elements.len(), |i, list| {
            elements[i].encode(list, with_data)
        })
    }

    /// Adds elements. With `exclusive`, an existing key fails the batch with EEXIST;
    /// without, an identical element is kept and a different value fails with EBUSY.
    pub fn add_concat_elements(
        &mut self,
        set: &ConcatSet,
        elements: &[ConcatElement],
        exclusive: bool,
    ) -> Result<(), Error> {
        let flags = if exclusive {
            NLM_F_CREATE | NLM_F_EXCL
        } else {
            NLM_F_CREATE
        };
        self.concat_elements(set, elements, NFT_MSG_NEWSETELEM, flags)
    }

    /// Deletes elements by key (and range end); each must exist.
    pub fn delete_concat_elements(
        &mut self,
        set: &ConcatSet,
        elements: &[ConcatElement],
    ) -> Result<(), Error> {
        self.concat_elements(set, elements, NFT_MSG_DELSETELEM, 0)
    }
}

impl Nft {
    /// The element with `key` (and `key_end` for an interval set), with its value and
    /// comment; `None` if it, its set, or its table does not exist. One request, whatever
    /// the set's size.
    pub fn get_concat_element(
        &mut self,
        set: &ConcatSet,
        key: &[u8],
        key_end: Option<&[u8]>,
    ) -> Result<Option<ConcatElement>, Error> {
        let mut probe = ConcatElement::new(key.to_vec());
        probe.key_end = key_end.map(<[u8]>::to_vec);
        probe.check(set, false)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_ELEM_LIST_TABLE, &set.table)
            .str(NFTA_SET_ELEM_LIST_SET, &set.name)
            .nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
                probe.encode(list, false)
            });
        let what = format!("get element of set {}", set.describe());
        let msg = NfMsg::nftables(NFT_MSG_GETSETELEM, 0, set.family.number(), a.finish(&what)?);
        let items = match self.request(msg, &what) {
            Ok(items) => items,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(decode_items(&items)?.into_iter().next())
    }

    /// The elements with `keys` (a set without intervals), in order, up to the first key
    /// that is missing; empty when the set or its table does not exist. One request per
    /// [`KEYS_PER_REQUEST`] keys, each answered by the kernel with one lookup per key, so
    /// the cost follows `keys`, not the set's size.
    pub fn get_concat_elements(
        &mut self,
        set: &ConcatSet,
        keys: &[Vec<u8>],
    ) -> Result<Vec<ConcatElement>, Error> {
        let mut out = Vec::new();
        for chunk in keys.chunks(KEYS_PER_REQUEST) {
            let probes: Vec<ConcatElement> = chunk
                .iter()
                .map(|k| ConcatElement::new(k.clone()))
                .collect();
            for p in &probes {
                p.check(set, false)?;
            }
            let mut a = AttrWriter::new();
            a.str(NFTA_SET_ELEM_LIST_TABLE, &set.table)
                .str(NFTA_SET_ELEM_LIST_SET, &set.name)
                .nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
                    for p in &probes {
                        p.encode(list, false);
                    }
                });
            let what = format!("get {} element(s) of set {}", chunk.len(), set.describe());
            let bytes = a.finish(&what)?;
            // Every found key is one reply message, queued before the request returns.
            self.reserve(bytes.len(), chunk.len() + 1)?;
            let msg = NfMsg::nftables(NFT_MSG_GETSETELEM, 0, set.family.number(), bytes);
            let (items, error) = self.request_partial(msg, &what)?;
            let found = decode_items(&items)?;
            let complete = found.len() == chunk.len();
            out.extend(found);
            match error {
                None if complete => {}
                None => break,
                Some(e) if e.is_not_found() => break,
                Some(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Every element of `set` (a dump; empty when the set or its table does not exist).
    pub fn list_concat_elements(&mut self, set: &ConcatSet) -> Result<Vec<ConcatElement>, Error> {
        check_name("table", &set.table)?;
        check_name("set", &set.name)?;
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_ELEM_LIST_TABLE, &set.table)
            .str(NFTA_SET_ELEM_LIST_SET, &set.name);
        let what = format!("list elements of set {}", set.describe());
        let msg = NfMsg::nftables(NFT_MSG_GETSETELEM, 0, set.family.number(), a.finish(&what)?);
        match self.dump(&msg, &what) {
            Ok(items) => decode_items(&items),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// Keys per GETSETELEM request of [`Nft::get_concat_elements`] (the request stays small, and
/// the replies fit a socket buffer of as many kilobytes).
const KEYS_PER_REQUEST: usize = 256;

/// The elements in reply messages, in order.
fn decode_items(items: &[crate::client::DumpItem]) -> Result<Vec<ConcatElement>, Error> {
    let mut out = Vec::new();
    for item in items {
        let attrs = attr::parse(&item.attrs)?;
        let Some(list) = attr::find(&attrs, NFTA_SET_ELEM_LIST_ELEMENTS) else {
            continue;
        };
        for el in list.nested()? {
            out.push(ConcatElement::decode(&el.nested()?)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, FakeTransport};
    use crate::message;

    fn ipv4_port_map() -> ConcatSet {
        ConcatSet::map(
            Family::Ip,
            "t3",
            "m",
            &[SetType::InetProto, SetType::InetService],
            &[SetType::Ipv4Addr, SetType::InetService],
        )
    }

    /// Attribute bytes as `nft -f` sends them for
    /// `add map ip t3 m { type inet_proto . inet_service : ipv4_addr . inet_service; }`
    /// (captured with `nft --debug=mnl`, without nft's display-only userdata).
    #[test]
    fn concat_map_matches_nft() {
        let mut b = Batch::new();
        b.add_concat_set(&ipv4_port_map()).unwrap();
        let e = &b.entries()[0];
        assert_eq!(e.msg.msg_type, 0x0a09);
        assert_eq!(e.msg.flags, NLM_F_CREATE);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[7, 0, 1, 0][..], b"t3\0\0",
            &[6, 0, 2, 0], b"m\0\0\0",
            &[8, 0, 3, 0, 0, 0, 0, 0x08],
            &[8, 0, 4, 0, 0, 0, 0x03, 0x0d],
            &[8, 0, 5, 0, 0, 0, 0, 8],
            &[8, 0, 6, 0, 0, 0, 0x01, 0xcd],
            &[8, 0, 7, 0, 0, 0, 0, 8],
            &[8, 0, 10, 0, 0, 0, 0, 1],
        ]
        .concat();
        assert_eq!(e.msg.attrs, want);
        assert_eq!(e.what, "add set ip t3 m");
    }

    /// `add set ip t3 h { type ipv4_addr . ipv4_addr; flags interval; }` as `nft` sends it.
    #[test]
    fn interval_concat_set_matches_nft() {
        let set = ConcatSet::set(
            Family::Ip,
            "t3",
            "h",
            &[SetType::Ipv4Addr, SetType::Ipv4Addr],
        )
        .with_intervals();
        let mut b = Batch::new();
        b.add_concat_set(&set).unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[7, 0, 1, 0][..], b"t3\0\0",
            &[6, 0, 2, 0], b"h\0\0\0",
            &[8, 0, 3, 0, 0, 0, 0, 0x84],
            &[8, 0, 4, 0, 0, 0, 0x01, 0xc7],
            &[8, 0, 5, 0, 0, 0, 0, 8],
            &[8, 0, 10, 0, 0, 0, 0, 1],
            // desc { concat { elem { field_len 4 } elem { field_len 4 } } }, nested flag set
            &[32, 0, 9, 0x80, 28, 0, 2, 0x80],
            &[12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 4],
            &[12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 4],
        ]
        .concat();
        assert_eq!(b.entries()[0].msg.attrs, want);
    }

    /// `tcp . 8080 comment "abc" : 198.18.128.5 . 80`, whose key and value `nft --debug=netlink`
    /// prints as `00000006 0000901f : 0500000a 00005000` (host-order words).
    #[test]
    fn element_with_value_and_comment() {
        let el = ConcatElement::new(concat(&[&[6], &8080u16.to_be_bytes()]))
            .value(concat(&[&[198, 18, 128, 5], &80u16.to_be_bytes()]))
            .comment("abc");
        assert_eq!(el.key, [6, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        assert_eq!(
            el.data.as_deref(),
            Some(&[198, 18, 128, 5, 0, 0x50, 0, 0][..])
        );
        let mut b = Batch::new();
        b.add_concat_elements(&ipv4_port_map(), std::slice::from_ref(&el), true)
            .unwrap();
        let e = &b.entries()[0];
        assert_eq!(e.msg.flags, NLM_F_CREATE | NLM_F_EXCL);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[7, 0, 1, 0][..], b"t3\0\0",
            &[6, 0, 2, 0], b"m\0\0\0",
            &[52, 0, 3, 0x80],
            &[48, 0, 1, 0x80],
            &[16, 0, 1, 0x80, 12, 0, 1, 0, 6, 0, 0, 0, 0x1f, 0x90, 0, 0],
            &[16, 0, 2, 0x80, 12, 0, 1, 0, 198, 18, 128, 5, 0, 0x50, 0, 0],
            &[10, 0, 6, 0, 0, 4, b'a', b'b', b'c', 0, 0, 0],
        ]
        .concat();
        assert_eq!(e.msg.attrs, want);
        // Deleting sends the key only.
        let mut b = Batch::new();
        b.delete_concat_elements(&ipv4_port_map(), &[el]).unwrap();
        let attrs = attr::parse(&b.entries()[0].msg.attrs).unwrap();
        let list = attrs[2].nested().unwrap();
        let elem = list[0].nested().unwrap();
        assert_eq!(elem.len(), 1);
        assert_eq!(elem[0].ty, NFTA_SET_ELEM_KEY);
    }

    #[test]
    fn interval_elements_need_a_range_end_and_sizes_are_checked() {
        let set = ConcatSet::set(
            Family::Ip,
            "t",
            "h",
            &[SetType::Ipv4Addr, SetType::Ipv4Addr],
        )
        .with_intervals();
        let mut b = Batch::new();
        let key = concat(&[&[198, 18, 128, 0], &[198, 18, 128, 5]]);
        assert!(b
            .add_concat_elements(&set, &[ConcatElement::new(key.clone())], false)
            .is_err());
        let end = concat(&[&[198, 18, 143, 255], &[198, 18, 128, 5]]);
        b.add_concat_elements(&set, &[ConcatElement::new(key).range_to(end)], false)
            .unwrap();
        let attrs = attr::parse(&b.entries()[0].msg.attrs).unwrap();
        let elem = attrs[2].nested().unwrap()[0].nested().unwrap();
        assert_eq!(elem[1].ty, NFTA_SET_ELEM_KEY_END);
        assert!(b
            .add_concat_elements(&ipv4_port_map(), &[ConcatElement::new(vec![1; 4])], false)
            .is_err());
    }

    #[test]
    fn long_element_lists_are_split_into_messages() {
        let els: Vec<ConcatElement> = (0..5000u16)
            .map(|p| {
                ConcatElement::new(concat(&[&[6], &p.to_be_bytes()]))
                    .value(concat(&[&[198, 18, 128, 5], &80u16.to_be_bytes()]))
                    .comment(&"x".repeat(100))
            })
            .collect();
        let mut b = Batch::new();
        b.add_concat_elements(&ipv4_port_map(), &els, true).unwrap();
        assert!(b.len() > 1);
        let mut total = 0;
        for e in b.entries() {
            let attrs = attr::parse(&e.msg.attrs).unwrap();
            assert!(4 + attrs[2].data.len() <= 65_535, "{}", attrs[2].data.len());
            total += attrs[2].nested().unwrap().len();
        }
        assert_eq!(total, 5000);
    }

    #[test]
    fn get_element_decodes_the_reply_and_missing_is_none() {
        let reply_type = (NFNL_SUBSYS_NFTABLES << 8) | u16::from(NFT_MSG_NEWSETELEM);
        let fake = FakeTransport::with_responder(move |sent| {
            let m = message::split(sent).unwrap()[0];
            let mut a = AttrWriter::new();
            a.str(NFTA_SET_ELEM_LIST_TABLE, "t3")
                .str(NFTA_SET_ELEM_LIST_SET, "m")
                .nested(NFTA_SET_ELEM_LIST_ELEMENTS, |l| {
                    ConcatElement::new(vec![6, 0, 0, 0, 0x1f, 0x90, 0, 0])
                        .value(vec![198, 18, 128, 5, 0, 0x50, 0, 0])
                        .comment("owner")
                        .encode(l, true)
                });
            let mut d = fake::dump_part(m.seq, reply_type, 2, &a.into_bytes());
            d.extend(fake::ack(m.seq));
            vec![d]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        let got = nft
            .get_concat_element(&ipv4_port_map(), &[6, 0, 0, 0, 0x1f, 0x90, 0, 0], None)
            .unwrap()
            .unwrap();
        assert_eq!(got.comment.as_deref(), Some("owner"));
        assert_eq!(got.data.unwrap()[..4], [198, 18, 128, 5]);

        let fake = FakeTransport::with_responder(|sent| {
            let m = message::split(sent).unwrap()[0];
            vec![fake::error(m.seq, 2, None)]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        assert!(nft
            .get_concat_element(&ipv4_port_map(), &[0; 8], None)
            .unwrap()
            .is_none());
    }
}
