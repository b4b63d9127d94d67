//! Element messages (NEWSETELEM/DELSETELEM) of any size, and the elements of plain sets and
//! maps ([`Batch::add_elements`], [`Batch::delete_elements`]).
//!
//! A message carries its elements in one nested attribute, `NFTA_SET_ELEM_LIST_ELEMENTS`,
//! whose length field is 16 bits: at most 65,535 bytes, about 4,000 IPv4 or 2,300 IPv6 keys.
//! A longer list is split across as many messages as it needs, all in the same batch and so
//! in the same transaction — the way libnftnl fills a message until the next element would
//! overflow the list attribute (`nftnl_set_elems_nlmsg_build_payload_iter` in
//! `src/set_elem.c`) and nftables continues in a new message of the same batch
//! (`mnl_nft_setelem_batch` in `src/mnl.c`). Sets, verdict maps and concatenated sets all
//! write their elements through [`Batch::push_element_lists`].

use crate::attr::{AttrWriter, ATTR_HEADER_LEN, MAX_ATTR_LEN};
use crate::batch::Batch;
use crate::objects::{check_name, Family, Set, SetElement};
use crate::sys::*;
use crate::Error;

/// What an element message is about: its set, and whether it adds or deletes.
pub(crate) struct ElementTarget<'a> {
    pub(crate) family: Family,
    pub(crate) table: &'a str,
    pub(crate) set: &'a str,
    /// `set` or `map`, for the messages' descriptions.
    pub(crate) noun: &'a str,
    /// `NFT_MSG_NEWSETELEM` or `NFT_MSG_DELSETELEM`.
    pub(crate) kind: u8,
    pub(crate) flags: u16,
}

impl ElementTarget<'_> {
    fn describe(&self, count: usize) -> String {
        let verb = if self.kind == NFT_MSG_DELSETELEM {
            "delete"
        } else {
            "add"
        };
        format!(
            "{verb} {count} element(s) of {} {} {} {}",
            self.noun, self.family, self.table, self.set
        )
    }
}

/// Elements whose encoding (each `NFTA_LIST_ELEM` with its padding) fits one list attribute.
const MAX_LIST_PAYLOAD: usize = MAX_ATTR_LEN - ATTR_HEADER_LEN;

impl Batch {
    /// Appends the messages carrying `count` elements, `encode(i, list)` writing element `i`
    /// as one `NFTA_LIST_ELEM` attribute. Each message holds as many elements as its list
    /// attribute can; an element that alone does not fit is [`Error::TooLong`], and then no
    /// message is appended. No elements, no message.
    pub(crate) fn push_element_lists(
        &mut self,
        target: &ElementTarget<'_>,
        count: usize,
        mut encode: impl FnMut(usize, &mut AttrWriter),
    ) -> Result<(), Error> {
        check_name("table", target.table)?;
        check_name("set", target.set)?;
        // (encoded elements, how many) per message, all encoded before any is appended.
        let mut lists: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut one = AttrWriter::new();
        for i in 0..count {
            one.clear();
            encode(i, &mut one);
            let bytes = one.written().map_err(|o| o.error(&target.describe(1)))?;
            if bytes.len() > MAX_LIST_PAYLOAD {
                return Err(Error::TooLong {
                    what: target.describe(1),
                    attr: NFTA_SET_ELEM_LIST_ELEMENTS,
                    len: ATTR_HEADER_LEN + bytes.len(),
                });
            }
            match lists.last_mut() {
                Some((list, n)) if list.len() + bytes.len() <= MAX_LIST_PAYLOAD => {
                    list.extend_from_slice(bytes);
                    *n += 1;
                }
                _ => lists.push((bytes.to_vec(), 1)),
            }
        }
        for (list, n) in lists {
            self.push_element_list(target, &list, n)?;
        }
        Ok(())
    }

