//! One logged packet as nfnetlink_log sends it: an `NFULNL_MSG_PACKET` message whose
//! `nfgenmsg` carries the packet's protocol family and the group, and whose attributes
//! (`NFULA_*`, `linux/netfilter/nfnetlink_log.h`) carry the rule's prefix, the hook, the
//! devices, the kernel's timestamp, the sequence numbers and the copied bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::attr::{self, Attr};
use crate::sys::NFGENMSG_LEN;
use crate::Error;

use super::packet::PacketHeaders;

const NFULA_PACKET_HDR: u16 = 1;
const NFULA_MARK: u16 = 2;
const NFULA_TIMESTAMP: u16 = 3;
const NFULA_IFINDEX_INDEV: u16 = 4;
const NFULA_IFINDEX_OUTDEV: u16 = 5;
const NFULA_IFINDEX_PHYSINDEV: u16 = 6;
const NFULA_IFINDEX_PHYSOUTDEV: u16 = 7;
const NFULA_PAYLOAD: u16 = 9;
const NFULA_PREFIX: u16 = 10;
const NFULA_SEQ: u16 = 12;
const NFULA_SEQ_GLOBAL: u16 = 13;

/// A packet a `log group` rule sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// The packet's protocol family (`NFPROTO_IPV4` 2, `NFPROTO_IPV6` 10, ...).
    pub family: u8,
    /// The group it was sent to.
    pub group: u16,
    /// The logging rule's prefix.
    pub prefix: String,
    /// The netfilter hook it was logged at (`NF_INET_FORWARD` is 2).
    pub hook: Option<u8>,
    pub mark: Option<u32>,
    /// When the packet was received, when the kernel stamped it.
    pub timestamp: Option<SystemTime>,
    /// Input and output interface indexes; the bridge ports for bridged packets.
    pub in_dev: Option<u32>,
    pub out_dev: Option<u32>,
    pub phys_in_dev: Option<u32>,
    pub phys_out_dev: Option<u32>,
    /// The group's own sequence number of this record (with [`super::NflogOptions`]'s
    /// sequence numbers on): a gap means records were lost.
    pub seq: Option<u32>,
    /// The sequence number over every group of the namespace.
    pub seq_global: Option<u32>,
    /// The copied bytes of the packet, from its network header.
    pub payload: Vec<u8>,
}

impl LogRecord {
    /// Decodes the payload (after the netlink header) of a packet message.
    pub(crate) fn decode(payload: &[u8]) -> Result<LogRecord, Error> {
        let head = payload
            .get(..NFGENMSG_LEN)
            .ok_or_else(|| Error::Decode("nflog packet shorter than nfgenmsg".into()))?;
        let attrs = attr::parse(&payload[NFGENMSG_LEN..])?;
        let find = |ty: u16| attr::find(&attrs, ty);
        let be32 = |ty: u16| find(ty).map(|a| a.be32()).transpose();
        Ok(LogRecord {
            family: head[0],
            group: u16::from_be_bytes([head[2], head[3]]),
            prefix: find(NFULA_PREFIX)
                .map(|a| a.str().map(str::to_string))
                .transpose()?
                .unwrap_or_default(),
            hook: find(NFULA_PACKET_HDR).and_then(|a| a.data.get(2).copied()),
            mark: be32(NFULA_MARK)?,
            timestamp: find(NFULA_TIMESTAMP).map(timestamp).transpose()?,
            in_dev: be32(NFULA_IFINDEX_INDEV)?,
            out_dev: be32(NFULA_IFINDEX_OUTDEV)?,
            phys_in_dev: be32(NFULA_IFINDEX_PHYSINDEV)?,
            phys_out_dev: be32(NFULA_IFINDEX_PHYSOUTDEV)?,
            seq: be32(NFULA_SEQ)?,
            seq_global: be32(NFULA_SEQ_GLOBAL)?,
            payload: find(NFULA_PAYLOAD)
                .map(|a| a.data.to_vec())
                .unwrap_or_default(),
        })
    }

    /// The packet's addresses, protocol and ports, as far as the copy holds them.
    pub fn headers(&self) -> Option<PacketHeaders> {
        PacketHeaders::parse(&self.payload)
    }
}

/// `struct nfulnl_msg_packet_timestamp`: big-endian seconds and microseconds.
fn timestamp(a: Attr<'_>) -> Result<SystemTime, Error> {
    let b: [u8; 16] = a
        .data
        .try_into()
        .map_err(|_| Error::Decode(format!("nflog timestamp of {} bytes", a.data.len())))?;
    let secs = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
    let micros = u64::from_be_bytes(b[8..].try_into().unwrap_or_default());
    Ok(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros.min(999_999)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::attr::AttrWriter;

    /// The payload of a packet message as the kernel builds it.
    pub(crate) fn packet_message(group: u16, prefix: &str, seq: u32, packet: &[u8]) -> Vec<u8> {
        let mut out = vec![2, 0];
        out.extend(group.to_be_bytes());
        let mut a = AttrWriter::new();
        a.bytes(NFULA_PACKET_HDR, &[0x08, 0x00, 2, 0])
            .be32(NFULA_IFINDEX_INDEV, 7)
            .be32(NFULA_IFINDEX_PHYSINDEV, 9)
            .str(NFULA_PREFIX, prefix)
            .be32(NFULA_SEQ, seq)
            .bytes(
                NFULA_TIMESTAMP,
                &[1_700_000_000u64.to_be_bytes(), 250_000u64.to_be_bytes()].concat(),
            )
            .bytes(NFULA_PAYLOAD, packet);
        out.extend(a.into_bytes());
        out
    }

    #[test]
    fn a_packet_message_decodes_every_attribute_it_carries() {
        let packet = [
            0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
        ];
        let r = LogRecord::decode(&packet_message(4242, "rcni:deny", 5, &packet)).unwrap();
        assert_eq!((r.family, r.group, r.hook), (2, 4242, Some(2)));
        assert_eq!(r.prefix, "rcni:deny");
        assert_eq!(
            (r.in_dev, r.phys_in_dev, r.out_dev),
            (Some(7), Some(9), None)
        );
        assert_eq!(r.seq, Some(5));
        assert_eq!(
            r.timestamp,
            Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_250))
        );
        assert_eq!(r.headers().unwrap().protocol, 17);
        assert!(LogRecord::decode(&[2, 0]).is_err());
        let mut bad = packet_message(1, "p", 1, &packet);
        bad.truncate(bad.len() - 3);
        assert!(LogRecord::decode(&bad).is_err());
    }
}
