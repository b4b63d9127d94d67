//! A reader of an nfnetlink_log group: the packets that the ruleset's `log group <n>` rules
//! send to userspace (what ulogd reads), over a netlink socket of its own, without any C
//! library.
//!
//! [`NflogGroup::bind`] claims the group in the calling thread's network namespace and sets
//! what the kernel sends (how many bytes of each packet, how many records it gathers before
//! sending, and per-group sequence numbers so that a lost record shows as a gap);
//! [`NflogGroup::receive`] waits for records; dropping the group unbinds it (and closing the
//! socket releases it in any case, so a killed reader never keeps a group bound). A group has
//! one reader per namespace: a second bind fails with [`Error::Kernel`] `EPERM` (another
//! socket holds it) or `EBUSY` (this one does).
//!
//! The protocol is `linux/netfilter/nfnetlink_log.h`: `NFULNL_MSG_CONFIG` requests (a
//! command, the copy mode and range, the buffer size, the flush timeout, the queue
//! threshold, the flags) and `NFULNL_MSG_PACKET` records ([`LogRecord`]).

mod packet;
mod record;

use std::io;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::attr::AttrWriter;
use crate::message::{self, NfMsg};
use crate::sys::*;
use crate::Error;

pub use packet::{PacketHeaders, TcpFlags, Transport};
pub use record::LogRecord;

const NFNL_SUBSYS_ULOG: u16 = 4;
const NFULNL_MSG_PACKET: u16 = 0;
const NFULNL_MSG_CONFIG: u16 = 1;
const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_NLBUFSIZ: u16 = 3;
const NFULA_CFG_TIMEOUT: u16 = 4;
const NFULA_CFG_QTHRESH: u16 = 5;
const NFULA_CFG_FLAGS: u16 = 6;
const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_CFG_CMD_UNBIND: u8 = 2;
const NFULNL_COPY_META: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;
const NFULNL_CFG_F_SEQ: u16 = 1;
/// The largest batch buffer the kernel accepts (`nfulnl_set_nlbufsiz`).
const MAX_KERNEL_BUFFER: u32 = 131_072;

/// What the kernel sends to the reader of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NflogOptions {
    /// Bytes of each packet copied, from its network header (0: none, metadata only). A rule's
    /// own snap length can copy less.
    pub copy_range: u16,
    /// Records the kernel gathers into one datagram before sending it.
    pub batch: u32,
    /// How long a record may wait for its batch to fill.
    pub flush_after: Duration,
    /// The kernel's buffer for one batch (at most 128 KiB).
    pub kernel_buffer: u32,
    /// The socket's receive buffer: the records that may wait for the reader.
    pub socket_buffer: usize,
}

impl Default for NflogOptions {
    /// Enough of each packet for its IP and transport headers (128 bytes), batches of 32
    /// records sent at least every 50 ms, a 64 KiB kernel buffer and 4 MiB of socket buffer.
    fn default() -> Self {
        NflogOptions {
            copy_range: 128,
            batch: 32,
            flush_after: Duration::from_millis(50),
            kernel_buffer: 65_536,
            socket_buffer: 4 << 20,
        }
    }
}

/// What one [`NflogGroup::receive`] took.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Received {
    pub records: Vec<LogRecord>,
    /// Records the kernel built but the reader never got (the socket buffer overflowed),
    /// from the gaps in the group's sequence numbers.
    pub lost: u64,
    /// Times the socket reported an overflow (`ENOBUFS`); the gap after it says how many.
    pub overflows: u64,
}

/// A bound nfnetlink_log group; unbound on drop.
#[derive(Debug)]
pub struct NflogGroup {
    socket: Socket,
    group: u16,
    seq: u32,
    /// The sequence number the next record should carry.
    next_record: Option<u32>,
    /// Records that came while waiting for an acknowledgement.
    early: Vec<LogRecord>,
    buf: Vec<u8>,
}

