//! A recording [`Transport`] for unit tests: it keeps every request sent and answers with
//! replies queued in advance. Each queued reply is stamped with the sequence number of the
//! latest request, so tests only describe payloads.
//!
//! ```
//! use cni_linux::rtnl::{fake::FakeTransport, Handle};
//! let fake = FakeTransport::new();
//! fake.push_ack();
//! let mut handle = Handle::with_transport(Box::new(fake.clone()));
//! handle.set_link_up(3).unwrap();
//! assert_eq!(fake.sent().len(), 1);
//! ```

use std::collections::VecDeque;
use std::io;
use std::num::NonZeroI32;
use std::sync::{Arc, Mutex, MutexGuard};

use netlink_packet_core::{
    DoneMessage, ErrorMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP_INTR,
    NLM_F_MULTIPART,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Transport;

/// One queued reply datagram.
#[derive(Debug, Clone)]
enum Canned {
    Ack,
    Errno(i32),
    /// Messages of a dump, followed by DONE; `interrupted` sets `NLM_F_DUMP_INTR`.
    Dump(Vec<RouteNetlinkMessage>, bool),
    /// A single answer to a GET.
    Single(RouteNetlinkMessage),
    /// Raw bytes, sent as they are.
    Raw(Vec<u8>),
}

#[derive(Debug, Default)]
struct State {
    sent: Vec<Vec<u8>>,
    replies: VecDeque<Canned>,
}

/// Shared, cloneable fake: keep one clone in the test and give another to the handle.
#[derive(Debug, Clone, Default)]
pub struct FakeTransport {
    state: Arc<Mutex<State>>,
}

impl FakeTransport {
    /// An empty fake with no queued replies.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a successful ACK.
    pub fn push_ack(&self) {
        self.lock().replies.push_back(Canned::Ack);
    }

    /// Queues an error reply with the positive `errno`.
    pub fn push_errno(&self, errno: i32) {
        self.lock().replies.push_back(Canned::Errno(errno));
    }

    /// Queues a complete dump (messages, then DONE).
    pub fn push_dump(&self, messages: Vec<RouteNetlinkMessage>) {
        self.lock().replies.push_back(Canned::Dump(messages, false));
    }

    /// Queues a dump flagged as interrupted.
    pub fn push_interrupted_dump(&self, messages: Vec<RouteNetlinkMessage>) {
        self.lock().replies.push_back(Canned::Dump(messages, true));
    }

    /// Queues the single reply of a GET request.
    pub fn push_reply(&self, message: RouteNetlinkMessage) {
        self.lock().replies.push_back(Canned::Single(message));
    }

    /// Queues a raw datagram, sent unchanged (sequence numbers included).
    pub fn push_raw(&self, datagram: Vec<u8>) {
        self.lock().replies.push_back(Canned::Raw(datagram));
    }

    /// Every request sent so far, as raw bytes.
    pub fn sent_raw(&self) -> Vec<Vec<u8>> {
        self.lock().sent.clone()
    }

    /// Every request sent so far, decoded.
    pub fn sent(&self) -> Vec<NetlinkMessage<RouteNetlinkMessage>> {
        self.lock()
            .sent
            .iter()
            .filter_map(|raw| NetlinkMessage::deserialize(raw).ok())
            .collect()
    }

    /// Replies still queued.
    pub fn pending_replies(&self) -> usize {
        self.lock().replies.len()
    }
}

fn encode(seq: u32, flags: u16, payload: NetlinkPayload<RouteNetlinkMessage>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.sequence_number = seq;
    header.flags = flags;
    let mut msg = NetlinkMessage::new(header, payload);
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

fn error_payload(code: i32) -> NetlinkPayload<RouteNetlinkMessage> {
    let mut err = ErrorMessage::default();
    err.code = NonZeroI32::new(code);
    // The kernel echoes the request header; a zeroed one is enough for the client.
    err.header = vec![0u8; 16];
    NetlinkPayload::Error(err)
}

impl Transport for FakeTransport {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.lock().sent.push(request.to_vec());
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        let mut state = self.lock();
        let seq = state
            .sent
            .last()
            .and_then(|r| NetlinkMessage::<RouteNetlinkMessage>::deserialize(r).ok())
            .map(|m| m.header.sequence_number)
            .unwrap_or(0);
        let canned = state.replies.pop_front().ok_or_else(|| {
            io::Error::new(io::ErrorKind::WouldBlock, "fake transport: no reply queued")
        })?;
        Ok(match canned {
            Canned::Ack => encode(seq, 0, error_payload(0)),
            Canned::Errno(errno) => encode(seq, 0, error_payload(-errno)),
            Canned::Single(msg) => encode(seq, 0, NetlinkPayload::InnerMessage(msg)),
            Canned::Raw(bytes) => bytes,
            Canned::Dump(messages, interrupted) => {
                let flags = NLM_F_MULTIPART | if interrupted { NLM_F_DUMP_INTR } else { 0 };
                let mut out = Vec::new();
                for msg in messages {
                    out.extend(encode(seq, flags, NetlinkPayload::InnerMessage(msg)));
                }
                let mut done = DoneMessage::default();
                done.code = 0;
                out.extend(encode(seq, flags, NetlinkPayload::Done(done)));
                out
            }
        })
    }
}
