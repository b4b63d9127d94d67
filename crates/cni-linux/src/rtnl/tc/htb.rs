//! HTB (hierarchy token bucket): the root qdisc and its classes, as the reference bandwidth
//! plugin (v1.5.x) lays them out for `shapedSubnets` / `unshapedSubnets`.
//!
//! netlink-packet-route has no HTB type, so `TCA_HTB_INIT` (`struct tc_htb_glob`) and
//! `TCA_HTB_PARMS` (`struct tc_htb_opt`) are encoded here. As with TBF, no rate tables are sent:
//! current kernels only read them to guess the link layer, which is set in the rate spec.

use netlink_packet_core::{DefaultNla, NlasIterator, NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption};
use netlink_packet_route::RouteNetlinkMessage;

use super::{nest_bytes, tc_message, NLA_TYPE_FLAGS, ROOT_TBF_HANDLE};
use crate::rtnl::{Error, Handle};

// linux/pkt_sched.h, enum TCA_HTB_*.
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
/// `struct tc_htb_glob`: version, rate2quantum, defcls, debug, direct_pkts.
const HTB_GLOB_LEN: usize = 20;
/// `struct tc_htb_opt`: two 12-byte `tc_ratespec`s, then buffer, cbuffer, quantum, level, prio.
const HTB_OPT_LEN: usize = 44;
/// The HTB API version the kernel insists on (`HTB_VER >> 16`).
const HTB_VERSION: u32 = 3;
/// The rate-to-quantum divisor `tc` and the Go netlink library default to.
const RATE2QUANTUM: u32 = 10;
/// `TC_LINKLAYER_ETHERNET`.
const LINKLAYER_ETHERNET: u8 = 1;
/// Offsets of the 32-bit rate inside the two rate specs of `tc_htb_opt`.
const RATE_AT: usize = 8;
const CEIL_AT: usize = 20;

/// One HTB class's settings in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtbClassParams {
    /// Guaranteed rate, bytes per second.
    pub rate: u64,
    /// Ceiling rate, bytes per second.
    pub ceil: u64,
    /// Bucket for `rate`, in scheduler ticks.
    pub buffer: u32,
    /// Bucket for `ceil`, in scheduler ticks.
    pub cbuffer: u32,
}

/// An HTB class as reported by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbClass {
    /// Class id (`1:30` is `major` 1, `minor` 0x30).
    pub handle: TcHandle,
    /// Parent qdisc or class.
    pub parent: TcHandle,
    /// Its rates and buckets.
    pub params: HtbClassParams,
}

fn word(value: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([value[at], value[at + 1], value[at + 2], value[at + 3]])
}

fn u64_attr(kind: u16, value: u64) -> TcOption {
    TcOption::Other(DefaultNla::new(kind, value.to_ne_bytes().to_vec()))
}

fn u64_of(value: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = value.get(..8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(bytes))
}

/// The `TCA_OPTIONS` of an HTB root qdisc whose unclassified traffic goes to `1:<default>`.
fn root_options(default_minor: u16) -> Vec<TcOption> {
    let mut glob = [0u8; HTB_GLOB_LEN];
    glob[0..4].copy_from_slice(&HTB_VERSION.to_ne_bytes());
    glob[4..8].copy_from_slice(&RATE2QUANTUM.to_ne_bytes());
    glob[8..12].copy_from_slice(&u32::from(default_minor).to_ne_bytes());
    vec![TcOption::Other(DefaultNla::new(
        TCA_HTB_INIT,
        glob.to_vec(),
    ))]
}

/// The default class minor of an HTB qdisc, from the bytes of its `TCA_OPTIONS` nest.
pub(super) fn parse_default_class(nest: &[u8]) -> Option<u32> {
    NlasIterator::new(nest)
        .flatten()
        .find(|nla| nla.kind() & !NLA_TYPE_FLAGS == TCA_HTB_INIT && nla.value().len() >= 12)
        .map(|nla| word(nla.value(), 8))
}

impl HtbClassParams {
    /// The `TCA_OPTIONS` of a class with these settings; rates of 4 GiB/s or more go in the
    /// 64-bit attributes (the 32-bit fields then saturate).
    fn options(&self) -> Vec<TcOption> {
        let mut opt = [0u8; HTB_OPT_LEN];
        for (spec_at, rate) in [(0, self.rate), (12, self.ceil)] {
            opt[spec_at + 1] = LINKLAYER_ETHERNET;
            let rate32 = u32::try_from(rate).unwrap_or(u32::MAX);
            opt[spec_at + RATE_AT..spec_at + RATE_AT + 4].copy_from_slice(&rate32.to_ne_bytes());
        }
        opt[24..28].copy_from_slice(&self.buffer.to_ne_bytes());
        opt[28..32].copy_from_slice(&self.cbuffer.to_ne_bytes());
        let mut options = vec![TcOption::Other(DefaultNla::new(
            TCA_HTB_PARMS,
            opt.to_vec(),
        ))];
        if self.rate > u64::from(u32::MAX) {
            options.push(u64_attr(TCA_HTB_RATE64, self.rate));
        }
        if self.ceil > u64::from(u32::MAX) {
            options.push(u64_attr(TCA_HTB_CEIL64, self.ceil));
        }
        options
    }

