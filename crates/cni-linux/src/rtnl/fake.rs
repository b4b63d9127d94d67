//! A recording [`Transport`] for unit tests: it keeps every request sent and answers with
//! replies queued in advance (the netlink core's fake, with typed rtnetlink replies). Each queued reply is stamped with the sequence number of the
//! latest request, so tests only describe payloads.
//!
//! ```
//! use cni_linux::rtnl::{fake::FakeTransport, link_change::LinkChange, Handle};
//! let fake = FakeTransport::new();
//! fake.push_ack();
//! let mut handle = Handle::with_transport(Box::new(fake.clone()));
//! handle.change_link(&LinkChange::of(3).up()).unwrap();
//! assert_eq!(fake.sent().len(), 1);
//! ```

use std::io;

use netlink_packet_core::{
    DoneMessage, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP_INTR, NLM_F_MULTIPART,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Transport;

/// Shared, cloneable fake: keep one clone in the test and give another to the handle. It is
/// the netlink core's fake with rtnetlink payloads.
#[derive(Debug, Clone, Default)]
pub struct FakeTransport {
    core: cni_netlink::fake::FakeTransport,
}

impl FakeTransport {
    /// An empty fake with no queued replies.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a successful ACK.
    pub fn push_ack(&self) {
        self.core.queue_for_last_request(cni_netlink::fake::ack);
    }

    /// Queues an error reply with the positive `errno`.
    pub fn push_errno(&self, errno: i32) {
        self.core
            .queue_for_last_request(move |seq| cni_netlink::fake::error(seq, errno, None));
    }

    /// Queues a complete dump (messages, then DONE).
    pub fn push_dump(&self, messages: Vec<RouteNetlinkMessage>) {
        self.core
            .queue_for_last_request(|seq| dump(seq, messages, false));
    }

    /// Queues a dump flagged as interrupted.
    pub fn push_interrupted_dump(&self, messages: Vec<RouteNetlinkMessage>) {
        self.core
            .queue_for_last_request(|seq| dump(seq, messages, true));
    }

    /// Queues the single reply of a GET request.
    pub fn push_reply(&self, message: RouteNetlinkMessage) {
        self.core
            .queue_for_last_request(|seq| encode(seq, 0, NetlinkPayload::InnerMessage(message)));
    }

    /// Queues a raw datagram, sent unchanged (sequence numbers included).
    pub fn push_raw(&self, datagram: Vec<u8>) {
        self.core.queue(datagram);
    }

    /// Every request sent so far, as raw bytes.
    pub fn sent_raw(&self) -> Vec<Vec<u8>> {
        self.core.sent()
    }

    /// Every request sent so far, decoded.
    pub fn sent(&self) -> Vec<NetlinkMessage<RouteNetlinkMessage>> {
        self.core
            .sent()
            .iter()
            .filter_map(|raw| NetlinkMessage::deserialize(raw).ok())
            .collect()
    }

    /// Replies still queued.
    pub fn pending_replies(&self) -> usize {
        self.core.pending_replies()
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

/// The messages of a dump and its DONE, in one datagram.
fn dump(seq: u32, messages: Vec<RouteNetlinkMessage>, interrupted: bool) -> Vec<u8> {
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

impl Transport for FakeTransport {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.core.send(request)
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.core.recv()
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.core.try_recv()
    }
}
