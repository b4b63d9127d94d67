//! The keyed portmap layout ("rcni portmap v2"): constant rules that look packets up in maps,
//! and per-attachment map elements, so that ADD, DEL and CHECK cost the same whatever else
//! the host maps. In each family's `cni_hostport` table:
//!
//! * map `rcni_hostports`: `meta l4proto . th dport` → `<container addr> . <container port>`;
//! * map `rcni_hostip_hostports`: `ip[6] daddr . meta l4proto . th dport` → the same;
//! * sets `rcni_hairpin_<len>`: `ip[6] saddr & /len . ip[6] daddr`, the sources whose
//!   connections to the container are masqueraded (its subnet, 127.0.0.1/32, or /0 with
//!   `masqAll`), one set per prefix length in use;
//! * base chains `rcni_prerouting` / `rcni_output` (nat, dstnat - 1): for each map,
//!   `fib daddr type local <key> map lookup, meta mark |= 1<<13, dnat to the value` (comment
//!   [`MARKER`]); `rcni_postrouting` (nat, srcnat), per prefix length in use:
//!   `mark & 1<<13 == 1<<13, (saddr & /len . daddr) in @rcni_hairpin_<len>, masquerade`
//!   (comment `rcni portmap v2 hairpin /<len>`), added with its set the first time a length
//!   is needed. Hash sets, not one interval set: deleting from the kernel's interval-concat
//!   backend (pipapo) costs time that grows with the set (docs/performance.md, "portmap and
//!   ipMasq at scale").
//!
//! Every element carries its attachment's [`AttachmentId`] comment, and the attachment's
//! entry in the index set `rcni_index` lists its keys (see [`super::index`]): DEL reads that
//! entry and deletes elements by key, never listing what other attachments own. Elements
//! are added exclusively, so each key has one owner; a key another attachment already owns
//! goes to the rule-per-mapping layout of [`super::rules`] (first ADD wins, like Go's), as
//! do attachments with `conditionsV4/V6` or a `markMasqBit` other than 13, which constant
//! rules cannot express.
//!
//! Why elements and not per-attachment rules: the kernel re-validates every rule reachable
//! from a table's base chains whenever a rule with a jump, NAT or mark statement is added, so
//! any per-attachment rule makes each ADD cost grow with the table; map elements do not.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

use cni_nft::{
    concat, priority, Batch, Chain, ChainType, ConcatElement, ConcatSet, Expr, Family, Hook,
    L4Proto, MetaKey, NatKind, Nft, PayloadBase, Reg, Rule, SetType,
};

use super::conf::{PortMapConf, PortMapping, DEFAULT_MARK_BIT};
use super::rules::TABLE;
use cni_attribution::AttachmentId;

pub const HOSTPORTS_MAP: &str = "rcni_hostports";
pub const HOSTIP_MAP: &str = "rcni_hostip_hostports";
/// Prefix of the per-prefix-length hairpin sets and of their rules' comments.
pub const HAIRPIN_SET: &str = "rcni_hairpin_";
pub const PREROUTING: &str = "rcni_prerouting";
pub const OUTPUT: &str = "rcni_output";
pub const POSTROUTING: &str = "rcni_postrouting";
/// The comment of the constant rules; change it when they change.
pub const MARKER: &str = "rcni portmap v2";
/// The constant rules mark with Go's default bit.
const MARK: u32 = 1 << DEFAULT_MARK_BIT;
/// Where the map value lands (32-bit register index) and the mark is computed: clear of
/// each other and of the key, for IPv6 too (value: 8..=12, mark: 14).
const VALUE_REG: u8 = 8;
const MARK_REG: u8 = 14;
/// Just before `dstnat`, where the per-mapping rules (Go's and the fallback's) run: a key's
/// first holder keeps the port while a later attachment waits in a rule.
const DNAT_PRIORITY: i32 = priority::DSTNAT - 1;

fn is_v6(f: Family) -> bool {
    f == Family::Ip6
}

fn addr_type(f: Family) -> SetType {
    if is_v6(f) {
        SetType::Ipv6Addr
    } else {
        SetType::Ipv4Addr
    }
}

