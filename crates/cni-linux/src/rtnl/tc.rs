//! Traffic control: the token-bucket (TBF) root qdisc, the ingress qdisc, a u32 match-all filter
//! that redirects to another device with `mirred`, qdisc listing and deletion. This is what
//! traffic shaping (the `bandwidth` plugin) needs; [`htb`] and [`u32`] add the HTB classes and
//! subnet filters of its `shapedSubnets` / `unshapedSubnets` layout.
//!
//! netlink-packet-route has no TBF type, so its options (`TCA_TBF_PARMS`, `TCA_TBF_RATE64`) are
//! encoded here. Like the Go netlink library the reference plugin uses, no rate table is sent:
//! the kernel derives the packet-size table from the rate itself.

use netlink_packet_core::{DefaultNla, Nla, NlasIterator, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterU32Option, TcMessage, TcMirror, TcMirrorActionType,
    TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{Error, Handle};

pub mod htb;
pub mod u32;

/// Re-exported so callers can name qdisc handles and parents without the netlink crate.
pub use netlink_packet_route::tc::TcHandle;

// linux/pkt_sched.h, enum TCA_TBF_*.
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
/// `struct tc_tbf_qopt`: two 12-byte `tc_ratespec`s, then limit, buffer and mtu.
const TBF_QOPT_LEN: usize = 36;
/// `ETH_P_ALL`, the filter protocol matching every packet.
const ETH_P_ALL: u16 = 0x0003;
/// Time units per second of the packet scheduler's API (microseconds).
const TIME_UNITS_PER_SEC: f64 = 1_000_000.0;
/// Queueing latency the reference plugin sizes the TBF limit for.
const LATENCY_MS: f64 = 25.0;

/// Handle `1:` of the root shaping qdisc.
pub const ROOT_TBF_HANDLE: TcHandle = TcHandle { major: 1, minor: 0 };
/// Handle `ffff:` of the ingress qdisc.
pub const INGRESS_HANDLE: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};

/// TBF settings in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbfParams {
    /// Rate in bytes per second.
    pub rate: u64,
    /// Bucket size in scheduler ticks (`tc_tbf_qopt.buffer`).
    pub buffer: u32,
    /// Queue limit in bytes.
    pub limit: u32,
}

impl TbfParams {
    /// Computes the settings the reference bandwidth plugin uses for a rate in bits per second
    /// and a burst in bits: rate/8 bytes per second, the burst converted to ticks, and a limit
    /// of 25 ms worth of traffic plus the burst.
    pub fn from_bits(rate_bits: u64, burst_bits: u64) -> Result<Self, Error> {
        Self::from_bits_with_tick(rate_bits, burst_bits, tick_in_usec())
    }

    /// [`TbfParams::from_bits`] with an explicit scheduler tick length (ticks per microsecond).
    pub fn from_bits_with_tick(
        rate_bits: u64,
        burst_bits: u64,
        tick_in_usec: f64,
    ) -> Result<Self, Error> {
        let rate = rate_bits / 8;
        let burst = burst_bits / 8;
        if rate == 0 {
            return Err(Error::InvalidArgument(format!(
                "invalid rate: {rate_bits} bits/s is below one byte per second"
            )));
        }
        let burst = u32::try_from(burst).map_err(|_| {
            Error::InvalidArgument(format!("burst of {burst_bits} bits is 4 GiB or more"))
        })?;
        if burst == 0 {
            return Err(Error::InvalidArgument(format!(
                "invalid burst: {burst_bits} bits is below one byte"
            )));
        }
        // Float-to-int `as` casts saturate, which is the sane reading of Go's conversions.
        let burst_usec = (f64::from(burst) * TIME_UNITS_PER_SEC / rate as f64) as u32;
        let buffer = (f64::from(burst_usec) * tick_in_usec) as u32;
        let latency_usec = TIME_UNITS_PER_SEC * (LATENCY_MS / 1000.0);
        let limit = ((rate as f64 * latency_usec / TIME_UNITS_PER_SEC) as u32).wrapping_add(burst);
        Ok(TbfParams {
            rate,
            buffer,
            limit,
        })
    }

