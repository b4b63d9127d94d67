//! Cutting a reply datagram into its netlink messages.

use std::fmt;

use crate::consts::NLMSG_HDRLEN;

/// Netlink messages and attributes are padded to 4 bytes.
pub const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// One message of a datagram, its header fields decoded.
#[derive(Debug, Clone, Copy)]
pub struct RawMessage<'a> {
    pub msg_type: u16,
    pub flags: u16,
    pub seq: u32,
    /// Everything after the 16-byte header.
    pub payload: &'a [u8],
    /// The whole message, header included.
    pub bytes: &'a [u8],
}

/// A message length that does not fit the datagram it came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedDatagram {
    pub len: usize,
    pub left: usize,
}

impl fmt::Display for MalformedDatagram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "netlink message length {} does not fit the {} bytes left",
            self.len, self.left
        )
    }
}

impl std::error::Error for MalformedDatagram {}

/// Splits a datagram into its messages. Trailing bytes shorter than a header are ignored, as
/// the kernel never sends them.
pub fn split(mut data: &[u8]) -> Result<Vec<RawMessage<'_>>, MalformedDatagram> {
    let mut out = Vec::new();
    while data.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(MalformedDatagram {
                len,
                left: data.len(),
            });
        }
        out.push(RawMessage {
            msg_type: u16::from_ne_bytes([data[4], data[5]]),
            flags: u16::from_ne_bytes([data[6], data[7]]),
            seq: u32::from_ne_bytes([data[8], data[9], data[10], data[11]]),
            payload: &data[NLMSG_HDRLEN..len],
            bytes: &data[..len],
        });
        data = &data[align(len).min(data.len())..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake;

    #[test]
    fn splits_padded_messages_and_refuses_bad_lengths() {
        let mut datagram = fake::error(7, 1, Some("odd"));
        datagram.extend(fake::done(7));
        let msgs = split(&datagram).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(
            (msgs[0].seq, msgs[0].msg_type),
            (7, crate::consts::NLMSG_ERROR)
        );
        assert_eq!(msgs[1].msg_type, crate::consts::NLMSG_DONE);
        assert_eq!(msgs[1].bytes.len(), NLMSG_HDRLEN + msgs[1].payload.len());
        let mut truncated = fake::done(1);
        truncated[0] = 200;
        assert_eq!(
            split(&truncated).unwrap_err(),
            MalformedDatagram { len: 200, left: 20 }
        );
    }
}
