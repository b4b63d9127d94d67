//! Synchronous rtnetlink (NETLINK_ROUTE) client.
//!
//! [`Handle`] sends one request at a time over a [`Transport`] and collects the replies:
//! sequence numbers are checked, every change asks for an ACK, dumps are retried when the kernel
//! flags them `NLM_F_DUMP_INTR`, and kernel errors become an [`Error::Kernel`] carrying the errno
//! and the extended-ACK text. The transport, the framing of replies and the dump retry policy
//! are the shared netlink core's (`cni_netlink`, also under `cni_nft`): a real socket
//! ([`SocketTransport`]), or [`fake::FakeTransport`], which records requests and replays canned
//! replies so message encoding can be unit-tested without privileges.
//!
//! Typed operations live in the submodules: [`link`] (reading, listing and deleting links,
//! bridge ports and VLANs), [`link_add`] (one builder that creates every kind of link: veth,
//! bridge, IFB, VXLAN, macvlan, ipvlan, vlan, dummy, VRF, WireGuard), [`link_change`] (one
//! builder that changes a link: name, alias, MTU, MAC, flags, master, namespace, per-interface
//! IP settings), [`addr`] (addresses), [`route`] (routes), [`rule`] (FIB rules), [`neigh`]
//! (neighbours), [`tc`] (qdiscs and filters for traffic shaping), [`virt`] (macvlan and ipvlan
//! modes, reading the settings of stacked links), [`vxlan`] (VXLAN settings) and [`overlay`]
//! (FDB entries, tagged next-hop routes, for the node agent). They are all methods on
//! [`Handle`].

pub mod addr;
pub mod device_route;
pub mod fake;
pub mod link;
pub mod link_add;
pub mod link_change;
mod namespace;
pub mod neigh;
mod nsid;
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

pub(crate) use error::error_ext_ack;
pub use error::{Error, KernelError};
pub use transport::{SocketTransport, Transport};

use cni_netlink::{retry_interrupted_dump, Connection, Dump, DumpInterrupted};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR,
    NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;

#[cfg(test)]
pub(crate) use cni_netlink::DUMP_ATTEMPTS;

/// A netlink route client bound to the namespace its socket was opened in.
#[derive(Debug)]
pub struct Handle {
    conn: Connection,
}

impl From<DumpInterrupted> for Error {
    fn from(e: DumpInterrupted) -> Self {
        Error::DumpInterrupted {
            attempts: e.attempts,
        }
    }
}

impl Handle {
    /// Opens a route socket in the calling thread's network namespace.
    pub fn new() -> Result<Self, Error> {
        Ok(Self::with_transport(Box::new(SocketTransport::open()?)))
    }

    /// Uses any transport (for example [`fake::FakeTransport`] in tests).
    pub fn with_transport(transport: Box<dyn Transport>) -> Self {
        Handle {
            conn: Connection::new(transport),
        }
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
        retry_interrupted_dump(message_name(&msg), || {
            let reply = self.exchange(msg.clone(), NLM_F_DUMP)?;
            Ok(if reply.interrupted {
                Dump::Interrupted
            } else {
                Dump::Complete(reply.messages)
            })
        })
    }

    /// Sends one request and reads replies until the exchange is complete.
    fn exchange(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<Reply, Error> {
        crate::counters::timed(crate::counters::Kind::Netlink, || {
            self.exchange_untimed(msg, flags)
        })
    }

    fn exchange_untimed(&mut self, msg: RouteNetlinkMessage, flags: u16) -> Result<Reply, Error> {
        let request_name = message_name(&msg);
        let seq = self.conn.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.conn.send(&buf).map_err(Error::Io)?;

        let wants_ack = flags & NLM_F_ACK != 0;
        let mut reply = Reply::default();
        loop {
            let datagram = self.conn.recv().map_err(Error::Io)?;
            let messages =
                cni_netlink::split(&datagram).map_err(|e| Error::Decode(e.to_string()))?;
            for raw in messages {
                if raw.seq != seq {
                    let raw_seq = raw.seq;
                    log::debug!("skipping netlink reply with sequence {raw_seq} (expected {seq})");
                    continue;
                }
                let parsed = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw.bytes) {
                    Ok(parsed) => parsed,
                    // One object the library cannot decode must not fail a whole dump.
                    Err(e) if is_skippable_dump_object(&raw) => {
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

/// True for a multipart data message (not ERROR/DONE/NOOP/OVERRUN), which a dump can skip.
fn is_skippable_dump_object(raw: &cni_netlink::RawMessage<'_>) -> bool {
    raw.msg_type >= 16 && raw.flags & NLM_F_MULTIPART != 0
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
        M::GetNsId(_) => "RTM_GETNSID",
        _ => "netlink request",
    }
}
