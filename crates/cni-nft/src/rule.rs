//! Rules and the builder that composes their expressions the way `nft` would.
//!
//! ```
//! use cni_nft::{Family, Rule};
//! let rule = Rule::builder(Family::Inet, "cni_plugins_masquerade", "masq_checks")
//!     .saddr("198.18.128.5".parse::<std::net::IpAddr>().unwrap())
//!     .daddr_not("198.18.128.0/24".parse::<ipnet::IpNet>().unwrap())
//!     .daddr_not("224.0.0.0/4".parse::<ipnet::IpNet>().unwrap())
//!     .masquerade()
//!     .comment("net: mynet, id: 1234")
//!     .build()
//!     .unwrap();
//! assert_eq!(rule.comment(), Some("net: mynet, id: 1234"));
//! ```

use std::net::IpAddr;

use ipnet::IpNet;

use crate::attr::AttrWriter;
use crate::expr::{
    fib_flags, CmpOp, CtKey, Expr, FibResult, Limit, MetaKey, NatKind, ObjectKind, PayloadBase,
    Reg, Verdict,
};
use crate::objects::{addr_bytes, check_name, Family, Set, SetType};
use crate::sys::NFTA_RULE_EXPRESSIONS;
use crate::Error;

/// The longest log prefix the kernel keeps (`NF_LOG_PREFIXLEN` less the NUL).
pub const MAX_LOG_PREFIX_LEN: usize = 127;

/// Comments are cut by attribution's rule, the one every comment writer shares.
pub use cni_attribution::{fit_comment, MAX_COMMENT_LEN};

/// Linux interface names are at most 15 bytes (IFNAMSIZ less the NUL).
const IFNAMSIZ: usize = 16;

/// A transport protocol for port matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// SCTP (132).
    Sctp,
}

impl L4Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4Proto::Tcp => 6,
            L4Proto::Udp => 17,
            L4Proto::Sctp => 132,
        }
    }

    /// Parses `tcp`, `udp` or `sctp` (any case), as found in CNI port mappings.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "tcp" => Some(L4Proto::Tcp),
            "udp" => Some(L4Proto::Udp),
            "sctp" => Some(L4Proto::Sctp),
            _ => None,
        }
    }
}

/// A rule ready to be added by a [`crate::Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub(crate) family: Family,
    pub(crate) table: String,
    pub(crate) chain: String,
    pub(crate) exprs: Vec<Expr>,
    pub(crate) comment: Option<String>,
    pub(crate) position: Option<u64>,
}

impl Rule {
    /// Starts a rule for `chain` of table `family table`.
    pub fn builder(family: Family, table: &str, chain: &str) -> RuleBuilder {
        RuleBuilder {
            rule: Rule {
                family,
                table: table.to_string(),
                chain: chain.to_string(),
                exprs: Vec::new(),
                comment: None,
                position: None,
            },
            error: None,
        }
    }

    /// The expressions, in order.
    pub fn exprs(&self) -> &[Expr] {
        &self.exprs
    }

    /// The comment, if any.
    pub fn comment(&self) -> Option<&str> {
        self.comment.as_deref()
    }

    /// The rule's family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// The rule's table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The rule's chain.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// Writes the expression list attribute of the rule's message.
    pub(crate) fn encode_exprs(&self, a: &mut AttrWriter) {
        a.nested(NFTA_RULE_EXPRESSIONS, |list| {
            for e in &self.exprs {
                e.encode(list);
            }
        });
    }

    /// The userdata bytes `nft` reads the comment from (one TLV, NUL-terminated value).
    pub(crate) fn userdata(&self) -> Option<Vec<u8>> {
        self.comment.as_ref().map(|c| {
            let mut out = Vec::with_capacity(c.len() + 3);
            out.push(crate::sys::NFTNL_UDATA_RULE_COMMENT);
            // Checked in build(): at most MAX_COMMENT_LEN + 1 bytes.
            out.push(u8::try_from(c.len() + 1).unwrap_or(u8::MAX));
            out.extend_from_slice(c.as_bytes());
            out.push(0);
            out
        })
    }
}

