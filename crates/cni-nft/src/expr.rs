//! nf_tables expressions and their netlink encoding.
//!
//! Each [`Expr`] is one kernel expression (`payload`, `meta`, `cmp`, ...) working on the
//! registers. The rule builder ([`crate::RuleBuilder`]) composes them the way `nft` does; this
//! enum is also public so callers can write shapes the builder does not cover.

use crate::attr::AttrWriter;
use crate::objects::Family;
use crate::sys::*;
use crate::Error;

/// A data register. Each holds 16 bytes, enough for an IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reg {
    /// `NFT_REG_1`.
    R1,
    /// `NFT_REG_2`.
    R2,
    /// `NFT_REG_3`.
    R3,
    /// `NFT_REG_4`.
    R4,
    /// `NFT_REG32_00` + n (n < 16): the 4-byte registers that concatenated set keys and map
    /// values span (`R32(0..4)` overlay `R1`, `R32(4..8)` `R2`, and so on).
    R32(u8),
    /// `NFT_REG_VERDICT`: a map lookup into it is a verdict map (`vmap`).
    Verdict,
}

impl Reg {
    fn number(self) -> u32 {
        match self {
            Reg::R1 => 1,
            Reg::R2 => 2,
            Reg::R3 => 3,
            Reg::R4 => 4,
            Reg::R32(n) => 8 + u32::from(n),
            Reg::Verdict => 0,
        }
    }
}

/// Which header a payload offset counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    /// The link-layer header.
    Link,
    /// The network header (IPv4/IPv6).
    Network,
    /// The transport header (TCP/UDP/SCTP...).
    Transport,
}

/// A `meta` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    /// Packet length.
    Len,
    /// Ethertype (`meta protocol`), big-endian u16.
    Protocol,
    /// Packet mark, host-order u32.
    Mark,
    /// Input interface index.
    Iif,
    /// Output interface index.
    Oif,
    /// Input interface name (16 bytes).
    IifName,
    /// Output interface name (16 bytes).
    OifName,
    /// Netfilter family of the packet (`meta nfproto`), one byte.
    NfProto,
    /// Transport protocol (`meta l4proto`), one byte.
    L4Proto,
}

