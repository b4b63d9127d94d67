//! nf_tables and conntrack over netlink, with no `nft` binary and no C library at run time.
//!
//! # Public API
//!
//! * [`Nft`] — one `NETLINK_NETFILTER` socket, bound to the network namespace it was opened
//!   in. [`Nft::new`] opens it in the calling thread's namespace; for another namespace open
//!   it on a thread that entered it (with cni-linux: `netns.run(Nft::new)`), then use it from
//!   anywhere, since `Nft` is `Send`. Operations:
//!   * [`Nft::commit`] applies a [`Batch`] atomically: every message is ACKed, and an error
//!     names the message the kernel rejected (`add rule ip cni_hostport hostports (comment
//!     "…")`) with the kernel's extended-ACK text.
//!   * [`Nft::table_exists`], [`Nft::chain_exists`], [`Nft::list_chains`].
//!   * [`Nft::list_rules`] returns each rule of a chain as a [`RuleInfo`] (handle, comment);
//!     [`Nft::list_rule_jumps`] also the chain each rule jumps or goes to, if any.
//!   * [`Nft::delete_rules_with_comment`] / [`Nft::delete_rules_where`]: "select by comment,
//!     delete by handle" in one transaction; missing chains are skipped.
//!   * [`Nft::list_conntrack`], [`Nft::delete_conntrack`] with a [`ConntrackFilter`]
//!     (protocol, addresses, ports), [`Nft::delete_conntrack_entry`].
//! * [`Batch`] — the messages of one transaction: [`Batch::add_table`] (create if missing),
//!   [`Batch::delete_table`], [`Batch::destroy_table`] (delete even if missing),
//!   [`Batch::add_chain`] ([`Chain::regular`] or [`Chain::base`] with [`ChainType`], [`Hook`],
//!   [`priority`] and an optional [`Policy`]), [`Batch::delete_chain`],
//!   [`Batch::flush_chain`], [`Batch::add_rule`] (append), [`Batch::insert_rule`] (prepend;
//!   both relative to a handle with [`RuleBuilder::position`]), [`Batch::delete_rule`] (by
//!   handle), [`Batch::add_set`] / [`Batch::delete_set`] ([`Set`], [`SetType`]) and
//!   [`Batch::add_elements`] / [`Batch::delete_elements`] ([`SetElement`]). Element lists of
//!   any length are split across as many messages of the same transaction as the 16-bit
//!   length of their list attribute needs; a single attribute that cannot fit (one rule's
//!   expressions, one element) is [`Error::TooLong`] from the encoder, never sent cut, and a
//!   batch larger than the socket can send in one datagram is [`Error::BatchTooLarge`].
//! * [`ConcatSet`] / [`ConcatElement`] — sets and maps with concatenated (and interval) keys:
//!   [`Batch::add_concat_set`], [`Batch::add_concat_elements`] (optionally exclusive),
//!   [`Batch::delete_concat_elements`], [`Nft::get_concat_element`] (one element by key, with
//!   its value and comment), [`Nft::get_concat_elements`] (many keys in one request, each a
//!   kernel lookup), [`Nft::list_concat_elements`] (a dump of the whole set); [`concat`] builds keys and values field by field.
//! * [`VerdictMap`] — address-keyed verdict maps: [`Batch::add_verdict_map`],
//!   [`Batch::add_verdict_elements`], [`Batch::delete_verdict_elements`], and
//!   [`RuleBuilder::saddr_vmap`] / [`RuleBuilder::daddr_vmap`] to dispatch on them.
//! * [`Rule::builder`] → [`RuleBuilder`]: `saddr`, `saddr_not`, `daddr`, `daddr_not` (an
//!   address or prefix; in `inet` tables the `meta nfproto` dependency is added like `nft`
//!   does), `l4proto`, `dport`, `sport` ([`L4Proto`]), `iifname[_not]`, `oifname[_not]`,
//!   `ct_state` ([`ct_state`] bits), `mark`, `set_mark`, `fib_daddr_local`, `counter`,
//!   `ct_mark`, `set_ct_mark`, `nfproto`, `saddr_in` / `daddr_in` / `dport_in` (named set
//!   lookups), `counter_named`, `limit_named`, `limit` ([`Limit`]), `log_group`, `accept`,
//!   `drop`, `ret`, `jump`, `goto`, `masquerade`, `dnat`, `snat`, any raw
//!   [`Expr`], `comment` (stored as the userdata `nft list` shows; [`fit_comment`] trims any
//!   text to fit) and `position`. `build()` reports the first invalid input.
//! * Named stateful objects ([`ObjectKind`]): [`Batch::add_counter`], [`Batch::add_limit`],
//!   [`Batch::delete_object`], and [`Nft::counter`] to read a counter in one request.
//! * [`nflog`] — a reader of an nfnetlink_log group ([`nflog::NflogGroup`]): the packets the
//!   ruleset's `log group` rules send, with their prefix, headers and timestamps.
//! * [`Expr`] — the raw expressions (payload, meta, cmp, bitwise, immediate, verdict, lookup,
//!   nat, masq, ct, counter, fib, log, limit, objref, and `nft_compat` x_tables matches) for shapes the builder
//!   lacks; [`xt`] builds the x_tables matches in iptables-nft's encoding
//!   ([`xt::conntrack_state`]), so that `iptables-nft -S` can show the rule.
//! * [`legacy::legacy_filter_present`] — read-only: whether this namespace has an
//!   iptables-legacy (x_tables) `filter` table, whose drops no nf_tables accept overrides.
//! * [`Error`] — `Io`, `Kernel { what, errno, message }` (with [`Error::is_not_found`] and
//!   [`Error::is_exists`]), `DumpInterrupted`, `Decode`, `TooLong`, `BatchTooLarge`, `Invalid`.
//! * [`Transport`] is the socket seam; [`fake::FakeTransport`] records requests and scripts
//!   replies for unit tests without privileges.
//!
//! # Example: the Go ipMasq nftables shape
//!
//! ```no_run
//! use cni_nft::{priority, Batch, Chain, ChainType, Family, Hook, Nft, Rule};
//! # fn main() -> Result<(), cni_nft::Error> {
//! let (t, f) = ("cni_plugins_masquerade", Family::Inet);
//! let mut batch = Batch::new();
//! batch.add_table(f, t)?;
//! batch.add_chain(&Chain::regular(f, t, "masq_checks"))?;
//! batch.add_chain(&Chain::base(f, t, "postrouting", ChainType::Nat, Hook::Postrouting,
//!     priority::SRCNAT))?;
//! batch.add_rule(&Rule::builder(f, t, "masq_checks")
//!     .saddr("198.19.128.5".parse::<std::net::IpAddr>().unwrap())
//!     .daddr_not("198.19.128.0/20".parse::<ipnet::IpNet>().unwrap())
//!     .masquerade()
//!     .comment("net: podman, id: 0123abcd")
//!     .build()?);
//! let mut nft = Nft::new()?;
//! nft.commit(&batch)?;
//! nft.delete_rules_with_comment(f, t, &["masq_checks"], "net: podman, id: 0123abcd")?;
//! # Ok(()) }
//! ```