    /// Reads the settings back from the bytes of a class's `TCA_OPTIONS` nest.
    fn parse(nest: &[u8]) -> Option<Self> {
        let (mut parsed, mut rate64, mut ceil64) = (None, None, None);
        for nla in NlasIterator::new(nest).flatten() {
            let value = nla.value();
            match nla.kind() & !NLA_TYPE_FLAGS {
                TCA_HTB_PARMS if value.len() >= HTB_OPT_LEN => {
                    parsed = Some(HtbClassParams {
                        rate: u64::from(word(value, RATE_AT)),
                        ceil: u64::from(word(value, CEIL_AT)),
                        buffer: word(value, 24),
                        cbuffer: word(value, 28),
                    });
                }
                TCA_HTB_RATE64 => rate64 = u64_of(value),
                TCA_HTB_CEIL64 => ceil64 = u64_of(value),
                _ => {}
            }
        }
        let mut params = parsed?;
        params.rate = rate64.unwrap_or(params.rate);
        params.ceil = ceil64.unwrap_or(params.ceil);
        Some(params)
    }
}

impl HtbClass {
    fn from_message(msg: TcMessage) -> Option<Self> {
        let mut kind = None;
        let mut params = None;
        for attr in msg.attributes {
            match attr {
                TcAttribute::Kind(k) => kind = Some(k),
                TcAttribute::Options(opts) => {
                    params = opts
                        .first()
                        .and_then(|n| HtbClassParams::parse(&nest_bytes(n)))
                }
                _ => {}
            }
        }
        (kind.as_deref() == Some("htb")).then_some(())?;
        Some(HtbClass {
            handle: msg.header.handle,
            parent: msg.header.parent,
            params: params?,
        })
    }
}