    /// One message with `count` already-encoded elements.
    fn push_element_list(
        &mut self,
        target: &ElementTarget<'_>,
        list: &[u8],
        count: usize,
    ) -> Result<(), Error> {
        let mut a = AttrWriter::new();
        a.str(NFTA_SET_ELEM_LIST_TABLE, target.table)
            .str(NFTA_SET_ELEM_LIST_SET, target.set)
            .bytes(NFTA_SET_ELEM_LIST_ELEMENTS | NLA_F_NESTED, list);
        self.push(
            target.kind,
            target.flags,
            target.family,
            a,
            target.describe(count),
        )
    }

    fn set_elements(
        &mut self,
        set: &Set,
        elements: &[SetElement],
        kind: u8,
        flags: u16,
    ) -> Result<(), Error> {
        for el in elements {
            let key_ok = el.key.len() == set.key.byte_len() as usize;
            let data_ok = match (set.data, &el.data) {
                (None, None) => true,
                (Some(t), Some(d)) => d.len() == t.byte_len() as usize,
                _ => false,
            };
            if !key_ok || !data_ok {
                return Err(Error::Invalid(format!(
                    "element {el:?} does not fit set {} {} {}",
                    set.family, set.table, set.name
                )));
            }
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
            let el = &elements[i];
            list.nested(NFTA_LIST_ELEM, |e| {
                e.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.bytes(NFTA_DATA_VALUE, &el.key);
                });
                if let Some(d) = &el.data {
                    e.nested(NFTA_SET_ELEM_DATA, |v| {
                        v.bytes(NFTA_DATA_VALUE, d);
                    });
                }
            });
        })
    }

    /// Adds elements to a set or map (existing elements are kept), in as many messages as
    /// the list needs.
    pub fn add_elements(&mut self, set: &Set, elements: &[SetElement]) -> Result<(), Error> {
        self.set_elements(set, elements, NFT_MSG_NEWSETELEM, NLM_F_CREATE)
    }

    /// Deletes elements from a set or map; each must exist.
    pub fn delete_elements(&mut self, set: &Set, elements: &[SetElement]) -> Result<(), Error> {
        self.set_elements(set, elements, NFT_MSG_DELSETELEM, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr;
    use crate::objects::SetType;
    use std::net::Ipv4Addr;

    fn addr_set() -> Set {
        Set::new(Family::Ip, "t", "peers", SetType::Ipv4Addr)
    }

    fn addrs(n: u32) -> Vec<SetElement> {
        (0..n)
            .map(|i| SetElement::addr(Ipv4Addr::from(0xc612_0000 + i).into()))
            .collect()
    }

    /// The keys a batch's element messages carry, in order, with each message's list length.
    fn keys_per_message(b: &Batch) -> Vec<(usize, Vec<Vec<u8>>)> {
        b.entries()
            .iter()
            .map(|e| {
                let attrs = attr::parse(&e.msg.attrs).unwrap();
                let list = attr::find(&attrs, NFTA_SET_ELEM_LIST_ELEMENTS).unwrap();
                let keys = list
                    .nested()
                    .unwrap()
                    .iter()
                    .map(|el| {
                        let key = attr::find(&el.nested().unwrap(), NFTA_SET_ELEM_KEY).unwrap();
                        attr::find(&key.nested().unwrap(), NFTA_DATA_VALUE)
                            .unwrap()
                            .data
                            .to_vec()
                    })
                    .collect();
                (ATTR_HEADER_LEN + list.data.len(), keys)
            })
            .collect()
    }

    #[test]
    fn elements_must_fit_the_set() {
        let set = Set::new(Family::Ip, "t", "ports", SetType::InetService);
        let mut b = Batch::new();
        b.add_set(&set).unwrap();
        b.add_elements(&set, &[SetElement::port(80), SetElement::port(443)])
            .unwrap();
        assert!(b
            .add_elements(&set, &[SetElement::addr("198.18.128.1".parse().unwrap())])
            .is_err());
        assert_eq!(b.len(), 2);
        assert!(b.delete_table(Family::Ip, "").is_err());
    }

    #[test]
    fn a_long_list_is_split_across_messages_that_each_fit_in_order() {
        let els = addrs(70_000);
        let mut b = Batch::new();
        b.add_elements(&addr_set(), &els).unwrap();
        let msgs = keys_per_message(&b);
        // 16 bytes per IPv4 element: 4,095 fit in one list attribute.
        assert_eq!(msgs[0].1.len(), 4_095);
        assert_eq!(msgs.len(), 70_000usize.div_ceil(4_095));
        assert!(msgs.iter().all(|(len, _)| *len <= MAX_ATTR_LEN));
        let sent: Vec<Vec<u8>> = msgs.into_iter().flat_map(|(_, k)| k).collect();
        let want: Vec<Vec<u8>> = els.iter().map(|e| e.key.clone()).collect();
        assert_eq!(sent, want, "every element once, in order");
        for e in b.entries() {
            assert_eq!(e.msg.msg_type & 0xff, u16::from(NFT_MSG_NEWSETELEM));
            assert!(e.what.starts_with("add ") && e.what.ends_with("of set ip t peers"));
        }
        assert_eq!(b.entries()[0].what, "add 4095 element(s) of set ip t peers");

        let mut d = Batch::new();
        d.delete_elements(&addr_set(), &els).unwrap();
        assert_eq!(d.len(), 18);
        assert!(d.entries()[17].what.starts_with("delete 385 element(s)"));
    }

    #[test]
    fn exactly_one_full_list_is_one_message_and_no_elements_no_message() {
        let mut b = Batch::new();
        b.add_elements(&addr_set(), &addrs(4_095)).unwrap();
        assert_eq!(keys_per_message(&b)[0].0, 4 + 4_095 * 16);
        assert_eq!(b.len(), 1);
        b.add_elements(&addr_set(), &addrs(4_096)).unwrap();
        assert_eq!(b.len(), 3);
        b.add_elements(&addr_set(), &[]).unwrap();
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn an_element_too_long_for_any_message_is_an_error() {
        let set = Set::new(Family::Ip, "t", "blobs", SetType::Ipv4Addr);
        let target = ElementTarget {
            family: set.family,
            table: &set.table,
            set: &set.name,
            noun: "set",
            kind: NFT_MSG_NEWSETELEM,
            flags: NLM_F_CREATE,
        };
        let with_userdata = |sizes: &'static [usize]| {
            let mut b = Batch::new();
            let result = b.push_element_lists(&target, sizes.len(), |i, list| {
                list.nested(NFTA_LIST_ELEM, |e| {
                    e.bytes(NFTA_SET_ELEM_USERDATA, &vec![0; sizes[i]]);
                });
            });
            (result, b.len())
        };
        // The largest element that fits a list alone is one message.
        let (ok, messages) = with_userdata(&[65_520, 10]);
        assert!(ok.is_ok() && messages == 2);
        // An element whose own attribute fits, but not inside a list attribute.
        let (err, messages) = with_userdata(&[10, 65_521]);
        assert_eq!(
            messages, 0,
            "nothing is pushed when an element cannot be sent"
        );
        match err.unwrap_err() {
            Error::TooLong { what, attr, len } => {
                assert_eq!(what, "add 1 element(s) of set ip t blobs");
                assert_eq!(attr, NFTA_SET_ELEM_LIST_ELEMENTS);
                assert_eq!(len, 65_536);
            }
            other => panic!("unexpected {other:?}"),
        }
        // An element with an attribute that alone does not fit its length field.
        match with_userdata(&[70_000]).0.unwrap_err() {
            Error::TooLong { attr, len, .. } => {
                assert_eq!((attr, len), (NFTA_SET_ELEM_USERDATA, 70_004));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