impl MetaKey {
    pub(crate) fn number(self) -> u32 {
        match self {
            MetaKey::Len => 0,
            MetaKey::Protocol => 1,
            MetaKey::Mark => 3,
            MetaKey::Iif => 4,
            MetaKey::Oif => 5,
            MetaKey::IifName => 6,
            MetaKey::OifName => 7,
            MetaKey::NfProto => 15,
            MetaKey::L4Proto => 16,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`.
    Eq,
    /// `!=`.
    Neq,
    /// `<`.
    Lt,
    /// `<=`.
    Lte,
    /// `>`.
    Gt,
    /// `>=`.
    Gte,
}

impl CmpOp {
    pub(crate) fn number(self) -> u32 {
        match self {
            CmpOp::Eq => 0,
            CmpOp::Neq => 1,
            CmpOp::Lt => 2,
            CmpOp::Lte => 3,
            CmpOp::Gt => 4,
            CmpOp::Gte => 5,
        }
    }
}

/// A conntrack key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtKey {
    /// `ct state`: a host-order u32 bit set, see [`ct_state`].
    State,
    /// `ct direction`.
    Direction,
    /// `ct status`.
    Status,
    /// `ct mark`, host-order u32.
    Mark,
}

impl CtKey {
    fn number(self) -> u32 {
        match self {
            CtKey::State => 0,
            CtKey::Direction => 1,
            CtKey::Status => 2,
            CtKey::Mark => 3,
        }
    }
}

/// Bits of `ct state`.
pub mod ct_state {
    /// `invalid`.
    pub const INVALID: u32 = 1;
    /// `established`.
    pub const ESTABLISHED: u32 = 1 << 1;
    /// `related`.
    pub const RELATED: u32 = 1 << 2;
    /// `new`.
    pub const NEW: u32 = 1 << 3;
    /// `untracked`.
    pub const UNTRACKED: u32 = 1 << 6;
}

/// What a `fib` lookup returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FibResult {
    /// Output interface index.
    Oif,
    /// Output interface name.
    OifName,
    /// Address type (`RTN_*`, host-order u32; `RTN_LOCAL` is 2).
    AddrType,
}

/// `fib` flags: which packet fields the lookup uses.
pub mod fib_flags {
    /// Look up the source address.
    pub const SADDR: u32 = 1;
    /// Look up the destination address.
    pub const DADDR: u32 = 2;
    /// Use the packet mark.
    pub const MARK: u32 = 4;
    /// Use the input interface.
    pub const IIF: u32 = 8;
    /// Use the output interface.
    pub const OIF: u32 = 16;
}

/// A verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `continue`.
    Continue,
    /// `return`.
    Return,
    /// `jump <chain>`.
    Jump(String),
    /// `goto <chain>`.
    Goto(String),
}

impl Verdict {
    fn code(&self) -> i32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
            Verdict::Continue => -1,
            Verdict::Jump(_) => -3,
            Verdict::Goto(_) => -4,
            Verdict::Return => -5,
        }
    }

    fn chain(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }

    /// The verdict of a code and, for jumps, a chain, as the kernel lists them.
    pub(crate) fn decode(code: i32, chain: Option<String>) -> Result<Verdict, Error> {
        Ok(match (code, chain) {
            (0, _) => Verdict::Drop,
            (1, _) => Verdict::Accept,
            (-1, _) => Verdict::Continue,
            (-5, _) => Verdict::Return,
            (-3, Some(c)) => Verdict::Jump(c),
            (-4, Some(c)) => Verdict::Goto(c),
            (code, chain) => {
                return Err(Error::Decode(format!(
                    "verdict code {code} with chain {chain:?}"
                )))
            }
        })
    }

    /// The inside of an `NFTA_DATA_VERDICT` attribute: the code and, for jumps, the chain.
    pub(crate) fn encode_attrs(&self, v: &mut AttrWriter) {
        v.be32(NFTA_VERDICT_CODE, self.code() as u32);
        if let Some(chain) = self.chain() {
            v.str(NFTA_VERDICT_CHAIN, chain);
        }
    }
}

/// The kind of a named stateful object (`NFT_OBJECT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// Packets and bytes.
    Counter,
    /// A token bucket.
    Limit,
}

impl ObjectKind {
    pub(crate) fn number(self) -> u32 {
        match self {
            ObjectKind::Counter => 1,
            ObjectKind::Limit => 4,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ObjectKind::Counter => "counter",
            ObjectKind::Limit => "limit",
        }
    }
}

/// A packet rate limit: `rate` packets per `per_seconds`, with bursts of `burst` packets
/// above it. Packets over the limit end the rule they meet it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Packets per period.
    pub rate: u64,
    /// The period in seconds (1: per second, 60: per minute).
    pub per_seconds: u64,
    /// Packets let through at once above the rate.
    pub burst: u32,
}

impl Limit {
    /// `rate` packets per second with a burst of `burst`.
    pub fn per_second(rate: u64, burst: u32) -> Limit {
        Limit {
            rate,
            per_seconds: 1,
            burst,
        }
    }

    pub(crate) fn encode_data(&self, d: &mut AttrWriter) {
        d.be64(NFTA_LIMIT_RATE, self.rate)
            .be64(NFTA_LIMIT_UNIT, self.per_seconds)
            .be32(NFTA_LIMIT_BURST, self.burst)
            .be32(NFTA_LIMIT_TYPE, 0); // NFT_LIMIT_PKTS
    }
}

/// `snat` or `dnat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// Source NAT.
    Snat,
    /// Destination NAT.
    Dnat,
}

