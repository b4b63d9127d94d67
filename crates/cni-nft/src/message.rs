//! nfnetlink message framing: `nlmsghdr` + `nfgenmsg` + attributes, and the reply side
//! (splitting datagrams, decoding NLMSG_ERROR with its extended-ACK TLVs).

use crate::attr::{self, align};
use crate::sys::*;
use crate::Error;

/// One nfnetlink request, ready to be framed with a sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NfMsg {
    /// Full netlink message type: `(subsystem << 8) | message`, or a batch marker.
    pub(crate) msg_type: u16,
    /// `NLM_F_*` flags besides `NLM_F_REQUEST`, which is always set.
    pub(crate) flags: u16,
    /// `nfgenmsg.nfgen_family` (an `NFPROTO_*` value).
    pub(crate) family: u8,
    /// `nfgenmsg.res_id` (the subsystem for batch markers, otherwise 0).
    pub(crate) res_id: u16,
    pub(crate) attrs: Vec<u8>,
}

impl NfMsg {
    /// An nf_tables message of kind `NFT_MSG_*`.
    pub(crate) fn nftables(kind: u8, flags: u16, family: u8, attrs: Vec<u8>) -> Self {
        NfMsg {
            msg_type: (NFNL_SUBSYS_NFTABLES << 8) | u16::from(kind),
            flags,
            family,
            res_id: 0,
            attrs,
        }
    }

    /// A batch begin or end marker for the nf_tables subsystem.
    pub(crate) fn batch_marker(msg_type: u16) -> Self {
        NfMsg {
            msg_type,
            flags: 0,
            family: 0,
            res_id: NFNL_SUBSYS_NFTABLES,
            attrs: Vec::new(),
        }
    }

    /// Appends the framed message (padded to 4 bytes) to `out`.
    pub(crate) fn encode_into(&self, seq: u32, out: &mut Vec<u8>) {
        let len = NLMSG_HDRLEN + NFGENMSG_LEN + self.attrs.len();
        // A message is bounded by the socket buffer long before u32 overflows.
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        out.extend_from_slice(&len32.to_ne_bytes());
        out.extend_from_slice(&self.msg_type.to_ne_bytes());
        out.extend_from_slice(&(NLM_F_REQUEST | self.flags).to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        out.push(self.family);
        out.push(NFNETLINK_V0);
        out.extend_from_slice(&self.res_id.to_be_bytes());
        out.extend_from_slice(&self.attrs);
        out.resize(align(out.len()), 0);
    }

    pub(crate) fn encode(&self, seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(seq, &mut out);
        out
    }
}

/// One message of a reply datagram.
pub(crate) type Reply<'a> = cni_netlink::RawMessage<'a>;

/// The `nfgenmsg.nfgen_family` of an nfnetlink reply.
pub(crate) fn family(reply: &Reply<'_>) -> Option<u8> {
    reply.payload.first().copied()
}

/// The attributes of an nfnetlink reply (after `nfgenmsg`).
#[cfg(test)]
pub(crate) fn attrs<'a>(reply: &Reply<'a>) -> Result<Vec<attr::Attr<'a>>, Error> {
    let body = reply
        .payload
        .get(NFGENMSG_LEN..)
        .ok_or_else(|| Error::Decode("nfnetlink reply shorter than nfgenmsg".into()))?;
    attr::parse(body)
}

/// Splits a datagram into its netlink messages.
pub(crate) fn split(data: &[u8]) -> Result<Vec<Reply<'_>>, Error> {
    cni_netlink::split(data).map_err(|e| Error::Decode(e.to_string()))
}

/// A decoded NLMSG_ERROR (an ACK when `errno` is 0) or a NLMSG_DONE status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ack {
    /// Positive errno, 0 for success.
    pub(crate) errno: i32,
    /// The kernel's extended-ACK text, if it sent one.
    pub(crate) message: Option<String>,
}

