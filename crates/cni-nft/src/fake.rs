//! The netlink core's recording transport for unit tests without privileges
//! ([`FakeTransport`], and the [`ack`], [`error`] and [`done`] replies), plus the nfnetlink
//! object message [`dump_part`].

pub use cni_netlink::fake::{ack, done, error, FakeTransport};

use crate::sys::*;

/// One multipart dump message of nfnetlink type `msg_type` carrying `attrs` (already encoded).
pub fn dump_part(seq: u32, msg_type: u16, family: u8, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
    let mut out = cni_netlink::fake::header(len, msg_type, NLM_F_MULTIPART, seq);
    out.extend_from_slice(&[family, NFNETLINK_V0, 0, 0]);
    out.extend_from_slice(attrs);
    out.resize(crate::attr::align(out.len()), 0);
    out
}
