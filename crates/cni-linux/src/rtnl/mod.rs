//! Synchronous rtnetlink (NETLINK_ROUTE) client.
//!
//! [`Handle`] sends one request at a time over a [`Transport`] and collects the replies:
//! sequence numbers are checked, every change asks for an ACK, dumps are retried when the kernel
//! flags them `NLM_F_DUMP_INTR`, and kernel errors become an [`Error::Kernel`] carrying the errno
//! and the extended-ACK text. The real transport is a `netlink_sys::Socket`
//! ([`SocketTransport`]); [`fake::FakeTransport`] records requests and replays canned replies
//! so message encoding can be unit-tested without privileges.
//!
//! Typed operations live in the submodules: [`link`] (links, veth, bridge, bridge ports and VLANs),
//! [`addr`] (addresses), [`route`] (routes), [`rule`] (FIB rules), [`neigh`] (neighbours), [`tc`] (qdiscs and
//! filters for traffic shaping) and [`virt`] (macvlan, ipvlan, 802.1Q vlan, dummy and VRF links).
//! [`vxlan`] (VXLAN devices) and [`overlay`] (FDB entries, tagged next-hop routes) serve the node
//! agent. They are all methods on [`Handle`].

pub mod addr;
pub mod fake;
pub mod link;
pub mod neigh;
pub mod overlay;
pub mod route;
pub mod rule;
pub mod tc;
pub mod virt;
pub mod vxlan;

mod error;
mod transport;

#[cfg(test)]
mod tests;

pub use error::{Error, KernelError};
pub use transport::{SocketTransport, Transport};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR,
    NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::netns::NetNs;

/// How many times an interrupted dump (`NLM_F_DUMP_INTR`) is attempted before giving up.
/// With 16 pods tearing down at once the link table changes constantly: five immediate
/// retries were all interrupted (the pod soak), so retries are many and paced.
pub(crate) const DUMP_ATTEMPTS: usize = 40;

/// Waits a little longer after each interrupted dump, jittered so that concurrent plugins
/// retrying the same dump do not collide again in lockstep.
fn pause_before_retry(attempt: usize) {
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos() % 1000));
    let step = attempt.min(10) as u64 * 500;
    std::thread::sleep(std::time::Duration::from_micros(step + jitter));
}

/// A netlink route client bound to the namespace its socket was created in.
pub struct Handle {
    transport: Box<dyn Transport>,
    seq: u32,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("seq", &self.seq).finish()
    }
}

impl Handle {
    /// Opens a route socket in the calling thread's network namespace.
    pub fn new() -> Result<Self, Error> {
        Ok(Self::with_transport(Box::new(SocketTransport::open()?)))
    }

    /// Opens a route socket inside `ns`. The socket stays bound to `ns` and the handle is used
    /// from the calling thread.
    pub fn in_netns(ns: &NetNs) -> Result<Self, Error> {
        let transport = ns.run(SocketTransport::open)??;
        Ok(Self::with_transport(Box::new(transport)))
    }

    /// Uses any transport (for example [`fake::FakeTransport`] in tests).
    pub fn with_transport(transport: Box<dyn Transport>) -> Self {
        Handle { transport, seq: 0 }
    }