/// Decodes the payload of an NLMSG_ERROR reply whose header carried `flags`.
pub(crate) fn decode_error(flags: u16, payload: &[u8]) -> Result<Ack, Error> {
    let code = payload
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| Error::Decode("truncated netlink error".into()))?;
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        // After the error code comes the offending request: its header only when capped,
        // otherwise the whole message.
        let orig_len = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            payload
                .get(4..8)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .unwrap_or(NLMSG_HDRLEN)
        };
        if let Some(tlvs) = payload.get(4 + align(orig_len)..) {
            message = ext_ack_message(tlvs);
        }
    }
    Ok(Ack {
        errno: code.saturating_neg(),
        message,
    })
}

/// Decodes the payload of a NLMSG_DONE that ends a dump (an errno and optional TLVs).
pub(crate) fn decode_done(flags: u16, payload: &[u8]) -> Ack {
    let code = payload
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    let message = if flags & NLM_F_ACK_TLVS != 0 {
        payload.get(4..).and_then(ext_ack_message)
    } else {
        None
    };
    Ack {
        errno: code.saturating_neg(),
        message,
    }
}

fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    let attrs = attr::parse(tlvs).ok()?;
    let msg = attr::find(&attrs, NLMSGERR_ATTR_MSG).and_then(|a| a.str().ok());
    let offset = attr::find(&attrs, NLMSGERR_ATTR_OFFS).and_then(|a| {
        a.data
            .try_into()
            .ok()
            .map(|b: [u8; 4]| u32::from_ne_bytes(b))
    });
    // nf_tables often flags only the offending attribute (by its offset in the request).
    match (msg, offset) {
        (Some(m), Some(off)) => Some(format!("{m} (attribute at byte {off})")),
        (Some(m), None) => Some(m.to_string()),
        (None, Some(off)) => Some(format!("attribute at byte {off} of the request")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_header_and_nfgenmsg() {
        let mut attrs = attr::AttrWriter::new();
        attrs.str(NFTA_TABLE_NAME, "t");
        let msg = NfMsg::nftables(
            NFT_MSG_NEWTABLE,
            NLM_F_CREATE | NLM_F_ACK,
            2,
            attrs.into_bytes(),
        );
        let bytes = msg.encode(7);
        let mut want = Vec::new();
        want.extend_from_slice(&28u32.to_ne_bytes());
        want.extend_from_slice(&0x0a00u16.to_ne_bytes());
        want.extend_from_slice(&0x0405u16.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[2, 0, 0, 0]);
        want.extend_from_slice(&6u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&[b't', 0, 0, 0]);
        assert_eq!(bytes, want);
    }

    #[test]
    fn batch_marker_carries_subsystem_in_res_id() {
        let bytes = NfMsg::batch_marker(NFNL_MSG_BATCH_BEGIN).encode(1);
        assert_eq!(bytes.len(), 20);
        assert_eq!(&bytes[4..6], &0x10u16.to_ne_bytes());
        assert_eq!(&bytes[16..20], &[0, 0, 0, 10]);
    }

    #[test]
    fn decodes_capped_error_with_message() {
        let mut payload = Vec::new();
        payload.extend_from_slice(&(-2i32).to_ne_bytes());
        payload.extend_from_slice(&[0u8; 16]); // the echoed request header
        let mut tlv = attr::AttrWriter::new();
        tlv.str(NLMSGERR_ATTR_MSG, "no such table");
        payload.extend_from_slice(tlv.as_bytes());
        let ack = decode_error(NLM_F_CAPPED | NLM_F_ACK_TLVS, &payload).unwrap();
        assert_eq!(ack.errno, 2);
        assert_eq!(ack.message.as_deref(), Some("no such table"));
        assert!(decode_error(0, &[1, 2]).is_err());
    }

    #[test]
    fn split_rejects_bad_lengths() {
        let mut bytes = NfMsg::batch_marker(NFNL_MSG_BATCH_END).encode(3);
        assert_eq!(split(&bytes).unwrap().len(), 1);
        bytes[0] = 200;
        assert!(split(&bytes).is_err());
    }
}