    /// The `TCA_OPTIONS` attributes of a TBF qdisc with these settings.
    fn options(&self) -> Vec<TcOption> {
        let mut qopt = [0u8; TBF_QOPT_LEN];
        // tc_ratespec.rate (offset 8); a 64-bit rate goes in TCA_TBF_RATE64 instead.
        let rate32 = u32::try_from(self.rate).unwrap_or(u32::MAX);
        qopt[8..12].copy_from_slice(&rate32.to_ne_bytes());
        qopt[24..28].copy_from_slice(&self.limit.to_ne_bytes());
        qopt[28..32].copy_from_slice(&self.buffer.to_ne_bytes());
        let mut options = vec![TcOption::Other(DefaultNla::new(
            TCA_TBF_PARMS,
            qopt.to_vec(),
        ))];
        if self.rate > u64::from(u32::MAX) {
            options.push(TcOption::Other(DefaultNla::new(
                TCA_TBF_RATE64,
                self.rate.to_ne_bytes().to_vec(),
            )));
        }
        options
    }

    /// Reads the settings back from the bytes of a TBF qdisc's `TCA_OPTIONS` nest.
    fn parse(nest: &[u8]) -> Option<Self> {
        let mut parsed: Option<TbfParams> = None;
        let mut rate64 = None;
        for nla in NlasIterator::new(nest).flatten() {
            let value = nla.value();
            match nla.kind() & !NLA_TYPE_FLAGS {
                TCA_TBF_PARMS if value.len() >= TBF_QOPT_LEN => {
                    let word = |at: usize| {
                        u32::from_ne_bytes([value[at], value[at + 1], value[at + 2], value[at + 3]])
                    };
                    parsed = Some(TbfParams {
                        rate: u64::from(word(8)),
                        limit: word(24),
                        buffer: word(28),
                    });
                }
                TCA_TBF_RATE64 if value.len() >= 8 => {
                    let mut bytes = [0u8; 8];
                    bytes.copy_from_slice(&value[..8]);
                    rate64 = Some(u64::from_ne_bytes(bytes));
                }
                _ => {}
            }
        }
        let mut params = parsed?;
        if let Some(rate) = rate64 {
            params.rate = rate;
        }
        Some(params)
    }
}

/// `NLA_F_NESTED | NLA_F_NET_BYTEORDER`, masked off attribute types.
const NLA_TYPE_FLAGS: u16 = 0xc000;

/// Scheduler ticks per microsecond, read from `/proc/net/psched` the way the Go netlink
/// library does (15.625 on current kernels, which is also the fallback).
pub fn tick_in_usec() -> f64 {
    std::fs::read_to_string("/proc/net/psched")
        .ok()
        .and_then(|text| tick_from_psched(&text))
        .unwrap_or(15.625)
}

/// Parses `/proc/net/psched` (four hex words: t2us, us2t, clock resolution, hz).
fn tick_from_psched(text: &str) -> Option<f64> {
    let words: Vec<u64> = text
        .split_whitespace()
        .map(|w| u64::from_str_radix(w, 16).ok())
        .collect::<Option<_>>()?;
    let [mut t2us, us2t, clock, ..] = words[..] else {
        return None;
    };
    if us2t == 0 {
        return None;
    }
    // Very old kernels reported a nanosecond clock this way.
    if clock == 1_000_000_000 {
        t2us = us2t;
    }
    Some(t2us as f64 / us2t as f64 * (clock as f64 / TIME_UNITS_PER_SEC))
}

/// A qdisc as reported by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    /// Interface index.
    pub index: u32,
    /// Kind, e.g. `"tbf"`, `"ingress"`, `"noqueue"`.
    pub kind: String,
    /// Handle (`1:` is `major` 1, `minor` 0).
    pub handle: TcHandle,
    /// Parent (`TcHandle::ROOT` for a root qdisc, `TcHandle::INGRESS` for ingress).
    pub parent: TcHandle,
    /// TBF settings, for a TBF qdisc.
    pub tbf: Option<TbfParams>,
    /// The default class minor (`defcls`), for an HTB qdisc.
    pub htb_default: Option<u32>,
}

/// The bytes of an opaque `TCA_OPTIONS` nest: an unknown kind's options come back as one
/// attribute holding the whole nest.
fn nest_bytes(nest: &TcOption) -> Vec<u8> {
    let mut bytes = vec![0u8; nest.value_len()];
    nest.emit_value(&mut bytes);
    bytes
}

