//! The netlink plumbing shared by the rtnetlink client (`cni_linux::rtnl`) and the nf_tables
//! client (`cni_nft`); each keeps its own message codec on top of it.
//!
//! * [`Transport`]: the byte pipe a client sends requests over, [`SocketTransport`] for a real
//!   socket of a [`Protocol`], [`fake::FakeTransport`] for unit tests without privileges.
//! * [`Connection`]: a transport and the sequence numbers of the requests sent over it.
//! * [`split`]: a reply datagram cut into its messages ([`RawMessage`]).
//! * [`retry_interrupted_dump`]: the policy for dumps the kernel flags `NLM_F_DUMP_INTR`
//!   (a concurrent change made the listing inconsistent): try again after a growing, jittered
//!   pause, up to [`DUMP_ATTEMPTS`] times.
//!
//! Nothing here depends on the rest of rcni, so `cni-nft` stays usable on its own.

mod connection;
mod dump;
pub mod fake;
mod message;
mod transport;

pub use connection::Connection;
pub use dump::{pause_before_retry, retry_interrupted_dump, Dump, DumpInterrupted, DUMP_ATTEMPTS};
pub use message::{align, split, MalformedDatagram, RawMessage};
pub use transport::{Protocol, SocketTransport, Transport};

/// Numbers from the kernel's `linux/netlink.h` that the framing and the fake use.
pub mod consts {
    pub const NLMSG_HDRLEN: usize = 16;
    pub const NLMSG_NOOP: u16 = 1;
    pub const NLMSG_ERROR: u16 = 2;
    pub const NLMSG_DONE: u16 = 3;
    pub const NLMSG_OVERRUN: u16 = 4;
    pub const NLM_F_REQUEST: u16 = 0x01;
    pub const NLM_F_MULTIPART: u16 = 0x02;
    pub const NLM_F_ACK: u16 = 0x04;
    pub const NLM_F_DUMP_INTR: u16 = 0x10;
    /// In an NLMSG_ERROR reply: the original request was not copied back.
    pub const NLM_F_CAPPED: u16 = 0x100;
    /// In an NLMSG_ERROR reply: extended-ACK TLVs follow.
    pub const NLM_F_ACK_TLVS: u16 = 0x200;
    /// The extended-ACK attribute holding the kernel's error text.
    pub const NLMSGERR_ATTR_MSG: u16 = 1;
}
