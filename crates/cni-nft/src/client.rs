//! [`Nft`]: one netfilter netlink socket and the three exchanges run over it — an atomic
//! batch, a single request, and a dump.

use cni_netlink::{retry_interrupted_dump, Connection, Dump, DumpInterrupted, Protocol};

use crate::batch::Batch;
use crate::message::{self, NfMsg};
use crate::sys::*;
use crate::transport::{SocketTransport, Transport};
use crate::Error;

/// An nf_tables / conntrack client bound to the network namespace its socket was opened in.
///
/// The socket stays in that namespace even when the handle moves to another thread, so the
/// usual pattern is to open it on a thread that entered the namespace and use it anywhere.
#[derive(Debug)]
pub struct Nft {
    conn: Connection,
}

/// One message of a dump reply, copied out of the datagram.
#[derive(Debug, Clone)]
pub(crate) struct DumpItem {
    pub(crate) family: u8,
    /// Attributes after `nfgenmsg`.
    pub(crate) attrs: Vec<u8>,
}

impl From<DumpInterrupted> for Error {
    fn from(e: DumpInterrupted) -> Self {
        Error::DumpInterrupted {
            what: e.what,
            attempts: e.attempts,
        }
    }
}

impl Nft {
    /// Opens a netfilter netlink socket in the calling thread's network namespace.
    pub fn new() -> Result<Self, Error> {
        let transport = SocketTransport::open(Protocol::Netfilter).map_err(Error::Io)?;
        Ok(Self::with_transport(Box::new(transport)))
    }

    /// Uses any transport, for example [`crate::fake::FakeTransport`] in tests.
    pub fn with_transport(transport: Box<dyn Transport>) -> Self {
        Nft {
            conn: Connection::new(transport),
        }
    }

    /// Lets the socket buffers hold a send of `send_bytes` and `replies` queued replies.
    pub(crate) fn reserve(&mut self, send_bytes: usize, replies: usize) -> Result<(), Error> {
        self.conn.reserve(send_bytes, replies).map_err(Error::Io)
    }

    fn next_seq(&mut self) -> u32 {
        self.conn.next_seq()
    }