impl Qdisc {
    fn from_message(msg: TcMessage) -> Self {
        let mut kind = String::new();
        let mut options = Vec::new();
        for attr in msg.attributes {
            match attr {
                TcAttribute::Kind(k) => kind = k,
                TcAttribute::Options(opts) => options = opts,
                _ => {}
            }
        }
        let nest = options.first().map(nest_bytes);
        let nest = nest.as_deref().filter(|_| kind == "tbf" || kind == "htb");
        let tbf = nest.filter(|_| kind == "tbf").and_then(TbfParams::parse);
        let htb_default = nest
            .filter(|_| kind == "htb")
            .and_then(htb::parse_default_class);
        Qdisc {
            index: u32::try_from(msg.header.index).unwrap_or(0),
            kind,
            handle: msg.header.handle,
            parent: msg.header.parent,
            tbf,
            htb_default,
        }
    }
}

fn tc_message(index: u32, handle: TcHandle, parent: TcHandle) -> Result<TcMessage, Error> {
    let mut msg = TcMessage::default();
    msg.header.index = i32::try_from(index)
        .map_err(|_| Error::InvalidArgument(format!("interface index {index} out of range")))?;
    msg.header.handle = handle;
    msg.header.parent = parent;
    Ok(msg)
}

/// The u32 selector matching every packet: one key with an empty mask.
fn match_all_selector() -> TcU32Selector {
    let mut sel = TcU32Selector::default();
    sel.flags = TcU32SelectorFlags::Terminal;
    sel.nkeys = 1;
    sel.keys = vec![TcU32Key::default()];
    sel
}

/// A `mirred egress redirect` action to `target` (the packet is stolen from this device).
fn redirect_action(target: u32) -> TcAction {
    let mut generic = TcActionGeneric::default();
    generic.action = TcActionType::Stolen;
    let mut mirror = TcMirror::default();
    mirror.generic = generic;
    mirror.eaction = TcMirrorActionType::EgressRedir;
    mirror.ifindex = target;
    let mut action = TcAction::default();
    action.attributes = vec![
        TcActionAttribute::Kind("mirred".to_string()),
        TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
            mirror,
        ))]),
    ];
    action
}

impl Handle {
    /// Installs (or replaces) a TBF root qdisc with handle `1:` on the link.
    pub fn replace_root_tbf(&mut self, index: u32, params: &TbfParams) -> Result<(), Error> {
        self.new_root_tbf(index, params, NLM_F_CREATE | NLM_F_REPLACE)
    }

    /// Adds a TBF root qdisc with handle `1:`. Fails with EEXIST if the link already has a
    /// root qdisc of its own (its default qdisc does not count), so a caller never takes over
    /// shaping someone else installed.
    pub fn add_root_tbf(&mut self, index: u32, params: &TbfParams) -> Result<(), Error> {
        self.new_root_tbf(index, params, NLM_F_CREATE | NLM_F_EXCL)
    }

    fn new_root_tbf(&mut self, index: u32, params: &TbfParams, flags: u16) -> Result<(), Error> {
        let mut msg = tc_message(index, ROOT_TBF_HANDLE, TcHandle::ROOT)?;
        msg.attributes = vec![
            TcAttribute::Kind("tbf".to_string()),
            TcAttribute::Options(params.options()),
        ];
        self.execute(RouteNetlinkMessage::NewQueueDiscipline(msg), flags)
    }