/// One nf_tables expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Load `len` bytes at `offset` from the `base` header into `dreg`.
    Payload {
        /// Destination register.
        dreg: Reg,
        /// Header.
        base: PayloadBase,
        /// Byte offset in that header.
        offset: u32,
        /// Number of bytes.
        len: u32,
    },
    /// Load a meta key into `dreg`.
    Meta {
        /// Destination register.
        dreg: Reg,
        /// Key.
        key: MetaKey,
    },
    /// Set a meta key (for example the mark) from `sreg`.
    MetaSet {
        /// Source register.
        sreg: Reg,
        /// Key.
        key: MetaKey,
    },
    /// Compare `sreg` with `data`; the rule stops here when false.
    Cmp {
        /// Register compared.
        sreg: Reg,
        /// Operator.
        op: CmpOp,
        /// Bytes compared against (the length of the value in the register).
        data: Vec<u8>,
    },
    /// `dreg = (sreg & mask) ^ xor`; `mask` and `xor` have the same length.
    Bitwise {
        /// Source register.
        sreg: Reg,
        /// Destination register.
        dreg: Reg,
        /// Mask.
        mask: Vec<u8>,
        /// Xor.
        xor: Vec<u8>,
    },
    /// Load constant bytes into `dreg`.
    Immediate {
        /// Destination register.
        dreg: Reg,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Set the verdict.
    Verdict(Verdict),
    /// Test whether `sreg` is in the named set (or load the mapped value into `dreg`).
    Lookup {
        /// Register holding the key.
        sreg: Reg,
        /// Set name (in the rule's table).
        set: String,
        /// For maps: where the value goes.
        dreg: Option<Reg>,
        /// Match when the key is *not* in the set.
        invert: bool,
    },
    /// Source or destination NAT to the address (and port) held in registers.
    Nat {
        /// `snat` or `dnat`.
        kind: NatKind,
        /// `ip` or `ip6`: the family of the addresses.
        family: Family,
        /// Register holding the (lowest) address.
        addr: Option<Reg>,
        /// Register holding the highest address of a range.
        addr_max: Option<Reg>,
        /// Register holding the (lowest) port, big-endian u16.
        port: Option<Reg>,
        /// Register holding the highest port of a range.
        port_max: Option<Reg>,
        /// `NF_NAT_RANGE_*` flags (0 lets the kernel derive them).
        flags: u32,
    },
    /// Masquerade (SNAT to the output interface's address).
    Masquerade {
        /// `NF_NAT_RANGE_*` flags, for example random port selection.
        flags: u32,
        /// Registers holding the lowest and highest source ports.
        ports: Option<(Reg, Reg)>,
    },
    /// Load a conntrack key into `dreg`.
    Ct {
        /// Destination register.
        dreg: Reg,
        /// Key.
        key: CtKey,
    },
    /// Set a conntrack key (the mark) from `sreg`.
    CtSet {
        /// Source register.
        sreg: Reg,
        /// Key.
        key: CtKey,
    },
    /// Count packets and bytes.
    Counter,
    /// Route lookup (`fib`).
    Fib {
        /// Destination register.
        dreg: Reg,
        /// What to return.
        result: FibResult,
        /// [`fib_flags`].
        flags: u32,
    },
    /// Send the packet to nfnetlink_log group `group` (`log group <n> prefix "<prefix>"`),
    /// copying at most `snaplen` bytes of it (0: as much as the group's reader asked for).
    Log {
        /// The NFLOG group (a reader binds it with [`crate::nflog::NflogGroup::bind`]).
        group: u16,
        /// Handed to the reader with the packet; at most [`crate::MAX_LOG_PREFIX_LEN`] bytes.
        prefix: String,
        /// Bytes of the packet copied.
        snaplen: u32,
    },
    /// A rate limit of this rule's own (`limit rate <rate>/<unit> burst <burst> packets`): the
    /// rule stops here for packets over the rate.
    Limit(Limit),
    /// A reference to a named stateful object of the table (`counter name "<n>"`, `limit
    /// name "<n>"`): it counts, or limits, for every rule naming it.
    ObjRef {
        /// What kind of object.
        kind: ObjectKind,
        /// Its name.
        name: String,
    },
    /// An x_tables match run through `nft_compat`, the way iptables-nft writes the matches
    /// it has no native encoding for (see [`crate::xt`]).
    XtMatch {
        /// The x_tables match name (`conntrack`).
        name: String,
        /// The match revision.
        rev: u32,
        /// The match's info struct, in host byte order as x_tables defines it.
        info: Vec<u8>,
    },
}