/// IPv4/IPv6 header offsets of (saddr, daddr) and the address length.
fn addr_layout(f: Family) -> (u32, u32, u32) {
    if is_v6(f) {
        (8, 24, 16)
    } else {
        (12, 16, 4)
    }
}

pub fn hostports_map(f: Family) -> ConcatSet {
    ConcatSet::map(
        f,
        TABLE,
        HOSTPORTS_MAP,
        &[SetType::InetProto, SetType::InetService],
        &[addr_type(f), SetType::InetService],
    )
}

pub fn hostip_map(f: Family) -> ConcatSet {
    ConcatSet::map(
        f,
        TABLE,
        HOSTIP_MAP,
        &[addr_type(f), SetType::InetProto, SetType::InetService],
        &[addr_type(f), SetType::InetService],
    )
}

/// The hairpin set of sources with prefix length `len`.
pub fn hairpin_set(f: Family, len: u8) -> ConcatSet {
    let name = format!("{HAIRPIN_SET}{len}");
    ConcatSet::set(f, TABLE, &name, &[addr_type(f), addr_type(f)])
}

fn hairpin_comment(len: u8) -> String {
    format!("{MARKER} hairpin /{len}")
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn proto_name(p: L4Proto) -> &'static str {
    match p {
        L4Proto::Tcp => "tcp",
        L4Proto::Udp => "udp",
        L4Proto::Sctp => "sctp",
    }
}

/// What an element is keyed by; also its line in the attachment's index chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// `hp <proto> <port>`: a mapping on every host address.
    Port { proto: L4Proto, port: u16 },
    /// `hip <hostIP> <proto> <port>`.
    HostIpPort {
        ip: IpAddr,
        proto: L4Proto,
        port: u16,
    },
    /// `hair <source net> <container addr>`.
    Hairpin { from: IpNet, to: IpAddr },
}

impl Key {
    /// The index text.
    pub fn text(&self) -> String {
        match self {
            Key::Port { proto, port } => format!("hp {} {port}", proto_name(*proto)),
            Key::HostIpPort { ip, proto, port } => {
                format!("hip {ip} {} {port}", proto_name(*proto))
            }
            Key::Hairpin { from, to } => format!("hair {from} {to}"),
        }
    }

    /// Reads [`Key::text`] back; `None` for anything else.
    pub fn parse(text: &str) -> Option<Key> {
        let words: Vec<&str> = text.split(' ').collect();
        match words.as_slice() {
            ["hp", proto, port] => Some(Key::Port {
                proto: L4Proto::from_name(proto)?,
                port: port.parse().ok()?,
            }),
            ["hip", ip, proto, port] => Some(Key::HostIpPort {
                ip: ip.parse().ok()?,
                proto: L4Proto::from_name(proto)?,
                port: port.parse().ok()?,
            }),
            ["hair", from, to] => Some(Key::Hairpin {
                from: from.parse().ok()?,
                to: to.parse().ok()?,
            }),
            _ => None,
        }
    }

    fn set(&self, f: Family) -> ConcatSet {
        match self {
            Key::Port { .. } => hostports_map(f),
            Key::HostIpPort { .. } => hostip_map(f),
            Key::Hairpin { from, .. } => hairpin_set(f, from.prefix_len()),
        }
    }

    /// Whether the key belongs to family `f`'s table.
    pub(super) fn in_family(&self, f: Family) -> bool {
        match self {
            Key::Port { .. } => true,
            Key::HostIpPort { ip, .. } => Family::of(*ip) == f,
            Key::Hairpin { from, to } => Family::of(*to) == f && Family::of(from.addr()) == f,
        }
    }

    /// The element's key.
    fn bytes(&self) -> Vec<u8> {
        match self {
            Key::Port { proto, port } => concat(&[&[proto.number()], &port.to_be_bytes()]),
            Key::HostIpPort { ip, proto, port } => {
                concat(&[&addr_bytes(*ip), &[proto.number()], &port.to_be_bytes()])
            }
            Key::Hairpin { from, to } => concat(&[&addr_bytes(from.network()), &addr_bytes(*to)]),
        }
    }