    /// Sends a change request with `NLM_F_ACK` (plus `flags`) and waits for the ACK.
    pub(crate) fn execute(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<(), Error> {
        self.exchange(msg, flags | NLM_F_ACK).map(|_| ())
    }

    /// Sends a single-object GET request and returns the replies (normally exactly one).
    pub(crate) fn get(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, Error> {
        let reply = self.exchange(msg, 0)?;
        Ok(reply.messages)
    }

    /// Sends a dump request and returns every object, retrying interrupted dumps.
    pub(crate) fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, Error> {
        for attempt in 0..DUMP_ATTEMPTS {
            let reply = self.exchange(msg.clone(), NLM_F_DUMP)?;
            if !reply.interrupted {
                return Ok(reply.messages);
            }
            log::debug!("netlink dump interrupted, retrying");
            pause_before_retry(attempt);
        }
        Err(Error::DumpInterrupted {
            attempts: DUMP_ATTEMPTS,
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq
    }

    /// Sends one request and reads replies until the exchange is complete.
    fn exchange(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<Reply, Error> {
        crate::counters::timed(crate::counters::Kind::Netlink, || {
            self.exchange_untimed(msg, flags)
        })
    }

    fn exchange_untimed(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<Reply, Error> {
        let request_name = message_name(&msg);
        let seq = self.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.transport.send(&buf).map_err(Error::Io)?;

        let wants_ack = flags & NLM_F_ACK != 0;
        let mut reply = Reply::default();
        loop {
            let datagram = self.transport.recv().map_err(Error::Io)?;
            for raw in split_messages(&datagram)? {
                let raw_seq = u32::from_ne_bytes([raw[8], raw[9], raw[10], raw[11]]);
                if raw_seq != seq {
                    log::debug!("skipping netlink reply with sequence {raw_seq} (expected {seq})");
                    continue;
                }
                let parsed = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw) {
                    Ok(parsed) => parsed,
                    // One object the library cannot decode must not fail a whole dump.
                    Err(e) if is_skippable_dump_object(raw) => {
                        log::warn!("skipping undecodable {request_name} dump entry: {e}");
                        continue;
                    }
                    Err(e) => return Err(Error::Decode(format!("{request_name} reply: {e}"))),
                };
                if parsed.header.flags & NLM_F_DUMP_INTR != 0 {
                    reply.interrupted = true;
                }
                let header_flags = parsed.header.flags;
                match parsed.payload {
                    NetlinkPayload::InnerMessage(inner) => {
                        reply.messages.push(inner);
                        if header_flags & NLM_F_MULTIPART == 0 && !wants_ack {
                            return Ok(reply);
                        }
                    }
                    NetlinkPayload::Done(done) => {
                        if done.code != 0 {
                            return Err(Error::Kernel(KernelError::new(
                                request_name,
                                done.code,
                                error::ext_ack_message(&done.extended_ack),
                            )));
                        }
                        return Ok(reply);
                    }
                    NetlinkPayload::Error(err) => match err.code {
                        None => return Ok(reply),
                        Some(code) => {
                            return Err(Error::Kernel(KernelError::new(
                                request_name,
                                code.get(),
                                error::error_ext_ack(header_flags, &err.header),
                            )))
                        }
                    },
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(Error::Unexpected("netlink overrun".to_string()))
                    }
                    _ => return Err(Error::Unexpected("unknown netlink payload".to_string())),
                }
            }
        }
    }
}

#[derive(Default)]
struct Reply {
    messages: Vec<RouteNetlinkMessage>,
    interrupted: bool,
}

/// Splits a datagram into the netlink messages it carries (each padded to 4 bytes). Every
/// returned slice holds at least a full 16-byte header.
fn split_messages(mut data: &[u8]) -> Result<Vec<&[u8]>, Error> {
    let mut out = Vec::new();
    while data.len() >= 16 {
        let len = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        if len < 16 || len > data.len() {
            return Err(Error::Decode(format!(
                "netlink message length {len} does not fit a {} byte datagram",
                data.len()
            )));
        }
        out.push(&data[..len]);
        let aligned = (len + 3) & !3;
        data = &data[aligned.min(data.len())..];
    }
    Ok(out)
}

/// True for a multipart data message (not ERROR/DONE/NOOP/OVERRUN), which a dump can skip.
fn is_skippable_dump_object(raw: &[u8]) -> bool {
    let kind = u16::from_ne_bytes([raw[4], raw[5]]);
    let flags = u16::from_ne_bytes([raw[6], raw[7]]);
    kind >= 16 && flags & NLM_F_MULTIPART != 0
}

/// The kernel's name for a request, used in error messages.
fn message_name(msg: &RouteNetlinkMessage) -> &'static str {
    use RouteNetlinkMessage as M;
    match msg {
        M::NewLink(_) => "RTM_NEWLINK",
        M::DelLink(_) => "RTM_DELLINK",
        M::GetLink(_) => "RTM_GETLINK",
        M::SetLink(_) => "RTM_SETLINK",
        M::NewAddress(_) => "RTM_NEWADDR",
        M::DelAddress(_) => "RTM_DELADDR",
        M::GetAddress(_) => "RTM_GETADDR",
        M::NewRoute(_) => "RTM_NEWROUTE",
        M::DelRoute(_) => "RTM_DELROUTE",
        M::GetRoute(_) => "RTM_GETROUTE",
        M::NewNeighbour(_) => "RTM_NEWNEIGH",
        M::DelNeighbour(_) => "RTM_DELNEIGH",
        M::GetNeighbour(_) => "RTM_GETNEIGH",
        M::NewQueueDiscipline(_) => "RTM_NEWQDISC",
        M::DelQueueDiscipline(_) => "RTM_DELQDISC",
        M::GetQueueDiscipline(_) => "RTM_GETQDISC",
        M::NewTrafficFilter(_) => "RTM_NEWTFILTER",
        M::NewRule(_) => "RTM_NEWRULE",
        M::DelRule(_) => "RTM_DELRULE",
        M::GetRule(_) => "RTM_GETRULE",
        _ => "netlink request",
    }
}