impl Handle {
    /// Adds an HTB root qdisc `1:` sending unclassified traffic to class `1:<default_minor>`.
    /// Fails with EEXIST if the link already has a root qdisc of its own.
    pub fn add_root_htb(&mut self, index: u32, default_minor: u16) -> Result<(), Error> {
        let mut msg = tc_message(index, ROOT_TBF_HANDLE, TcHandle::ROOT)?;
        msg.attributes = vec![
            TcAttribute::Kind("htb".to_string()),
            TcAttribute::Options(root_options(default_minor)),
        ];
        self.execute(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Adds class `1:<minor>` under the root qdisc `1:`. Fails with EEXIST if it exists.
    pub fn add_htb_class(
        &mut self,
        index: u32,
        minor: u16,
        params: &HtbClassParams,
    ) -> Result<(), Error> {
        let classid = TcHandle { major: 1, minor };
        let mut msg = tc_message(index, classid, ROOT_TBF_HANDLE)?;
        msg.attributes = vec![
            TcAttribute::Kind("htb".to_string()),
            TcAttribute::Options(params.options()),
        ];
        self.execute(
            RouteNetlinkMessage::NewTrafficClass(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// The HTB classes of one link.
    pub fn htb_classes(&mut self, index: u32) -> Result<Vec<HtbClass>, Error> {
        let msg = tc_message(index, TcHandle::UNSPEC, TcHandle::UNSPEC)?;
        let replies = self.dump(RouteNetlinkMessage::GetTrafficClass(msg))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewTrafficClass(m)
                    if u32::try_from(m.header.index) == Ok(index) =>
                {
                    HtbClass::from_message(m)
                }
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{Emitable, NetlinkPayload};

    use super::super::Qdisc;
    use super::*;
    use crate::rtnl::fake::FakeTransport;

    fn sent_one(fake: &FakeTransport) -> (u16, RouteNetlinkMessage) {
        let mut sent = fake.sent();
        assert_eq!(sent.len(), 1);
        let m = sent.remove(0);
        match m.payload {
            NetlinkPayload::InnerMessage(inner) => (m.header.flags, inner),
            other => panic!("unexpected payload {other:?}"),
        }
    }

    #[test]
    fn root_request_carries_version_quantum_and_default_class() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_ack();
        h.add_root_htb(7, 0x30).unwrap();
        let (flags, msg) = sent_one(&fake);
        assert_eq!(flags & NLM_F_EXCL, NLM_F_EXCL);
        let RouteNetlinkMessage::NewQueueDiscipline(q) = msg else {
            panic!("not a qdisc: {msg:?}");
        };
        assert_eq!(q.header.handle, ROOT_TBF_HANDLE);
        assert_eq!(q.header.parent, TcHandle::ROOT);
        let parsed = Qdisc::from_message(q.clone());
        assert_eq!(parsed.kind, "htb");
        assert_eq!(parsed.htb_default, Some(0x30));
        let opts = root_options(0x30);
        let mut nest = vec![0u8; opts.as_slice().buffer_len()];
        opts.as_slice().emit(&mut nest);
        // version 3, r2q 10, defcls 0x30, debug 0, direct_pkts 0
        assert_eq!(nest.len(), 4 + HTB_GLOB_LEN);
        assert_eq!(word(&nest, 4), 3);
        assert_eq!(word(&nest, 8), 10);
        assert_eq!(word(&nest, 12), 0x30);
    }

    #[test]
    fn class_request_round_trips_and_uses_64_bit_rates_above_u32() {
        let fake = FakeTransport::new();
        let mut h = Handle::with_transport(Box::new(fake.clone()));
        fake.push_ack();
        let params = HtbClassParams {
            rate: 100_000_000_000,
            ceil: 100_000_000_000,
            buffer: 0,
            cbuffer: 0,
        };
        h.add_htb_class(3, 1, &params).unwrap();
        let (_, msg) = sent_one(&fake);
        let RouteNetlinkMessage::NewTrafficClass(c) = msg else {
            panic!("not a class: {msg:?}");
        };
        assert_eq!(c.header.handle, TcHandle { major: 1, minor: 1 });
        assert_eq!(c.header.parent, ROOT_TBF_HANDLE);
        let class = HtbClass::from_message(c).expect("an htb class");
        assert_eq!(class.params, params);
        let kinds: Vec<u16> = params
            .options()
            .iter()
            .map(netlink_packet_core::Nla::kind)
            .collect();
        assert_eq!(kinds, [TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64]);

        let small = HtbClassParams {
            rate: 125_000,
            ceil: 250_000,
            buffer: 1234,
            cbuffer: 1234,
        };
        assert_eq!(small.options().len(), 1);
        let opts = small.options();
        let mut nest = vec![0u8; opts.as_slice().buffer_len()];
        opts.as_slice().emit(&mut nest);
        assert_eq!(HtbClassParams::parse(&nest), Some(small));
        // The link layer is declared in both rate specs.
        assert_eq!(nest[4 + 1], LINKLAYER_ETHERNET);
        assert_eq!(nest[4 + 13], LINKLAYER_ETHERNET);
    }

    /// `struct tc_htb_opt` for 1 Mbit/s (125000 B/s), ceiling 250000 B/s, buckets of 1234
    /// ticks, written out by hand (x86 byte order).
    #[test]
    #[cfg(target_endian = "little")]
    fn class_options_match_hand_checked_bytes() {
        let opts = HtbClassParams {
            rate: 125_000,
            ceil: 250_000,
            buffer: 1234,
            cbuffer: 1234,
        }
        .options();
        let mut nest = vec![0u8; opts.as_slice().buffer_len()];
        opts.as_slice().emit(&mut nest);
        #[rustfmt::skip]
        let want: [u8; 48] = [
            0x30, 0x00, 0x01, 0x00, // nla_len 48, TCA_HTB_PARMS
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // rate: linklayer ethernet
            0x48, 0xe8, 0x01, 0x00, // rate 125000
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ceil: linklayer ethernet
            0x90, 0xd0, 0x03, 0x00, // ceil 250000
            0xd2, 0x04, 0x00, 0x00, // buffer 1234
            0xd2, 0x04, 0x00, 0x00, // cbuffer 1234
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // quantum, level, prio: kernel defaults
        ];
        assert_eq!(nest, want);
        let glob = root_options(0x30);
        let mut nest = vec![0u8; glob.as_slice().buffer_len()];
        glob.as_slice().emit(&mut nest);
        #[rustfmt::skip]
        let want: [u8; 24] = [
            0x18, 0x00, 0x02, 0x00, // nla_len 24, TCA_HTB_INIT
            3, 0, 0, 0, 10, 0, 0, 0, 0x30, 0, 0, 0, // version 3, r2q 10, defcls 0x30
            0, 0, 0, 0, 0, 0, 0, 0, // debug, direct_pkts
        ];
        assert_eq!(nest, want);
    }
}