    /// The element as deleted (key only).
    pub(super) fn element(&self) -> ConcatElement {
        ConcatElement::new(self.bytes())
    }
}

/// One element an attachment owns: its key and, for the maps, the DNAT target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Key,
    pub target: Option<SocketAddr>,
    /// The mapping it comes from (for the per-rule fallback on a conflict).
    pub mapping: Option<PortMapping>,
}

impl Entry {
    fn value(&self) -> Option<Vec<u8>> {
        self.target
            .map(|t| concat(&[&addr_bytes(t.ip()), &t.port().to_be_bytes()]))
    }

    fn element(&self, comment: &str) -> ConcatElement {
        let mut e = self.key.element().comment(comment);
        e.data = self.value();
        e
    }
}

/// Whether the keyed layout can express this config in family `ipv6`.
pub fn eligible(conf: &PortMapConf, ipv6: bool) -> bool {
    let conditions = if ipv6 {
        &conf.conditions_v6
    } else {
        &conf.conditions_v4
    };
    conditions.matches.is_empty() && conf.mark_bit == DEFAULT_MARK_BIT
}

/// The elements of one attachment in the family of `addr`, for the mappings that apply to it
/// (a repeated key keeps its first mapping, which is the one that would win as a rule).
pub fn entries(conf: &PortMapConf, addr: IpNet, mappings: &[PortMapping]) -> Vec<Entry> {
    let v6 = addr.addr().is_ipv6();
    let mut out: Vec<Entry> = Vec::new();
    for m in mappings.iter().filter(|m| m.applies_to(v6)) {
        let key = match m.host_ip {
            Some(ip) => Key::HostIpPort {
                ip,
                proto: m.protocol,
                port: m.host_port,
            },
            None => Key::Port {
                proto: m.protocol,
                port: m.host_port,
            },
        };
        if out.iter().any(|e| e.key == key) {
            continue;
        }
        out.push(Entry {
            key,
            target: Some(SocketAddr::new(addr.addr(), m.container_port)),
            mapping: Some(m.clone()),
        });
    }
    if out.is_empty() || !conf.snat {
        return out;
    }
    let sources: Vec<IpNet> = if conf.masq_all {
        let any = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        vec![IpNet::new(any, 0).unwrap_or(addr)]
    } else if v6 {
        vec![addr.trunc()]
    } else {
        vec![addr.trunc(), IpNet::from(IpAddr::V4(Ipv4Addr::LOCALHOST))]
    };
    for from in sources {
        out.push(Entry {
            key: Key::Hairpin {
                from,
                to: addr.addr(),
            },
            target: None,
            mapping: None,
        });
    }
    out
}

/// `fib daddr type local`, the key of `map` into consecutive registers, the lookup, the
/// mark, the DNAT.
fn dnat_rule(f: Family, chain: &str, map: &ConcatSet) -> Result<Rule, cni_nft::Error> {
    let (_, daddr_off, alen) = addr_layout(f);
    let words = (alen / 4) as u8;
    let mut b = Rule::builder(f, TABLE, chain).fib_daddr_local();
    let mut next = 0u8;
    if map.name == HOSTIP_MAP {
        b = b.expr(Expr::Payload {
            dreg: Reg::R32(0),
            base: PayloadBase::Network,
            offset: daddr_off,
            len: alen,
        });
        next = words;
    }
    b.expr(Expr::Meta {
        dreg: Reg::R32(next),
        key: MetaKey::L4Proto,
    })
    .expr(Expr::Payload {
        dreg: Reg::R32(next + 1),
        base: PayloadBase::Transport,
        offset: 2,
        len: 2,
    })
    .expr(Expr::Lookup {
        sreg: Reg::R32(0),
        set: map.name.clone(),
        dreg: Some(Reg::R32(VALUE_REG)),
        invert: false,
    })
    .expr(Expr::Meta {
        dreg: Reg::R32(MARK_REG),
        key: MetaKey::Mark,
    })
    .expr(Expr::Bitwise {
        sreg: Reg::R32(MARK_REG),
        dreg: Reg::R32(MARK_REG),
        mask: (!MARK).to_ne_bytes().to_vec(),
        xor: MARK.to_ne_bytes().to_vec(),
    })
    .expr(Expr::MetaSet {
        sreg: Reg::R32(MARK_REG),
        key: MetaKey::Mark,
    })
    .expr(Expr::Nat {
        kind: NatKind::Dnat,
        family: f,
        addr: Some(Reg::R32(VALUE_REG)),
        addr_max: None,
        port: Some(Reg::R32(VALUE_REG + words)),
        port_max: None,
        flags: 0,
    })
    .comment(MARKER)
    .build()
}