    /// Applies `batch` as one kernel transaction: either every message takes effect or none
    /// does. Each message is ACKed; the error returned names the first message the kernel
    /// rejected. An empty batch sends nothing.
    ///
    /// The whole batch goes to the kernel in one datagram (nfnetlink needs a transaction
    /// between its begin and end markers in one send), so the socket's send buffer is raised
    /// to its size first; a batch the socket cannot take is [`Error::BatchTooLarge`].
    pub fn commit(&mut self, batch: &Batch) -> Result<(), Error> {
        if let Some(e) = batch.encode_error() {
            return Err(e);
        }
        let entries = batch.entries();
        if entries.is_empty() {
            return Ok(());
        }
        let begin_seq = self.next_seq();
        let mut datagram = Vec::new();
        NfMsg::batch_marker(NFNL_MSG_BATCH_BEGIN).encode_into(begin_seq, &mut datagram);
        let mut seqs = Vec::with_capacity(entries.len());
        for entry in entries {
            let seq = self.next_seq();
            seqs.push(seq);
            let mut msg = entry.msg.clone();
            msg.flags |= NLM_F_ACK;
            msg.encode_into(seq, &mut datagram);
        }
        let end_seq = self.next_seq();
        NfMsg::batch_marker(NFNL_MSG_BATCH_END).encode_into(end_seq, &mut datagram);
        let too_large = |source: std::io::Error| Error::BatchTooLarge {
            bytes: datagram.len(),
            messages: entries.len(),
            source,
        };
        self.reserve(datagram.len(), entries.len())?;
        self.conn.send(&datagram).map_err(|e| {
            if e.raw_os_error() == Some(libc::EMSGSIZE) {
                too_large(e)
            } else {
                Error::Io(e)
            }
        })?;

        let describe = |seq: u32| -> String {
            if seq == begin_seq {
                "begin nf_tables batch".to_string()
            } else if seq == end_seq {
                "end nf_tables batch".to_string()
            } else {
                seqs.iter()
                    .position(|s| *s == seq)
                    .map(|i| entries[i].what.clone())
                    .unwrap_or_else(|| format!("batch message {seq}"))
            }
        };
        let in_batch = |seq: u32| seq == begin_seq || seq == end_seq || seqs.contains(&seq);

        let mut acked = 0usize;
        let mut first_error: Option<Error> = None;
        // The kernel handles the whole batch inside send(), so every reply is queued already:
        // read without blocking until all messages are accounted for or nothing is left.
        while let Some(data) = self.conn.try_recv().map_err(Error::Io)? {
            for reply in message::split(&data)? {
                if !in_batch(reply.seq) {
                    log::debug!("skipping netlink reply with foreign sequence {}", reply.seq);
                    continue;
                }
                if reply.msg_type != NLMSG_ERROR {
                    continue;
                }
                let ack = message::decode_error(reply.flags, reply.payload)?;
                acked += 1;
                if ack.errno != 0 && first_error.is_none() {
                    first_error = Some(Error::Kernel {
                        what: describe(reply.seq),
                        errno: ack.errno,
                        message: ack.message,
                    });
                }
            }
            if first_error.is_none() && acked >= entries.len() {
                return Ok(());
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Err(Error::Decode(format!(
                "kernel acknowledged {acked} of {} batch messages",
                entries.len()
            ))),
        }
    }

    /// Sends one request with `NLM_F_ACK` and returns the object replies that came before the
    /// ACK (for a GET of one object, that object).
    pub(crate) fn request(&mut self, msg: NfMsg, what: &str) -> Result<Vec<DumpItem>, Error> {
        match self.request_partial(msg, what)? {
            (_, Some(e)) => Err(e),
            (items, None) => Ok(items),
        }
    }

    /// Like [`Nft::request`], but the replies that came before an error are kept: a request
    /// naming several objects (set elements) is answered object by object until the first
    /// failure, whose error comes second.
    pub(crate) fn request_partial(
        &mut self,
        mut msg: NfMsg,
        what: &str,
    ) -> Result<(Vec<DumpItem>, Option<Error>), Error> {
        let seq = self.next_seq();
        msg.flags |= NLM_F_ACK;
        self.conn.send(&msg.encode(seq)).map_err(Error::Io)?;
        let mut items = Vec::new();
        loop {
            let data = self.conn.recv().map_err(Error::Io)?;
            for reply in message::split(&data)? {
                if reply.seq != seq {
                    continue;
                }
                match reply.msg_type {
                    NLMSG_ERROR => {
                        let ack = message::decode_error(reply.flags, reply.payload)?;
                        let error = (ack.errno != 0).then(|| Error::Kernel {
                            what: what.to_string(),
                            errno: ack.errno,
                            message: ack.message,
                        });
                        return Ok((items, error));
                    }
                    NLMSG_NOOP | NLMSG_DONE => {}
                    NLMSG_OVERRUN => return Err(Error::Decode("netlink overrun".into())),
                    _ => items.push(item(&reply)?),
                }
            }
        }
    }

    /// Runs a dump request and returns every object, retrying when a concurrent change
    /// interrupted it.
    pub(crate) fn dump(&mut self, msg: &NfMsg, what: &str) -> Result<Vec<DumpItem>, Error> {
        retry_interrupted_dump(what, || self.dump_once(msg, what))
    }

    /// One dump attempt.
    fn dump_once(&mut self, msg: &NfMsg, what: &str) -> Result<Dump<Vec<DumpItem>>, Error> {
        let seq = self.next_seq();
        let mut msg = msg.clone();
        msg.flags |= NLM_F_DUMP;
        self.conn.send(&msg.encode(seq)).map_err(Error::Io)?;
        let mut items = Vec::new();
        let mut interrupted = false;
        loop {
            let data = self.conn.recv().map_err(Error::Io)?;
            for reply in message::split(&data)? {
                if reply.seq != seq {
                    continue;
                }
                interrupted |= reply.flags & NLM_F_DUMP_INTR != 0;
                match reply.msg_type {
                    NLMSG_DONE => {
                        let status = message::decode_done(reply.flags, reply.payload);
                        if status.errno != 0 {
                            return Err(Error::Kernel {
                                what: what.to_string(),
                                errno: status.errno,
                                message: status.message,
                            });
                        }
                        return Ok(if interrupted {
                            Dump::Interrupted
                        } else {
                            Dump::Complete(items)
                        });
                    }
                    NLMSG_ERROR => {
                        let ack = message::decode_error(reply.flags, reply.payload)?;
                        if ack.errno != 0 {
                            return Err(Error::Kernel {
                                what: what.to_string(),
                                errno: ack.errno,
                                message: ack.message,
                            });
                        }
                    }
                    NLMSG_NOOP => {}
                    NLMSG_OVERRUN => return Err(Error::Decode("netlink overrun".into())),
                    _ => items.push(item(&reply)?),
                }
            }
        }
    }
}

fn item(reply: &message::Reply<'_>) -> Result<DumpItem, Error> {
    let family = message::family(reply)
        .ok_or_else(|| Error::Decode("nfnetlink reply without nfgenmsg".into()))?;
    Ok(DumpItem {
        family,
        attrs: reply.payload[NFGENMSG_LEN.min(reply.payload.len())..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, FakeTransport};
    use crate::objects::Family;

    fn three_message_batch() -> Batch {
        let mut b = Batch::new();
        b.add_table(Family::Ip, "t").unwrap();
        b.add_chain(&crate::Chain::regular(Family::Ip, "t", "c"))
            .unwrap();
        b.delete_chain(Family::Ip, "t", "gone").unwrap();
        b
    }

    #[test]
    fn batch_is_framed_with_markers_and_every_message_asks_for_an_ack() {
        let fake = FakeTransport::acking();
        let mut nft = Nft::with_transport(Box::new(fake.clone()));
        nft.commit(&three_message_batch()).unwrap();
        let sent = fake.sent();
        assert_eq!(sent.len(), 1, "one datagram per batch");
        let msgs = message::split(&sent[0]).unwrap();
        let types: Vec<u16> = msgs.iter().map(|m| m.msg_type).collect();
        assert_eq!(types, vec![0x10, 0x0a00, 0x0a03, 0x0a05, 0x11]);
        let seqs: Vec<u32> = msgs.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(msgs[0].flags & NLM_F_ACK, 0);
        assert!(msgs[1..4].iter().all(|m| m.flags & NLM_F_ACK != 0));
        assert_eq!(msgs[4].flags & NLM_F_ACK, 0);
    }

    #[test]
    fn kernel_error_names_the_message_that_caused_it() {
        let fake = FakeTransport::with_responder(|sent| {
            let msgs = message::split(sent).unwrap();
            vec![
                fake::ack(msgs[1].seq),
                fake::ack(msgs[2].seq),
                fake::error(msgs[3].seq, 2, Some("chain not found")),
            ]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        let err = nft.commit(&three_message_batch()).unwrap_err();
        match &err {
            Error::Kernel {
                what,
                errno,
                message,
            } => {
                assert_eq!(what, "delete chain ip t gone");
                assert_eq!(*errno, 2);
                assert_eq!(message.as_deref(), Some("chain not found"));
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err.is_not_found());
    }

    #[test]
    fn missing_acks_and_foreign_sequences_are_errors() {
        let fake = FakeTransport::with_responder(|sent| {
            let msgs = message::split(sent).unwrap();
            vec![fake::ack(msgs[1].seq), fake::ack(999)]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        assert!(matches!(
            nft.commit(&three_message_batch()),
            Err(Error::Decode(_))
        ));
    }

    #[test]
    fn handle_can_move_to_another_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<Nft>();
    }

    #[test]
    fn empty_batch_sends_nothing() {
        let fake = FakeTransport::new();
        let mut nft = Nft::with_transport(Box::new(fake.clone()));
        nft.commit(&Batch::new()).unwrap();
        assert!(fake.sent().is_empty());
    }

    #[test]
    fn interrupted_dump_is_retried() {
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = attempts.clone();
        let fake = FakeTransport::with_responder(move |sent| {
            let m = message::split(sent).unwrap()[0];
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut part = fake::dump_part(m.seq, 0x0a06, 2, &[]);
            if n == 0 {
                // Set NLM_F_DUMP_INTR on the first attempt.
                let flags = u16::from_ne_bytes([part[6], part[7]]) | NLM_F_DUMP_INTR;
                part[6..8].copy_from_slice(&flags.to_ne_bytes());
            }
            part.extend(fake::done(m.seq));
            vec![part]
        });
        let mut nft = Nft::with_transport(Box::new(fake));
        let msg = NfMsg::nftables(NFT_MSG_GETRULE, 0, 2, Vec::new());
        let items = nft.dump(&msg, "list").unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