impl Expr {
    /// The kernel's expression name.
    pub fn name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::Lookup { .. } => "lookup",
            Expr::Nat { .. } => "nat",
            Expr::Masquerade { .. } => "masq",
            Expr::Ct { .. } | Expr::CtSet { .. } => "ct",
            Expr::Counter => "counter",
            Expr::Fib { .. } => "fib",
            Expr::Log { .. } => "log",
            Expr::Limit(_) => "limit",
            Expr::ObjRef { .. } => "objref",
            Expr::XtMatch { .. } => "match",
        }
    }

    /// Appends this expression as one `NFTA_LIST_ELEM` of a rule's expression list.
    pub(crate) fn encode(&self, list: &mut AttrWriter) {
        list.nested(NFTA_LIST_ELEM, |e| {
            e.str(NFTA_EXPR_NAME, self.name());
            e.nested(NFTA_EXPR_DATA, |d| self.encode_data(d));
        });
    }

    fn encode_data(&self, d: &mut AttrWriter) {
        match self {
            Expr::Payload {
                dreg,
                base,
                offset,
                len,
            } => {
                let base = match base {
                    PayloadBase::Link => 0,
                    PayloadBase::Network => 1,
                    PayloadBase::Transport => 2,
                };
                d.be32(NFTA_PAYLOAD_DREG, dreg.number())
                    .be32(NFTA_PAYLOAD_BASE, base)
                    .be32(NFTA_PAYLOAD_OFFSET, *offset)
                    .be32(NFTA_PAYLOAD_LEN, *len);
            }
            Expr::Meta { dreg, key } => {
                d.be32(NFTA_META_DREG, dreg.number())
                    .be32(NFTA_META_KEY, key.number());
            }
            Expr::MetaSet { sreg, key } => {
                d.be32(NFTA_META_KEY, key.number())
                    .be32(NFTA_META_SREG, sreg.number());
            }
            Expr::Cmp { sreg, op, data } => {
                d.be32(NFTA_CMP_SREG, sreg.number())
                    .be32(NFTA_CMP_OP, op.number())
                    .nested(NFTA_CMP_DATA, |v| {
                        v.bytes(NFTA_DATA_VALUE, data);
                    });
            }
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
            } => {
                let len = u32::try_from(mask.len()).unwrap_or(u32::MAX);
                d.be32(NFTA_BITWISE_SREG, sreg.number())
                    .be32(NFTA_BITWISE_DREG, dreg.number())
                    .be32(NFTA_BITWISE_LEN, len)
                    .nested(NFTA_BITWISE_MASK, |v| {
                        v.bytes(NFTA_DATA_VALUE, mask);
                    })
                    .nested(NFTA_BITWISE_XOR, |v| {
                        v.bytes(NFTA_DATA_VALUE, xor);
                    });
            }
            Expr::Immediate { dreg, data } => {
                d.be32(NFTA_IMMEDIATE_DREG, dreg.number())
                    .nested(NFTA_IMMEDIATE_DATA, |v| {
                        v.bytes(NFTA_DATA_VALUE, data);
                    });
            }
            Expr::Verdict(verdict) => {
                d.be32(NFTA_IMMEDIATE_DREG, 0) // NFT_REG_VERDICT
                    .nested(NFTA_IMMEDIATE_DATA, |data| {
                        data.nested(NFTA_DATA_VERDICT, |v| verdict.encode_attrs(v));
                    });
            }
            Expr::Lookup {
                sreg,
                set,
                dreg,
                invert,
            } => {
                d.str(NFTA_LOOKUP_SET, set)
                    .be32(NFTA_LOOKUP_SREG, sreg.number());
                if let Some(dreg) = dreg {
                    d.be32(NFTA_LOOKUP_DREG, dreg.number());
                }
                if *invert {
                    d.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
                }
            }
            Expr::Nat {
                kind,
                family,
                addr,
                addr_max,
                port,
                port_max,
                flags,
            } => {
                let kind = match kind {
                    NatKind::Snat => NFT_NAT_SNAT,
                    NatKind::Dnat => NFT_NAT_DNAT,
                };
                d.be32(NFTA_NAT_TYPE, kind)
                    .be32(NFTA_NAT_FAMILY, u32::from(family.number()));
                let regs = [
                    (NFTA_NAT_REG_ADDR_MIN, addr),
                    (NFTA_NAT_REG_ADDR_MAX, addr_max),
                    (NFTA_NAT_REG_PROTO_MIN, port),
                    (NFTA_NAT_REG_PROTO_MAX, port_max),
                ];
                for (ty, reg) in regs {
                    if let Some(reg) = reg {
                        d.be32(ty, reg.number());
                    }
                }
                if *flags != 0 {
                    d.be32(NFTA_NAT_FLAGS, *flags);
                }
            }
            Expr::Masquerade { flags, ports } => {
                if *flags != 0 {
                    d.be32(NFTA_MASQ_FLAGS, *flags);
                }
                if let Some((min, max)) = ports {
                    d.be32(NFTA_MASQ_REG_PROTO_MIN, min.number())
                        .be32(NFTA_MASQ_REG_PROTO_MAX, max.number());
                }
            }
            Expr::Ct { dreg, key } => {
                d.be32(NFTA_CT_DREG, dreg.number())
                    .be32(NFTA_CT_KEY, key.number());
            }
            Expr::CtSet { sreg, key } => {
                d.be32(NFTA_CT_KEY, key.number())
                    .be32(NFTA_CT_SREG, sreg.number());
            }
            Expr::Counter => {}
            Expr::Fib {
                dreg,
                result,
                flags,
            } => {
                let result = match result {
                    FibResult::Oif => 1,
                    FibResult::OifName => 2,
                    FibResult::AddrType => 3,
                };
                d.be32(NFTA_FIB_DREG, dreg.number())
                    .be32(NFTA_FIB_RESULT, result)
                    .be32(NFTA_FIB_FLAGS, *flags);
            }
            Expr::Log {
                group,
                prefix,
                snaplen,
            } => {
                d.be16(NFTA_LOG_GROUP, *group).str(NFTA_LOG_PREFIX, prefix);
                if *snaplen != 0 {
                    d.be32(NFTA_LOG_SNAPLEN, *snaplen);
                }
            }
            Expr::Limit(limit) => limit.encode_data(d),
            Expr::ObjRef { kind, name } => {
                d.be32(NFTA_OBJREF_IMM_TYPE, kind.number())
                    .str(NFTA_OBJREF_IMM_NAME, name);
            }
            Expr::XtMatch { name, rev, info } => {
                d.str(NFTA_MATCH_NAME, name)
                    .be32(NFTA_MATCH_REV, *rev)
                    .bytes(NFTA_MATCH_INFO, info);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(e: &Expr) -> Vec<u8> {
        let mut w = AttrWriter::new();
        e.encode(&mut w);
        w.into_bytes()
    }

    #[test]
    fn verdicts_decode_from_their_code_and_chain() {
        for v in [
            Verdict::Accept,
            Verdict::Drop,
            Verdict::Continue,
            Verdict::Return,
            Verdict::Jump("c".into()),
            Verdict::Goto("c".into()),
        ] {
            assert_eq!(
                Verdict::decode(v.code(), v.chain().map(str::to_string)).unwrap(),
                v
            );
        }
        assert!(Verdict::decode(-3, None).is_err());
        assert!(Verdict::decode(7, None).is_err());
    }

    /// `[len, type]` of an attribute header, host order.
    fn hdr(len: u16, ty: u16) -> Vec<u8> {
        let mut v = len.to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v
    }

    #[test]
    fn payload_golden_bytes() {
        let e = Expr::Payload {
            dreg: Reg::R1,
            base: PayloadBase::Network,
            offset: 12,
            len: 4,
        };
        let mut want = hdr(52, NFTA_LIST_ELEM | NLA_F_NESTED);
        want.extend(hdr(12, NFTA_EXPR_NAME));
        want.extend(b"payload\0");
        want.extend(hdr(36, NFTA_EXPR_DATA | NLA_F_NESTED));
        for (ty, v) in [(1u16, 1u32), (2, 1), (3, 12), (4, 4)] {
            want.extend(hdr(8, ty));
            want.extend(v.to_be_bytes());
        }
        assert_eq!(encoded(&e), want);
    }

    #[test]
    fn jump_verdict_golden_bytes() {
        let e = Expr::Verdict(Verdict::Jump("masq_checks".into()));
        let mut want = hdr(64, NFTA_LIST_ELEM | NLA_F_NESTED);
        want.extend(hdr(14, NFTA_EXPR_NAME));
        want.extend(b"immediate\0\0\0");
        want.extend(hdr(44, NFTA_EXPR_DATA | NLA_F_NESTED));
        want.extend(hdr(8, NFTA_IMMEDIATE_DREG));
        want.extend(0u32.to_be_bytes());
        want.extend(hdr(32, NFTA_IMMEDIATE_DATA | NLA_F_NESTED));
        want.extend(hdr(28, NFTA_DATA_VERDICT | NLA_F_NESTED));
        want.extend(hdr(8, NFTA_VERDICT_CODE));
        want.extend((-3i32).to_be_bytes());
        want.extend(hdr(16, NFTA_VERDICT_CHAIN));
        want.extend(b"masq_checks\0");
        assert_eq!(encoded(&e), want);
    }

    #[test]
    fn cmp_and_masq_golden_bytes() {
        let e = Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: vec![198, 18, 128, 0],
        };
        let mut want = hdr(44, NFTA_LIST_ELEM | NLA_F_NESTED);
        want.extend(hdr(8, NFTA_EXPR_NAME));
        want.extend(b"cmp\0");
        want.extend(hdr(32, NFTA_EXPR_DATA | NLA_F_NESTED));
        want.extend(hdr(8, NFTA_CMP_SREG));
        want.extend(1u32.to_be_bytes());
        want.extend(hdr(8, NFTA_CMP_OP));
        want.extend(1u32.to_be_bytes());
        want.extend(hdr(12, NFTA_CMP_DATA | NLA_F_NESTED));
        want.extend(hdr(8, NFTA_DATA_VALUE));
        want.extend([198, 18, 128, 0]);
        assert_eq!(encoded(&e), want);

        let masq = encoded(&Expr::Masquerade {
            flags: 0,
            ports: None,
        });
        let mut want = hdr(20, NFTA_LIST_ELEM | NLA_F_NESTED);
        want.extend(hdr(9, NFTA_EXPR_NAME));
        want.extend(b"masq\0\0\0\0");
        want.extend(hdr(4, NFTA_EXPR_DATA | NLA_F_NESTED));
        assert_eq!(masq, want);
    }

    #[test]
    fn dnat_names_family_and_registers() {
        let e = Expr::Nat {
            kind: NatKind::Dnat,
            family: Family::Ip,
            addr: Some(Reg::R1),
            addr_max: None,
            port: Some(Reg::R2),
            port_max: None,
            flags: 0,
        };
        let bytes = encoded(&e);
        let outer = crate::attr::parse(&bytes).unwrap();
        let inner = outer[0].nested().unwrap();
        assert_eq!(inner[0].str().unwrap(), "nat");
        let data = inner[1].nested().unwrap();
        let pairs: Vec<(u16, u32)> = data.iter().map(|a| (a.ty, a.be32().unwrap())).collect();
        assert_eq!(
            pairs,
            vec![
                (NFTA_NAT_TYPE, NFT_NAT_DNAT),
                (NFTA_NAT_FAMILY, 2),
                (NFTA_NAT_REG_ADDR_MIN, 1),
                (NFTA_NAT_REG_PROTO_MIN, 2)
            ]
        );
    }
}