/// `meta mark & bit == bit (saddr & /len . daddr) @rcni_hairpin_<len> masquerade`.
fn masquerade_rule(f: Family, len: u8) -> Result<Rule, cni_nft::Error> {
    let (saddr_off, daddr_off, alen) = addr_layout(f);
    let any = if is_v6(f) {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let mask = IpNet::new(any, len)
        .map_err(|_| cni_nft::Error::Invalid(format!("prefix length {len} for {f}")))?
        .netmask();
    Rule::builder(f, TABLE, POSTROUTING)
        .mark(MARK, MARK)
        .expr(Expr::Payload {
            dreg: Reg::R32(0),
            base: PayloadBase::Network,
            offset: saddr_off,
            len: alen,
        })
        .expr(Expr::Bitwise {
            sreg: Reg::R32(0),
            dreg: Reg::R32(0),
            mask: addr_bytes(mask),
            xor: vec![0; alen as usize],
        })
        .expr(Expr::Payload {
            dreg: Reg::R32((alen / 4) as u8),
            base: PayloadBase::Network,
            offset: daddr_off,
            len: alen,
        })
        .expr(Expr::Lookup {
            sreg: Reg::R32(0),
            set: hairpin_set(f, len).name,
            dreg: None,
            invert: false,
        })
        .masquerade()
        .comment(&hairpin_comment(len))
        .build()
}

/// The DNAT base chains and their constant rules, in order.
fn constant_rules(f: Family) -> Result<Vec<(&'static str, Vec<Rule>)>, cni_nft::Error> {
    let mut out = Vec::new();
    for chain in [PREROUTING, OUTPUT] {
        out.push((
            chain,
            vec![
                dnat_rule(f, chain, &hostip_map(f))?,
                dnat_rule(f, chain, &hostports_map(f))?,
            ],
        ));
    }
    Ok(out)
}

/// What the constant part of family `f`'s keyed layout holds.
pub struct SkeletonState {
    /// The DNAT chains hold exactly their marked rules (which proves the table and maps).
    pub dnat: bool,
    /// Prefix lengths whose hairpin rule (and set) exist.
    pub hairpin: Vec<u8>,
}

/// Reads the three base chains (a fixed number of rules, whatever is mapped).
pub fn skeleton_state(nft: &mut Nft, f: Family) -> Result<SkeletonState, cni_nft::Error> {
    let mut dnat = true;
    for chain in [PREROUTING, OUTPUT] {
        let rules = nft.list_rules(f, TABLE, chain)?;
        dnat &= rules.len() == 2 && rules.iter().all(|r| r.comment.as_deref() == Some(MARKER));
    }
    let hairpin = nft
        .list_rules(f, TABLE, POSTROUTING)?
        .iter()
        .filter_map(|r| {
            let c = r.comment.as_deref()?;
            c.strip_prefix(MARKER)?
                .strip_prefix(" hairpin /")?
                .parse()
                .ok()
        })
        .collect();
    Ok(SkeletonState { dnat, hairpin })
}

/// Adds to `b` what `entries` need of the constant layout and `state` lacks: the table, maps
/// and DNAT chains (flushed and refilled in the same transaction, so concurrent writers leave
/// one copy), and the hairpin set and rule of each new prefix length (two concurrent first
/// users of a length may both append its rule; the copy is harmless).
pub fn complete_skeleton(
    b: &mut Batch,
    f: Family,
    state: &SkeletonState,
    entries: &[Entry],
) -> Result<(), cni_nft::Error> {
    if entries.is_empty() {
        return Ok(());
    }
    if !state.dnat {
        b.add_table(f, TABLE)?;
        b.add_concat_set(&hostports_map(f))?;
        b.add_concat_set(&hostip_map(f))?;
        for (chain, rules) in constant_rules(f)? {
            let hook = if chain == PREROUTING {
                Hook::Prerouting
            } else {
                Hook::Output
            };
            b.add_chain(&Chain::base(
                f,
                TABLE,
                chain,
                ChainType::Nat,
                hook,
                DNAT_PRIORITY,
            ))?;
            b.flush_chain(f, TABLE, chain)?;
            for r in &rules {
                b.add_rule(r);
            }
        }
    }
    let mut lens: Vec<u8> = Vec::new();
    for e in entries {
        if let Key::Hairpin { from, .. } = &e.key {
            if !state.hairpin.contains(&from.prefix_len()) && !lens.contains(&from.prefix_len()) {
                lens.push(from.prefix_len());
            }
        }
    }
    if lens.is_empty() {
        return Ok(());
    }
    b.add_table(f, TABLE)?;
    b.add_chain(&Chain::base(
        f,
        TABLE,
        POSTROUTING,
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ))?;
    for len in lens {
        b.add_concat_set(&hairpin_set(f, len))?;
        b.add_rule(&masquerade_rule(f, len)?);
    }
    Ok(())
}

/// The sets an attachment's keys live in, each with the elements `make` builds.
pub(super) fn by_set(
    f: Family,
    keys: impl Iterator<Item = (Key, ConcatElement)>,
) -> Vec<(ConcatSet, Vec<ConcatElement>)> {
    let mut out: Vec<(ConcatSet, Vec<ConcatElement>)> = Vec::new();
    for (k, el) in keys {
        let set = k.set(f);
        match out.iter_mut().find(|(s, _)| s.name == set.name) {
            Some((_, els)) => els.push(el),
            None => out.push((set, vec![el])),
        }
    }
    out
}

/// Adds to `b` the attachment's elements (exclusively), tagged with its comment.
pub fn add_entries(
    b: &mut Batch,
    f: Family,
    tag: &AttachmentId,
    entries: &[Entry],
) -> Result<(), cni_nft::Error> {
    let comment = tag.comment();
    let elems = entries.iter().map(|e| (e.key.clone(), e.element(&comment)));
    for (set, elems) in by_set(f, elems) {
        b.add_concat_elements(&set, &elems, true)?;
    }
    Ok(())
}

/// How an entry's key looks in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Present, owned by the attachment; `true` when its value is the expected one.
    Ours(bool),
    /// Present, owned by someone else (the element's comment).
    Other(Option<String>),
    Missing,
}