/// Composes a [`Rule`]. Matches come first, then statements, then the verdict, in call order.
/// Invalid input (an IPv6 address in an `ip` table, a 20-byte interface name, ...) is
/// remembered and reported by [`RuleBuilder::build`], so calls can be chained.
#[derive(Debug, Clone)]
#[must_use]
pub struct RuleBuilder {
    rule: Rule,
    /// The first invalid input, reported by `build`.
    error: Option<String>,
}

impl RuleBuilder {
    fn fail(&mut self, msg: String) {
        self.error.get_or_insert(msg);
    }

    fn push(mut self, e: Expr) -> Self {
        self.rule.exprs.push(e);
        self
    }

    fn cmp(self, op: CmpOp, data: Vec<u8>) -> Self {
        self.push(Expr::Cmp {
            sreg: Reg::R1,
            op,
            data,
        })
    }

    /// Appends any expression as is.
    pub fn expr(self, e: Expr) -> Self {
        self.push(e)
    }

    /// In `inet` tables, the `meta nfproto` match that must precede an IPv4/IPv6 header match
    /// (`nft` adds the same dependency). `ip`/`ip6` tables need none.
    pub(crate) fn address_family(mut self, addr: IpAddr) -> Self {
        let (family, nfproto) = match addr {
            IpAddr::V4(_) => (Family::Ip, 2u8),
            IpAddr::V6(_) => (Family::Ip6, 10u8),
        };
        match self.rule.family {
            Family::Inet => self
                .push(Expr::Meta {
                    dreg: Reg::R1,
                    key: MetaKey::NfProto,
                })
                .cmp(CmpOp::Eq, vec![nfproto]),
            f if f == family => self,
            f => {
                self.fail(format!("{addr} cannot be matched in a {f} table"));
                self
            }
        }
    }

