//! u32 filters that send one subnet's packets to an HTB class: a match on the IPv4 or IPv6
//! source or destination address, in the word-by-word form the reference bandwidth plugin
//! (v1.5.x) uses, and a dump of the filters under a qdisc for CHECK.

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::tc::{
    TcAttribute, TcFilterU32Option, TcHandle, TcMessage, TcOption, TcU32Key, TcU32Selector,
    TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::tc_message;
use crate::rtnl::{Error, Handle};

/// `ETH_P_IP` and `ETH_P_IPV6`.
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
/// Filter priorities of the reference plugin: one per protocol, since the kernel keeps one
/// protocol per priority.
const PRIO_IPV4: u16 = 16;
const PRIO_IPV6: u16 = 15;

/// Which address of the IP header a filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrField {
    Source,
    Destination,
}

impl AddrField {
    /// Byte offset of the address in the IPv4 or IPv6 header.
    fn offset(self, v4: bool) -> i32 {
        match (self, v4) {
            (AddrField::Source, true) => 12,
            (AddrField::Destination, true) => 16,
            (AddrField::Source, false) => 8,
            (AddrField::Destination, false) => 24,
        }
    }
}

/// One 32-bit match of a u32 filter: `(packet word at offset) & mask == value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct U32Match {
    pub offset: i32,
    pub mask: u32,
    pub value: u32,
}

/// A u32 filter as reported by the kernel (only the parts CHECK looks at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct U32Filter {
    pub priority: u16,
    /// Ethernet protocol, host order.
    pub protocol: u16,
    pub class: Option<TcHandle>,
    pub matches: Vec<U32Match>,
}

/// The matches selecting `net` by `field`: one per 32-bit word of the address whose mask is
/// not zero. A `/0` has none (it matches every packet of its family).
pub fn subnet_matches(net: &IpNet, field: AddrField) -> Vec<U32Match> {
    let (addr, mask, v4): (Vec<u8>, Vec<u8>, bool) = match net.trunc() {
        IpNet::V4(n) => (
            n.network().octets().to_vec(),
            n.netmask().octets().to_vec(),
            true,
        ),
        IpNet::V6(n) => (
            n.network().octets().to_vec(),
            n.netmask().octets().to_vec(),
            false,
        ),
    };
    let base = field.offset(v4);
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    addr.chunks(4)
        .zip(mask.chunks(4))
        .zip((0..).map(|i| base + 4 * i))
        .filter(|((_, m), _)| be(m) != 0)
        .map(|((a, m), offset)| U32Match {
            offset,
            mask: be(m),
            value: be(a),
        })
        .collect()
}

/// The filter's priority and protocol for a subnet of this family.
pub fn subnet_priority_protocol(net: &IpNet) -> (u16, u16) {
    match net {
        IpNet::V4(_) => (PRIO_IPV4, ETH_P_IP),
        IpNet::V6(_) => (PRIO_IPV6, ETH_P_IPV6),
    }
}

fn selector(matches: &[U32Match]) -> TcU32Selector {
    let mut keys: Vec<TcU32Key> = matches
        .iter()
        .map(|m| {
            let mut key = TcU32Key::default();
            key.off = m.offset;
            key.mask = m.mask;
            key.val = m.value;
            key
        })
        .collect();
    // The kernel needs a selector; an empty mask matches every packet of the protocol.
    if keys.is_empty() {
        keys.push(TcU32Key::default());
    }
    let mut sel = TcU32Selector::default();
    sel.flags = TcU32SelectorFlags::Terminal;
    sel.nkeys = u8::try_from(keys.len()).unwrap_or(u8::MAX);
    sel.keys = keys;
    sel
}