mod attr;
mod batch;
mod client;
mod concat;
mod conntrack;
mod elements;
mod error;
mod expr;
pub mod fake;
pub mod legacy;
mod list;
mod message;
mod monitor;
pub mod nflog;
mod objects;
mod rule;
mod stateful;
mod sys;
mod transport;
mod vmap;
pub mod xt;

pub use batch::Batch;
pub use client::Nft;
pub use concat::{concat, field_len, ConcatElement, ConcatSet};
pub use conntrack::{ConntrackEntry, ConntrackFilter};
pub use error::Error;
pub use expr::{
    ct_state, fib_flags, CmpOp, CtKey, Expr, FibResult, Limit, MetaKey, NatKind, ObjectKind,
    PayloadBase, Reg, Verdict,
};
pub use list::{ChainInfo, RuleInfo};
pub use monitor::RulesetMonitor;
pub use objects::{
    priority, BaseChain, Chain, ChainType, Family, Hook, Policy, Set, SetElement, SetType,
    MAX_NAME_LEN,
};
pub use rule::{fit_comment, L4Proto, Rule, RuleBuilder, MAX_COMMENT_LEN, MAX_LOG_PREFIX_LEN};
pub use stateful::CounterValue;
pub use transport::{SocketTransport, Transport};
pub use vmap::VerdictMap;