    fn addr_match(self, net: IpNet, source: bool, op: CmpOp) -> Self {
        let addr = net.network();
        let (offset, len) = match (addr, source) {
            (IpAddr::V4(_), true) => (12, 4),
            (IpAddr::V4(_), false) => (16, 4),
            (IpAddr::V6(_), true) => (8, 16),
            (IpAddr::V6(_), false) => (24, 16),
        };
        let full = net.prefix_len() == net.max_prefix_len();
        let mut b = self.address_family(addr);
        // A /0 equality matches every packet of the family: the family check says it all.
        if net.prefix_len() == 0 && op == CmpOp::Eq {
            return b;
        }
        b = b.push(Expr::Payload {
            dreg: Reg::R1,
            base: PayloadBase::Network,
            offset,
            len,
        });
        if !full {
            let mask = addr_bytes(net.netmask());
            let xor = vec![0; mask.len()];
            b = b.push(Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                mask,
                xor,
            });
        }
        b.cmp(op, addr_bytes(addr))
    }

    /// `ip[6] saddr <net>` (an address converts to a host prefix).
    pub fn saddr(self, net: impl Into<IpNet>) -> Self {
        self.addr_match(net.into(), true, CmpOp::Eq)
    }

    /// `ip[6] saddr != <net>`.
    pub fn saddr_not(self, net: impl Into<IpNet>) -> Self {
        self.addr_match(net.into(), true, CmpOp::Neq)
    }

    /// `ip[6] daddr <net>`.
    pub fn daddr(self, net: impl Into<IpNet>) -> Self {
        self.addr_match(net.into(), false, CmpOp::Eq)
    }

    /// `ip[6] daddr != <net>`.
    pub fn daddr_not(self, net: impl Into<IpNet>) -> Self {
        self.addr_match(net.into(), false, CmpOp::Neq)
    }

    /// `meta l4proto <proto>`.
    pub fn l4proto(self, proto: L4Proto) -> Self {
        self.push(Expr::Meta {
            dreg: Reg::R1,
            key: MetaKey::L4Proto,
        })
        .cmp(CmpOp::Eq, vec![proto.number()])
    }

    fn port_match(self, proto: L4Proto, offset: u32, port: u16) -> Self {
        self.l4proto(proto)
            .push(Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Transport,
                offset,
                len: 2,
            })
            .cmp(CmpOp::Eq, port.to_be_bytes().to_vec())
    }

    /// `<proto> dport <port>`.
    pub fn dport(self, proto: L4Proto, port: u16) -> Self {
        self.port_match(proto, 2, port)
    }

    /// `<proto> dport <lo>-<hi>` (inclusive).
    pub fn dport_range(self, proto: L4Proto, lo: u16, hi: u16) -> Self {
        self.l4proto(proto)
            .push(Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
            })
            .cmp(CmpOp::Gte, lo.to_be_bytes().to_vec())
            .cmp(CmpOp::Lte, hi.to_be_bytes().to_vec())
    }

    /// `<proto> sport <port>`.
    pub fn sport(self, proto: L4Proto, port: u16) -> Self {
        self.port_match(proto, 0, port)
    }

    fn ifname_match(mut self, key: MetaKey, name: &str, op: CmpOp) -> Self {
        if name.is_empty() || name.len() >= IFNAMSIZ || name.contains('\0') {
            self.fail(format!("invalid interface name {name:?}"));
            return self;
        }
        let mut data = name.as_bytes().to_vec();
        data.resize(IFNAMSIZ, 0);
        self.push(Expr::Meta { dreg: Reg::R1, key }).cmp(op, data)
    }

    /// `iifname <name>`.
    pub fn iifname(self, name: &str) -> Self {
        self.ifname_match(MetaKey::IifName, name, CmpOp::Eq)
    }

    /// `iifname != <name>`.
    pub fn iifname_not(self, name: &str) -> Self {
        self.ifname_match(MetaKey::IifName, name, CmpOp::Neq)
    }

    /// `oifname <name>`.
    pub fn oifname(self, name: &str) -> Self {
        self.ifname_match(MetaKey::OifName, name, CmpOp::Eq)
    }

    /// `oifname != <name>`.
    pub fn oifname_not(self, name: &str) -> Self {
        self.ifname_match(MetaKey::OifName, name, CmpOp::Neq)
    }

    /// `ct state <bits>`: matches when any of the [`crate::ct_state`] bits is set.
    pub fn ct_state(self, bits: u32) -> Self {
        self.push(Expr::Ct {
            dreg: Reg::R1,
            key: CtKey::State,
        })
        .push(Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            mask: bits.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        })
        .cmp(CmpOp::Neq, vec![0; 4])
    }

    /// `meta mark & <mask> == <value>`; a mask of `u32::MAX` is a plain `meta mark <value>`.
    pub fn mark(self, value: u32, mask: u32) -> Self {
        let mut b = self.push(Expr::Meta {
            dreg: Reg::R1,
            key: MetaKey::Mark,
        });
        if mask != u32::MAX {
            b = b.push(Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                mask: mask.to_ne_bytes().to_vec(),
                xor: vec![0; 4],
            });
        }
        b.cmp(CmpOp::Eq, (value & mask).to_ne_bytes().to_vec())
    }

    /// `meta mark set <value>`.
    pub fn set_mark(self, value: u32) -> Self {
        self.push(Expr::Immediate {
            dreg: Reg::R1,
            data: value.to_ne_bytes().to_vec(),
        })
        .push(Expr::MetaSet {
            sreg: Reg::R1,
            key: MetaKey::Mark,
        })
    }

    /// `ct mark <value>`.
    pub fn ct_mark(self, value: u32) -> Self {
        self.push(Expr::Ct {
            dreg: Reg::R1,
            key: CtKey::Mark,
        })
        .cmp(CmpOp::Eq, value.to_ne_bytes().to_vec())
    }

    /// `ct mark set <value>`.
    pub fn set_ct_mark(self, value: u32) -> Self {
        self.push(Expr::Immediate {
            dreg: Reg::R1,
            data: value.to_ne_bytes().to_vec(),
        })
        .push(Expr::CtSet {
            sreg: Reg::R1,
            key: CtKey::Mark,
        })
    }

    /// `meta nfproto ipv4|ipv6` for `Family::Ip` / `Family::Ip6` (useful in `inet` tables).
    pub fn nfproto(mut self, family: Family) -> Self {
        let value = match family {
            Family::Ip | Family::Ip6 => family.number(),
            other => {
                self.fail(format!("meta nfproto takes ip or ip6, not {other}"));
                return self;
            }
        };
        self.push(Expr::Meta {
            dreg: Reg::R1,
            key: MetaKey::NfProto,
        })
        .cmp(CmpOp::Eq, vec![value])
    }

    fn lookup(self, set: &Set) -> Self {
        self.push(Expr::Lookup {
            sreg: Reg::R1,
            set: set.name.clone(),
            dreg: None,
            invert: false,
        })
    }

    fn addr_in_set(mut self, set: &Set, source: bool) -> Self {
        let (any, offset, len) = match (set.key, source) {
            (SetType::Ipv4Addr, true) => (IpAddr::from([0u8; 4]), 12, 4),
            (SetType::Ipv4Addr, false) => (IpAddr::from([0u8; 4]), 16, 4),
            (SetType::Ipv6Addr, true) => (IpAddr::from([0u8; 16]), 8, 16),
            (SetType::Ipv6Addr, false) => (IpAddr::from([0u8; 16]), 24, 16),
            (other, _) => {
                self.fail(format!("set {} holds {other:?}, not addresses", set.name));
                return self;
            }
        };
        self.address_family(any)
            .push(Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Network,
                offset,
                len,
            })
            .lookup(set)
    }

    /// `ip[6] saddr @<set>` for a set of IPv4 or IPv6 addresses.
    pub fn saddr_in(self, set: &Set) -> Self {
        self.addr_in_set(set, true)
    }

    /// `ip[6] daddr @<set>` for a set of IPv4 or IPv6 addresses.
    pub fn daddr_in(self, set: &Set) -> Self {
        self.addr_in_set(set, false)
    }

    /// `<proto> dport @<set>` for a set of ports.
    pub fn dport_in(mut self, proto: L4Proto, set: &Set) -> Self {
        if set.key != SetType::InetService {
            self.fail(format!("set {} does not hold ports", set.name));
            return self;
        }
        self.l4proto(proto)
            .push(Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
            })
            .lookup(set)
    }

    /// `fib daddr type local`: the destination is an address of this host.
    pub fn fib_daddr_local(self) -> Self {
        const RTN_LOCAL: u32 = 2;
        self.push(Expr::Fib {
            dreg: Reg::R1,
            result: FibResult::AddrType,
            flags: fib_flags::DADDR,
        })
        .cmp(CmpOp::Eq, RTN_LOCAL.to_ne_bytes().to_vec())
    }

    /// `counter`.
    pub fn counter(self) -> Self {
        self.push(Expr::Counter)
    }

    /// `counter name "<name>"`: counts in the table's named counter (see
    /// [`crate::Batch::add_counter`]).
    pub fn counter_named(mut self, name: &str) -> Self {
        if let Err(e) = check_name("counter", name) {
            self.fail(e.to_string());
        }
        self.push(Expr::ObjRef {
            kind: ObjectKind::Counter,
            name: name.to_string(),
        })
    }

    /// `limit name "<name>"`: the table's named rate limit (see [`crate::Batch::add_limit`]),
    /// shared by every rule naming it; packets over it end the rule here.
    pub fn limit_named(mut self, name: &str) -> Self {
        if let Err(e) = check_name("limit", name) {
            self.fail(e.to_string());
        }
        self.push(Expr::ObjRef {
            kind: ObjectKind::Limit,
            name: name.to_string(),
        })
    }

    /// `limit rate ...` of this rule alone; packets over it end the rule here.
    pub fn limit(self, limit: Limit) -> Self {
        self.push(Expr::Limit(limit))
    }

    /// `log group <group> prefix "<prefix>" snaplen <snaplen>`: the packet goes to the
    /// nfnetlink_log group's reader (see [`crate::nflog`]), and the rule goes on.
    pub fn log_group(mut self, group: u16, prefix: &str, snaplen: u32) -> Self {
        if prefix.len() > MAX_LOG_PREFIX_LEN || prefix.contains('\0') {
            self.fail(format!(
                "log prefix must be at most {MAX_LOG_PREFIX_LEN} bytes without NUL: {prefix:?}"
            ));
        }
        self.push(Expr::Log {
            group,
            prefix: prefix.to_string(),
            snaplen,
        })
    }

    /// `accept`.
    pub fn accept(self) -> Self {
        self.push(Expr::Verdict(Verdict::Accept))
    }

    /// `drop`.
    pub fn drop(self) -> Self {
        self.push(Expr::Verdict(Verdict::Drop))
    }

    /// `return`.
    pub fn ret(self) -> Self {
        self.push(Expr::Verdict(Verdict::Return))
    }

    /// `jump <chain>`.
    pub fn jump(mut self, chain: &str) -> Self {
        if let Err(e) = check_name("chain", chain) {
            self.fail(e.to_string());
        }
        self.push(Expr::Verdict(Verdict::Jump(chain.to_string())))
    }

    /// `goto <chain>`.
    pub fn goto(mut self, chain: &str) -> Self {
        if let Err(e) = check_name("chain", chain) {
            self.fail(e.to_string());
        }
        self.push(Expr::Verdict(Verdict::Goto(chain.to_string())))
    }

    /// `masquerade`.
    pub fn masquerade(self) -> Self {
        self.push(Expr::Masquerade {
            flags: 0,
            ports: None,
        })
    }

    fn nat(mut self, kind: NatKind, addr: IpAddr, port: Option<u16>) -> Self {
        let family = Family::of(addr);
        if !matches!(self.rule.family, Family::Inet) && self.rule.family != family {
            self.fail(format!(
                "cannot NAT to {addr} in a {} table",
                self.rule.family
            ));
            return self;
        }
        let mut b = self.push(Expr::Immediate {
            dreg: Reg::R1,
            data: addr_bytes(addr),
        });
        if let Some(p) = port {
            b = b.push(Expr::Immediate {
                dreg: Reg::R2,
                data: p.to_be_bytes().to_vec(),
            });
        }
        b.push(Expr::Nat {
            kind,
            family,
            addr: Some(Reg::R1),
            addr_max: None,
            port: port.map(|_| Reg::R2),
            port_max: None,
            flags: 0,
        })
    }

    /// `dnat to <addr>[:<port>]` (`dnat ip to` / `dnat ip6 to` in `inet` tables).
    pub fn dnat(self, addr: IpAddr, port: Option<u16>) -> Self {
        self.nat(NatKind::Dnat, addr, port)
    }

    /// `snat to <addr>[:<port>]`.
    pub fn snat(self, addr: IpAddr, port: Option<u16>) -> Self {
        self.nat(NatKind::Snat, addr, port)
    }

    /// `comment "<text>"`, stored in the rule's userdata and shown by `nft list`.
    pub fn comment(mut self, text: &str) -> Self {
        if text.len() > MAX_COMMENT_LEN || text.contains('\0') {
            self.fail(format!(
                "comment must be at most {MAX_COMMENT_LEN} bytes without NUL: {text:?}"
            ));
        }
        self.rule.comment = Some(text.to_string());
        self
    }

    /// Places the rule relative to the rule with this handle: after it when appended,
    /// before it when inserted.
    pub fn position(mut self, handle: u64) -> Self {
        self.rule.position = Some(handle);
        self
    }

    /// Finishes the rule, or reports the first invalid input.
    pub fn build(self) -> Result<Rule, Error> {
        if let Some(msg) = self.error {
            return Err(Error::Invalid(msg));
        }
        check_name("table", &self.rule.table)?;
        check_name("chain", &self.rule.chain)?;
        // A rule's expressions travel in one attribute with a 16-bit length.
        let mut exprs = AttrWriter::new();
        self.rule.encode_exprs(&mut exprs);
        if let Err(oversize) = exprs.written() {
            let r = &self.rule;
            return Err(oversize.error(&format!("rule {} {} {}", r.family, r.table, r.chain)));
        }
        Ok(self.rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_too_long_for_its_expression_attribute_is_an_error() {
        let mut b = Rule::builder(Family::Ip, "t", "c");
        for _ in 0..4000 {
            b = b.counter();
        }
        match b.build() {
            Err(Error::TooLong { what, attr, len }) => {
                assert_eq!(what, "rule ip t c");
                assert_eq!(attr, crate::sys::NFTA_RULE_EXPRESSIONS);
                assert!(len > 65_535);
            }
            other => panic!("unexpected {other:?}"),
        }

        // A rule that grew after build (only possible inside the crate) is refused by
        // commit, and nothing is sent.
        let mut rule = Rule::builder(Family::Ip, "t", "c").build().unwrap();
        rule.exprs = vec![Expr::Counter; 4000];
        let mut batch = crate::Batch::new();
        batch.add_table(Family::Ip, "t").unwrap();
        batch.add_rule(&rule);
        assert_eq!(batch.len(), 1);
        let fake = crate::fake::FakeTransport::acking();
        let mut nft = crate::Nft::with_transport(Box::new(fake.clone()));
        let err = nft.commit(&batch).unwrap_err();
        assert!(matches!(err, Error::TooLong { .. }), "{err}");
        assert!(err.to_string().starts_with("add rule ip t c"), "{err}");
        assert!(fake.sent().is_empty());
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn ipmasq_rule_composes_like_nft() {
        let rule = Rule::builder(Family::Inet, "t", "c")
            .saddr(ip("198.18.128.5"))
            .daddr_not(net("198.18.128.0/24"))
            .masquerade()
            .build()
            .unwrap();
        let nfproto = [
            Expr::Meta {
                dreg: Reg::R1,
                key: MetaKey::NfProto,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: vec![2],
            },
        ];
        let mut want = nfproto.to_vec();
        want.push(Expr::Payload {
            dreg: Reg::R1,
            base: PayloadBase::Network,
            offset: 12,
            len: 4,
        });
        want.push(Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: vec![198, 18, 128, 5],
        });
        want.extend(nfproto);
        want.push(Expr::Payload {
            dreg: Reg::R1,
            base: PayloadBase::Network,
            offset: 16,
            len: 4,
        });
        want.push(Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            mask: vec![255, 255, 255, 0],
            xor: vec![0; 4],
        });
        want.push(Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: vec![198, 18, 128, 0],
        });
        want.push(Expr::Masquerade {
            flags: 0,
            ports: None,
        });
        assert_eq!(rule.exprs(), want.as_slice());
    }

    #[test]
    fn ip_table_needs_no_family_match_but_rejects_ipv6() {
        let rule = Rule::builder(Family::Ip, "t", "c")
            .daddr(ip("198.18.146.3"))
            .build()
            .unwrap();
        assert_eq!(rule.exprs().len(), 2);
        let err = Rule::builder(Family::Ip, "t", "c")
            .daddr(ip("fd00::1"))
            .accept()
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::Invalid(_)));
        assert!(Rule::builder(Family::Ip, "t", "c")
            .dnat(ip("fd00::1"), None)
            .build()
            .is_err());
    }

    #[test]
    fn zero_prefix_equality_is_only_a_family_check() {
        let rule = Rule::builder(Family::Ip6, "t", "c")
            .saddr(net("::/0"))
            .build()
            .unwrap();
        assert!(rule.exprs().is_empty());
        let rule = Rule::builder(Family::Inet, "t", "c")
            .saddr(net("0.0.0.0/0"))
            .build()
            .unwrap();
        assert_eq!(rule.exprs().len(), 2);
    }

    #[test]
    fn dnat_loads_address_and_port() {
        let rule = Rule::builder(Family::Ip, "t", "c")
            .dport(L4Proto::Tcp, 8080)
            .dnat(ip("198.18.128.2"), Some(80))
            .build()
            .unwrap();
        let e = rule.exprs();
        assert_eq!(e.len(), 7);
        assert_eq!(
            e[3],
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: vec![0x1f, 0x90]
            }
        );
        assert_eq!(
            e[5],
            Expr::Immediate {
                dreg: Reg::R2,
                data: vec![0, 80]
            }
        );
    }

    #[test]
    fn bad_input_is_reported_by_build() {
        assert!(Rule::builder(Family::Ip, "t", "c")
            .iifname("a-very-long-interface-name")
            .build()
            .is_err());
        assert!(Rule::builder(Family::Ip, "t", "c")
            .comment(&"x".repeat(129))
            .build()
            .is_err());
        assert!(Rule::builder(Family::Ip, "", "c").build().is_err());
        assert!(Rule::builder(Family::Ip, "t", "c")
            .jump("")
            .build()
            .is_err());
    }

    #[test]
    fn set_lookups_check_the_key_type() {
        let addrs = Set::new(Family::Inet, "t", "a6", SetType::Ipv6Addr);
        let rule = Rule::builder(Family::Inet, "t", "c")
            .daddr_in(&addrs)
            .build()
            .unwrap();
        assert_eq!(
            rule.exprs()[2],
            Expr::Payload {
                dreg: Reg::R1,
                base: PayloadBase::Network,
                offset: 24,
                len: 16
            }
        );
        assert_eq!(
            rule.exprs()[3],
            Expr::Lookup {
                sreg: Reg::R1,
                set: "a6".into(),
                dreg: None,
                invert: false
            }
        );
        let ports = Set::new(Family::Inet, "t", "p", SetType::InetService);
        assert!(Rule::builder(Family::Inet, "t", "c")
            .saddr_in(&ports)
            .build()
            .is_err());
        assert!(Rule::builder(Family::Inet, "t", "c")
            .dport_in(L4Proto::Tcp, &addrs)
            .build()
            .is_err());
        assert!(Rule::builder(Family::Ip, "t", "c")
            .saddr_in(&addrs)
            .build()
            .is_err());
        assert!(Rule::builder(Family::Inet, "t", "c")
            .nfproto(Family::Arp)
            .build()
            .is_err());
    }

    #[test]
    fn fit_comment_cuts_on_char_boundaries() {
        assert_eq!(fit_comment("a\0b"), "ab");
        let long = "é".repeat(100);
        let fitted = fit_comment(&long);
        assert_eq!(fitted.len(), 128);
        assert!(Rule::builder(Family::Ip, "t", "c")
            .comment(&fitted)
            .build()
            .is_ok());
    }

    #[test]
    fn comment_becomes_nft_userdata_tlv() {
        let rule = Rule::builder(Family::Ip, "t", "c")
            .comment("abc")
            .build()
            .unwrap();
        assert_eq!(rule.userdata().unwrap(), vec![0, 4, b'a', b'b', b'c', 0]);
        assert_eq!(L4Proto::from_name("UDP"), Some(L4Proto::Udp));
        assert_eq!(L4Proto::from_name("icmp"), None);
    }
}