    /// Adds the ingress qdisc (`ffff:`). Fails with EEXIST if the link already has one.
    pub fn add_ingress_qdisc(&mut self, index: u32) -> Result<(), Error> {
        let mut msg = tc_message(index, INGRESS_HANDLE, TcHandle::INGRESS)?;
        msg.attributes = vec![
            TcAttribute::Kind("ingress".to_string()),
            TcAttribute::Options(vec![]),
        ];
        self.execute(
            RouteNetlinkMessage::NewQueueDiscipline(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Adds a u32 filter on the ingress qdisc of `index` (priority 1, every protocol, class
    /// `1:1`) that matches every packet and redirects it to the egress of `target`.
    pub fn add_ingress_redirect(&mut self, index: u32, target: u32) -> Result<(), Error> {
        let mut msg = tc_message(index, TcHandle::UNSPEC, INGRESS_HANDLE)?;
        // tcm_info: priority in the upper 16 bits, protocol (network order) in the lower.
        msg.header.info = (1u32 << 16) | u32::from(ETH_P_ALL.to_be());
        msg.attributes = vec![
            TcAttribute::Kind("u32".to_string()),
            TcAttribute::Options(vec![
                TcOption::U32(TcFilterU32Option::Selector(match_all_selector())),
                TcOption::U32(TcFilterU32Option::ClassId(TcHandle { major: 1, minor: 1 })),
                TcOption::U32(TcFilterU32Option::Action(vec![redirect_action(target)])),
            ]),
        ];
        self.execute(
            RouteNetlinkMessage::NewTrafficFilter(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// The qdiscs of one link.
    pub fn qdiscs(&mut self, index: u32) -> Result<Vec<Qdisc>, Error> {
        let msg = tc_message(index, TcHandle::UNSPEC, TcHandle::UNSPEC)?;
        let replies = self.dump(RouteNetlinkMessage::GetQueueDiscipline(msg))?;
        Ok(replies
            .into_iter()
            .filter_map(|reply| match reply {
                RouteNetlinkMessage::NewQueueDiscipline(m) => Some(Qdisc::from_message(m)),
                _ => None,
            })
            // Older kernels ignore the index filter of a dump.
            .filter(|q| q.index == index)
            .collect())
    }

    /// Deletes the qdisc attached at `parent` (`TcHandle::ROOT` or `TcHandle::INGRESS`),
    /// with its filters and classes. Returns whether one was deleted: a link without such a
    /// qdisc is not an error.
    pub fn delete_qdisc(&mut self, index: u32, parent: TcHandle) -> Result<bool, Error> {
        let msg = tc_message(index, TcHandle::UNSPEC, parent)?;
        match self.execute(RouteNetlinkMessage::DelQueueDiscipline(msg), 0) {
            Ok(()) => Ok(true),
            // ENOENT: nothing attached there; EINVAL: only the default (handle 0) qdisc.
            Err(Error::Kernel(k)) if k.errno == libc::ENOENT || k.errno == libc::EINVAL => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::{Emitable, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP};

    use super::super::fake::FakeTransport;
    use super::*;

    fn handle() -> (Handle, FakeTransport) {
        let fake = FakeTransport::new();
        (Handle::with_transport(Box::new(fake.clone())), fake)
    }

    fn sent(fake: &FakeTransport) -> Vec<(u16, RouteNetlinkMessage)> {
        fake.sent()
            .into_iter()
            .map(|m| match m.payload {
                NetlinkPayload::InnerMessage(inner) => (m.header.flags, inner),
                other => panic!("unexpected payload {other:?}"),
            })
            .collect()
    }

    #[test]
    fn tick_follows_proc_psched() {
        assert_eq!(
            tick_from_psched("000003e8 00000040 000f4240 3b9aca00\n"),
            Some(15.625)
        );
        assert_eq!(tick_from_psched("garbage"), None);
        assert_eq!(tick_from_psched("1 0 1 1"), None);
    }

    #[test]
    fn params_match_the_reference_formula() {
        // 1 Mbit/s, 1 Mbit burst: 125000 B/s, 125000 B = 1 s = 15625000 ticks,
        // limit = 125000 * 0.025 + 125000.
        let p = TbfParams::from_bits_with_tick(1_000_000, 1_000_000, 15.625).unwrap();
        assert_eq!(p.rate, 125_000);
        assert_eq!(p.buffer, 15_625_000);
        assert_eq!(p.limit, 3_125 + 125_000);
        assert!(TbfParams::from_bits_with_tick(7, 800, 15.625).is_err());
        assert!(TbfParams::from_bits_with_tick(800, 7, 15.625).is_err());
        assert!(TbfParams::from_bits_with_tick(800, 8 * (1 << 32), 15.625).is_err());
    }

    #[test]
    fn tbf_request_encodes_parms_and_parses_back() {
        let (mut h, fake) = handle();
        fake.push_ack();
        let params = TbfParams {
            rate: 125_000,
            buffer: 777,
            limit: 4242,
        };
        h.replace_root_tbf(9, &params).unwrap();
        let mut msgs = sent(&fake);
        assert_eq!(msgs.len(), 1);
        let (flags, msg) = msgs.remove(0);
        assert_eq!(
            flags & (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK),
            NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK
        );
        let RouteNetlinkMessage::NewQueueDiscipline(tc) = msg else {
            panic!("not a new qdisc: {msg:?}");
        };
        assert_eq!(tc.header.index, 9);
        assert_eq!(tc.header.handle, ROOT_TBF_HANDLE);
        assert_eq!(tc.header.parent, TcHandle::ROOT);
        let parsed = Qdisc::from_message(tc);
        assert_eq!(parsed.kind, "tbf");
        assert_eq!(parsed.tbf, Some(params));
    }

    #[test]
    fn a_64_bit_rate_uses_rate64() {
        let params = TbfParams {
            rate: 1 << 33,
            buffer: 1,
            limit: 2,
        };
        let opts = params.options();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[1].kind(), TCA_TBF_RATE64);
        let mut nest = vec![0u8; opts.as_slice().buffer_len()];
        opts.as_slice().emit(&mut nest);
        assert_eq!(TbfParams::parse(&nest), Some(params));
    }

    #[test]
    fn ingress_and_redirect_requests() {
        let (mut h, fake) = handle();
        fake.push_ack();
        fake.push_ack();
        h.add_ingress_qdisc(4).unwrap();
        h.add_ingress_redirect(4, 12).unwrap();
        let msgs = sent(&fake);
        let RouteNetlinkMessage::NewQueueDiscipline(q) = &msgs[0].1 else {
            panic!("not a qdisc");
        };
        assert_eq!(q.header.parent, TcHandle::INGRESS);
        assert_eq!(q.header.handle, INGRESS_HANDLE);
        assert!(q.attributes.contains(&TcAttribute::Kind("ingress".into())));
        assert_eq!(msgs[1].0 & NLM_F_EXCL, NLM_F_EXCL);
        let RouteNetlinkMessage::NewTrafficFilter(f) = &msgs[1].1 else {
            panic!("not a filter");
        };
        assert_eq!(f.header.parent, INGRESS_HANDLE);
        assert_eq!(f.header.info, 0x0001_0300);
        let opts = f
            .attributes
            .iter()
            .find_map(|a| match a {
                TcAttribute::Options(o) => Some(o.clone()),
                _ => None,
            })
            .expect("options");
        assert!(opts.contains(&TcOption::U32(TcFilterU32Option::Selector(
            match_all_selector()
        ))));
        let action = opts
            .iter()
            .find_map(|o| match o {
                TcOption::U32(TcFilterU32Option::Action(a)) => Some(a.clone()),
                _ => None,
            })
            .expect("action");
        assert_eq!(action.len(), 1);
        let mirror = action[0]
            .attributes
            .iter()
            .find_map(|a| match a {
                TcActionAttribute::Options(o) => o.iter().find_map(|o| match o {
                    TcActionOption::Mirror(TcActionMirrorOption::Parms(m)) => Some(m.clone()),
                    _ => None,
                }),
                _ => None,
            })
            .expect("mirred parms");
        assert_eq!(mirror.ifindex, 12);
        assert_eq!(mirror.eaction, TcMirrorActionType::EgressRedir);
        assert_eq!(mirror.generic.action, TcActionType::Stolen);
    }

    #[test]
    fn qdisc_dump_keeps_only_the_link() {
        let (mut h, fake) = handle();
        let mut a = tc_message(3, ROOT_TBF_HANDLE, TcHandle::ROOT).unwrap();
        a.attributes = vec![TcAttribute::Kind("noqueue".into())];
        let mut b = tc_message(5, ROOT_TBF_HANDLE, TcHandle::ROOT).unwrap();
        b.attributes = vec![TcAttribute::Kind("tbf".into())];
        fake.push_dump(vec![
            RouteNetlinkMessage::NewQueueDiscipline(a),
            RouteNetlinkMessage::NewQueueDiscipline(b),
        ]);
        let q = h.qdiscs(3).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].kind, "noqueue");
        assert_eq!(q[0].tbf, None);
        assert_eq!(sent(&fake)[0].0 & NLM_F_DUMP, NLM_F_DUMP);
    }

    #[test]
    fn deleting_a_missing_qdisc_is_not_an_error() {
        let (mut h, fake) = handle();
        fake.push_errno(libc::ENOENT);
        fake.push_errno(libc::EINVAL);
        fake.push_ack();
        fake.push_errno(libc::EPERM);
        assert!(!h.delete_qdisc(3, TcHandle::ROOT).unwrap());
        assert!(!h.delete_qdisc(3, TcHandle::INGRESS).unwrap());
        assert!(h.delete_qdisc(3, TcHandle::ROOT).unwrap());
        assert!(h.delete_qdisc(3, TcHandle::ROOT).is_err());
    }
}