impl NflogGroup {
    /// Binds `group` in the calling thread's network namespace, configured by `options`.
    pub fn bind(group: u16, options: &NflogOptions) -> Result<NflogGroup, Error> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(Error::Io)?;
        socket.bind_auto().map_err(Error::Io)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(Error::Io)?;
        if setsockopt(&socket, sockopt::RcvBufForce, &options.socket_buffer).is_err() {
            setsockopt(&socket, sockopt::RcvBuf, &options.socket_buffer)
                .map_err(|e| Error::Io(e.into()))?;
        }
        let mut g = NflogGroup {
            socket,
            group,
            seq: 0,
            next_record: None,
            early: Vec::new(),
            buf: vec![0; MAX_KERNEL_BUFFER as usize * 2],
        };
        // One request: the kernel binds first, then applies the rest, all or nothing.
        let mut a = AttrWriter::new();
        a.bytes(NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND]);
        configure(&mut a, options);
        g.request(a, &format!("bind nflog group {group}"))?;
        Ok(g)
    }

    /// The group bound.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// Waits up to `timeout` for records and takes every one already queued (up to a bound,
    /// so that a flood still lets the caller look up between calls).
    pub fn receive(&mut self, timeout: Duration) -> Result<Received, Error> {
        let mut out = Received {
            records: std::mem::take(&mut self.early),
            ..Received::default()
        };
        // A zero SO_RCVTIMEO would mean "forever".
        let micros =
            i64::try_from(timeout.max(Duration::from_millis(1)).as_micros()).unwrap_or(i64::MAX);
        setsockopt(
            &self.socket,
            sockopt::ReceiveTimeout,
            &TimeVal::microseconds(micros),
        )
        .map_err(|e| Error::Io(e.into()))?;
        let mut flags = 0;
        for _ in 0..64 {
            match self.recv_datagram(flags) {
                Ok(Some(n)) => self.take_datagram(n, &mut out)?,
                Ok(None) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => out.overflows += 1,
                Err(e) => return Err(Error::Io(e)),
            }
            flags = libc::MSG_DONTWAIT;
        }
        out.lost += count_gaps(&mut self.next_record, &out.records);
        Ok(out)
    }

    /// One datagram into the buffer: its length, or `None` when none came in time.
    fn recv_datagram(&mut self, flags: i32) -> io::Result<Option<usize>> {
        loop {
            match self
                .socket
                .recv(&mut &mut self.buf[..], flags | libc::MSG_TRUNC)
            {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Decodes the records of a datagram of `n` bytes (a cut datagram keeps what fits: the
    /// sequence numbers count the rest as lost).
    fn take_datagram(&mut self, n: usize, out: &mut Received) -> Result<(), Error> {
        let data = &self.buf[..n.min(self.buf.len())];
        let messages = match message::split(data) {
            Ok(m) => m,
            // A datagram cut by the buffer: its whole messages are still readable.
            Err(_) if n > self.buf.len() => Vec::new(),
            Err(e) => return Err(e),
        };
        for m in messages {
            if m.msg_type == (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET {
                out.records.push(LogRecord::decode(m.payload)?);
            }
        }
        Ok(())
    }

    /// Sends one config request for the group and waits for its acknowledgement.
    fn request(&mut self, attrs: AttrWriter, what: &str) -> Result<(), Error> {
        self.seq = self.seq.wrapping_add(1).max(1);
        let msg = config_message(self.group, attrs.finish(what)?, NLM_F_ACK);
        let seq = self.seq;
        self.socket.send(&msg.encode(seq), 0).map_err(Error::Io)?;
        loop {
            let n = self
                .recv_datagram(0)
                .map_err(Error::Io)?
                .ok_or_else(|| Error::Decode(format!("{what}: no acknowledgement")))?;
            let data = self.buf[..n.min(self.buf.len())].to_vec();
            for m in message::split(&data)? {
                if m.msg_type == (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET {
                    self.early.push(LogRecord::decode(m.payload)?);
                    continue;
                }
                if m.msg_type != NLMSG_ERROR || m.seq != seq {
                    continue;
                }
                let ack = message::decode_error(m.flags, m.payload)?;
                if ack.errno == 0 {
                    return Ok(());
                }
                return Err(Error::Kernel {
                    what: what.to_string(),
                    errno: ack.errno,
                    message: ack.message,
                });
            }
        }
    }
}

impl Drop for NflogGroup {
    /// Unbinds the group (best effort: closing the socket releases it too).
    fn drop(&mut self) {
        let mut a = AttrWriter::new();
        a.bytes(NFULA_CFG_CMD, &[NFULNL_CFG_CMD_UNBIND]);
        // Three bytes of attribute always fit.
        if let Ok(attrs) = a.finish("unbind") {
            let msg = config_message(self.group, attrs, 0);
            let _ = self.socket.send(&msg.encode(self.seq.wrapping_add(1)), 0);
        }
    }
}

/// The records missing between the sequence numbers of `records`, the first expected to
/// carry `next` (updated past the last).
fn count_gaps(next: &mut Option<u32>, records: &[LogRecord]) -> u64 {
    let mut lost = 0;
    for r in records {
        let Some(seq) = r.seq else { continue };
        if let Some(expected) = *next {
            // A number before the expected one (never sent by the kernel) counts nothing.
            let gap = seq.wrapping_sub(expected);
            lost += u64::from(if gap < u32::MAX / 2 { gap } else { 0 });
        }
        *next = Some(seq.wrapping_add(1));
    }
    lost
}

/// A config request for `group` (`nfgenmsg.res_id`, family unspecified).
fn config_message(group: u16, attrs: Vec<u8>, flags: u16) -> NfMsg {
    NfMsg {
        msg_type: (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG,
        flags,
        family: 0,
        res_id: group,
        attrs,
    }
}

/// The copy mode, buffer, timeout, threshold and flags of `options`.
fn configure(a: &mut AttrWriter, options: &NflogOptions) {
    // struct nfulnl_msg_config_mode { __be32 copy_range; __u8 copy_mode; __u8 _pad; }, packed.
    let mode = if options.copy_range == 0 {
        NFULNL_COPY_META
    } else {
        NFULNL_COPY_PACKET
    };
    let mut m = u32::from(options.copy_range).to_be_bytes().to_vec();
    m.extend([mode, 0]);
    let hundredths = u32::try_from(options.flush_after.as_millis() / 10).unwrap_or(u32::MAX);
    a.bytes(NFULA_CFG_MODE, &m)
        .be32(
            NFULA_CFG_NLBUFSIZ,
            options.kernel_buffer.min(MAX_KERNEL_BUFFER),
        )
        .be32(NFULA_CFG_TIMEOUT, hundredths)
        .be32(NFULA_CFG_QTHRESH, options.batch.max(1))
        .be16(NFULA_CFG_FLAGS, NFULNL_CFG_F_SEQ);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr;

    #[test]
    fn the_bind_request_names_the_group_and_carries_the_whole_config() {
        let mut a = AttrWriter::new();
        a.bytes(NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND]);
        configure(&mut a, &NflogOptions::default());
        let bytes = config_message(4242, a.into_bytes(), NLM_F_ACK).encode(1);
        let m = message::split(&bytes).unwrap()[0];
        assert_eq!(m.msg_type, 0x0401);
        assert_eq!(&m.payload[..4], &[0, 0, 0x10, 0x92]);
        let attrs = attr::parse(&m.payload[4..]).unwrap();
        let get = |ty| attr::find(&attrs, ty).unwrap();
        assert_eq!(get(NFULA_CFG_CMD).data, [NFULNL_CFG_CMD_BIND]);
        assert_eq!(
            get(NFULA_CFG_MODE).data,
            [0, 0, 0, 128, NFULNL_COPY_PACKET, 0]
        );
        assert_eq!(get(NFULA_CFG_TIMEOUT).be32().unwrap(), 5);
        assert_eq!(get(NFULA_CFG_QTHRESH).be32().unwrap(), 32);
        assert_eq!(get(NFULA_CFG_FLAGS).be16().unwrap(), NFULNL_CFG_F_SEQ);
    }

    #[test]
    fn gaps_in_the_sequence_numbers_count_as_lost() {
        let packet = [0x45u8; 20];
        let record =
            |seq| LogRecord::decode(&record::tests::packet_message(1, "p", seq, &packet)).unwrap();
        let mut next = None;
        assert_eq!(count_gaps(&mut next, &[record(3), record(4), record(7)]), 2);
        assert_eq!(count_gaps(&mut next, &[record(8)]), 0);
        assert_eq!(count_gaps(&mut next, &[record(u32::MAX - 1)]), 0);
        assert_eq!(count_gaps(&mut next, &[record(1)]), 2);
    }
}