/// Looks one entry's key up (one request, whatever the set holds).
pub fn probe(
    nft: &mut Nft,
    f: Family,
    tag: &AttachmentId,
    e: &Entry,
) -> Result<Found, cni_nft::Error> {
    let Some(el) = nft.get_concat_element(&e.key.set(f), &e.key.bytes(), None)? else {
        return Ok(Found::Missing);
    };
    let owned = el
        .comment
        .as_deref()
        .is_some_and(|c| c.starts_with(&tag.prefix()));
    if owned {
        Ok(Found::Ours(el.data == e.value()))
    } else {
        Ok(Found::Other(el.comment))
    }
}

#[cfg(test)]
fn texts(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.key.text()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portmap::conf::test_support::{conf, mapping};

    #[test]
    fn entries_per_family_with_hairpin_sources() {
        let maps = [
            mapping(8080, None),
            mapping(8080, None),
            mapping(9090, Some("198.18.0.1")),
            mapping(7070, Some("fd00::1")),
        ];
        let v4 = entries(
            &conf(true, false),
            "198.19.128.5/20".parse().unwrap(),
            &maps,
        );
        assert_eq!(
            texts(&v4),
            [
                "hp tcp 8080",
                "hip 198.18.0.1 tcp 9090",
                "hair 198.19.128.0/20 198.19.128.5",
                "hair 127.0.0.1/32 198.19.128.5"
            ]
        );
        let v6 = entries(&conf(true, true), "fd00::5/64".parse().unwrap(), &maps);
        assert_eq!(
            texts(&v6),
            ["hp tcp 8080", "hip fd00::1 tcp 7070", "hair ::/0 fd00::5"]
        );
        assert!(entries(
            &conf(false, false),
            "198.18.128.2/24".parse().unwrap(),
            &maps
        )
        .iter()
        .all(|e| e.target.is_some()));
        assert!(entries(&conf(true, false), "198.18.128.2/24".parse().unwrap(), &[]).is_empty());
    }

    #[test]
    fn index_text_round_trips_and_rejects_garbage() {
        for e in entries(
            &conf(true, false),
            "198.19.128.5/20".parse().unwrap(),
            &[mapping(1, None), mapping(65535, Some("198.18.0.1"))],
        ) {
            assert_eq!(Key::parse(&e.key.text()), Some(e.key.clone()));
        }
        for bad in [
            "",
            "hp tcp",
            "hp icmp 1",
            "hip x tcp 1",
            "hair 1.2.3.4 x",
            "hp tcp 70000",
        ] {
            assert_eq!(Key::parse(bad), None, "{bad}");
        }
        // The longest IPv6 line still fits a comment after the 33-byte prefix.
        let k = Key::Hairpin {
            from: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120"
                .parse()
                .unwrap(),
            to: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
        };
        assert!(33 + 1 + k.text().len() <= cni_nft::MAX_COMMENT_LEN);
    }

    #[test]
    fn element_bytes() {
        let k = Key::HostIpPort {
            ip: "198.18.0.1".parse().unwrap(),
            proto: L4Proto::Udp,
            port: 53,
        };
        assert_eq!(k.bytes(), [198, 18, 0, 1, 17, 0, 0, 0, 0, 53, 0, 0]);
        let k = Key::Hairpin {
            from: "198.19.128.0/20".parse().unwrap(),
            to: "198.19.128.5".parse().unwrap(),
        };
        assert_eq!(k.bytes(), [198, 19, 128, 0, 198, 19, 128, 5]);
        assert_eq!(k.set(Family::Ip).name, "rcni_hairpin_20");
        let e = &entries(
            &conf(false, false),
            "198.18.128.2/24".parse().unwrap(),
            &[mapping(8080, None)],
        )[0];
        assert_eq!(e.value().unwrap(), [198, 18, 128, 2, 0, 80, 0, 0]);
    }

    #[test]
    fn constant_rules_keep_key_value_and_mark_registers_apart() {
        for f in [Family::Ip, Family::Ip6] {
            let rules = constant_rules(f).unwrap();
            assert_eq!(rules.len(), 2);
            let dnat = &rules[0].1[0];
            assert!(dnat.exprs().iter().any(|e| matches!(
                e,
                Expr::Nat { port: Some(Reg::R32(p)), .. } if *p == VALUE_REG + if is_v6(f) { 4 } else { 1 }
            )));
            assert_eq!(dnat.comment(), Some(MARKER));
        }
        let maps = [mapping(8080, None)];
        let all = entries(
            &conf(true, false),
            "198.19.128.5/20".parse().unwrap(),
            &maps,
        );
        let mut a = Batch::new();
        let empty = SkeletonState {
            dnat: false,
            hairpin: vec![],
        };
        complete_skeleton(&mut a, Family::Ip, &empty, &all).unwrap();
        // table, 2 maps, 2 x (chain, flush, 2 rules); table, postrouting, 2 x (set, rule)
        assert_eq!(a.len(), 1 + 2 + 8 + 2 + 4);
        let mut b = Batch::new();
        let ready = SkeletonState {
            dnat: true,
            hairpin: vec![20, 32],
        };
        complete_skeleton(&mut b, Family::Ip, &ready, &all).unwrap();
        assert!(b.is_empty());
        let masq = masquerade_rule(Family::Ip6, 64).unwrap();
        assert!(masq.exprs().iter().any(|e| matches!(
            e,
            Expr::Bitwise { mask, .. } if mask.len() == 16 && mask[..8] == [0xff; 8] && mask[8..] == [0; 8]
        )));
    }

    #[test]
    fn eligibility() {
        let mut c = conf(true, false);
        assert!(eligible(&c, false));
        c.mark_bit = 5;
        assert!(!eligible(&c, true));
    }
}