impl U32Filter {
    fn from_message(msg: TcMessage) -> Option<Self> {
        let mut is_u32 = false;
        let mut class = None;
        let mut matches = None;
        for attr in msg.attributes {
            match attr {
                TcAttribute::Kind(k) => is_u32 = k == "u32",
                TcAttribute::Options(opts) => {
                    for opt in opts {
                        match opt {
                            TcOption::U32(TcFilterU32Option::ClassId(c)) => class = Some(c),
                            TcOption::U32(TcFilterU32Option::Selector(s)) => {
                                matches = Some(
                                    s.keys
                                        .iter()
                                        .filter(|k| k.mask != 0)
                                        .map(|k| U32Match {
                                            offset: k.off,
                                            mask: k.mask,
                                            value: k.val,
                                        })
                                        .collect(),
                                )
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        // The kernel also reports each priority's hash table, which has no selector.
        if !is_u32 {
            return None;
        }
        Some(U32Filter {
            priority: (msg.header.info >> 16) as u16,
            protocol: u16::from_be((msg.header.info & 0xffff) as u16),
            class,
            matches: matches?,
        })
    }
}

impl Handle {
    /// Adds a u32 filter under qdisc `parent` of link `index` that sends packets whose
    /// `field` address is in `net` to `class`.
    pub fn add_u32_subnet_filter(
        &mut self,
        index: u32,
        parent: TcHandle,
        net: &IpNet,
        field: AddrField,
        class: TcHandle,
    ) -> Result<(), Error> {
        let (prio, protocol) = subnet_priority_protocol(net);
        let mut msg = tc_message(index, TcHandle::UNSPEC, parent)?;
        msg.header.info = (u32::from(prio) << 16) | u32::from(protocol.to_be());
        msg.attributes = vec![
            TcAttribute::Kind("u32".to_string()),
            TcAttribute::Options(vec![
                TcOption::U32(TcFilterU32Option::ClassId(class)),
                TcOption::U32(TcFilterU32Option::Selector(selector(&subnet_matches(
                    net, field,
                )))),
            ]),
        ];
        self.execute(
            RouteNetlinkMessage::NewTrafficFilter(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// The u32 filters (with a selector) under qdisc `parent` of link `index`.
    pub fn u32_filters(&mut self, index: u32, parent: TcHandle) -> Result<Vec<U32Filter>, Error> {
        let msg = tc_message(index, TcHandle::UNSPEC, parent)?;
        let replies = self.dump(RouteNetlinkMessage::GetTrafficFilter(msg))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewTrafficFilter(m)
                    if u32::try_from(m.header.index) == Ok(index) =>
                {
                    U32Filter::from_message(m)
                }
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NetlinkPayload;

    use super::*;
    use crate::rtnl::fake::FakeTransport;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_subnets_match_one_word_at_the_address_offset() {
        let dst = subnet_matches(&net("198.18.7.9/24"), AddrField::Destination);
        assert_eq!(
            dst,
            [U32Match {
                offset: 16,
                mask: 0xffff_ff00,
                value: 0xc612_0700
            }]
        );
        let src = subnet_matches(&net("198.18.0.0/15"), AddrField::Source);
        assert_eq!(src[0].offset, 12);
        assert_eq!(src[0].mask, 0xfffe_0000);
        assert!(subnet_matches(&net("0.0.0.0/0"), AddrField::Source).is_empty());
    }

    #[test]
    fn ipv6_subnets_skip_words_outside_the_prefix() {
        let m = subnet_matches(&net("2001:2:0:100::/56"), AddrField::Destination);
        assert_eq!(
            m,
            [
                U32Match {
                    offset: 24,
                    mask: 0xffff_ffff,
                    value: 0x2001_0002
                },
                U32Match {
                    offset: 28,
                    mask: 0xffff_ff00,
                    value: 0x0000_0100
                },
            ]
        );
        let host = subnet_matches(&net("2001:2::1/128"), AddrField::Source);
        assert_eq!(host.len(), 4);
        assert_eq!(host[3].offset, 20);
        assert_eq!(host[3].value, 1);
    }

    #[test]
    fn filter_request_and_readback() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_ack();
        let parent = TcHandle { major: 1, minor: 0 };
        let class = TcHandle {
            major: 1,
            minor: 0x30,
        };
        h.add_u32_subnet_filter(5, parent, &net("2001:2::/48"), AddrField::Source, class)
            .unwrap();
        let sent = fake.sent();
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewTrafficFilter(msg)) =
            sent[0].payload.clone()
        else {
            panic!("not a filter");
        };
        assert_eq!(msg.header.parent, parent);
        assert_eq!(msg.header.info, (15 << 16) | u32::from(0x86ddu16.to_be()));
        let f = U32Filter::from_message(msg).unwrap();
        assert_eq!(f.priority, 15);
        assert_eq!(f.protocol, ETH_P_IPV6);
        assert_eq!(f.class, Some(class));
        assert_eq!(
            f.matches,
            [
                U32Match {
                    offset: 8,
                    mask: 0xffff_ffff,
                    value: 0x2001_0002
                },
                U32Match {
                    offset: 12,
                    mask: 0xffff_0000,
                    value: 0
                }
            ]
        );
        // A /0 still sends one (empty) key: the kernel refuses a filter without a selector.
        assert_eq!(selector(&[]).keys.len(), 1);
    }

    /// The selector of `match ip dst 198.18.7.0/24` as `struct tc_u32_sel` with one key,
    /// written out by hand: mask and value in network order, offset 16 in host order.
    #[test]
    #[cfg(target_endian = "little")]
    fn selector_matches_hand_checked_bytes() {
        use netlink_packet_core::Emitable;
        let sel = selector(&subnet_matches(
            &net("198.18.7.0/24"),
            AddrField::Destination,
        ));
        let mut bytes = vec![0u8; sel.buffer_len()];
        sel.emit(&mut bytes);
        #[rustfmt::skip]
        let want: [u8; 32] = [
            0x01, 0x00, 0x01, 0x00, // flags TC_U32_TERMINAL, offshift 0, nkeys 1, pad
            0x00, 0x00, 0x00, 0x00, // offmask, off
            0x00, 0x00, 0x00, 0x00, // offoff, hoff
            0x00, 0x00, 0x00, 0x00, // hmask
            0xff, 0xff, 0xff, 0x00, // key mask /24
            0xc6, 0x12, 0x07, 0x00, // key value 198.18.7.0
            0x10, 0x00, 0x00, 0x00, // key off 16: the IPv4 destination
            0x00, 0x00, 0x00, 0x00, // key offmask
        ];
        assert_eq!(bytes, want);
    }
}
