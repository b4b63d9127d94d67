//! A recording [`Transport`] for unit tests without privileges.
//!
//! It keeps every datagram sent and answers with replies given in advance: raw datagrams
//! ([`FakeTransport::queue`]), replies built for the sequence number of the request being
//! answered ([`FakeTransport::queue_for_last_request`]), or the output of a responder closure
//! that sees each sent datagram ([`FakeTransport::with_responder`]). Clones share state, so a
//! test keeps one clone to inspect what the client sent. [`header`], [`ack`], [`error`] and
//! [`done`] build the generic netlink replies; each protocol's codec builds its own objects.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::consts::*;
use crate::{align, split, Transport};

type Responder = Box<dyn FnMut(&[u8]) -> Vec<Vec<u8>> + Send>;
type ForRequest = Box<dyn FnOnce(u32) -> Vec<u8> + Send>;

/// One queued reply.
enum Queued {
    Datagram(Vec<u8>),
    /// Built when read, from the sequence number of the latest request.
    ForRequest(ForRequest),
}

#[derive(Default)]
struct State {
    sent: Vec<Vec<u8>>,
    queued: VecDeque<Queued>,
    responder: Option<Responder>,
}

/// A transport that records requests and replays scripted replies.
#[derive(Clone, Default)]
pub struct FakeTransport {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for FakeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTransport").finish_non_exhaustive()
    }
}

impl FakeTransport {
    /// A fake with no replies queued.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fake whose replies are computed from each sent datagram.
    pub fn with_responder(f: impl FnMut(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> Self {
        let fake = Self::new();
        fake.lock().responder = Some(Box::new(f));
        fake
    }

    /// A fake that ACKs every message carrying `NLM_F_ACK` with success, as a kernel that
    /// accepts everything does.
    pub fn acking() -> Self {
        Self::with_responder(|sent| {
            split(sent)
                .unwrap_or_default()
                .iter()
                .filter(|m| m.flags & NLM_F_ACK != 0)
                .map(|m| ack(m.seq))
                .collect()
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves valid data behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a reply datagram, sent unchanged.
    pub fn queue(&self, datagram: Vec<u8>) {
        self.lock().queued.push_back(Queued::Datagram(datagram));
    }

    /// Queues a reply built, when it is read, for the sequence number of the latest request
    /// (0 before any), so tests describe payloads only.
    pub fn queue_for_last_request(&self, build: impl FnOnce(u32) -> Vec<u8> + Send + 'static) {
        self.lock()
            .queued
            .push_back(Queued::ForRequest(Box::new(build)));
    }

    /// Every datagram sent so far.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.lock().sent.clone()
    }

    /// Replies still queued.
    pub fn pending_replies(&self) -> usize {
        self.lock().queued.len()
    }

    fn next_reply(&self) -> Option<Vec<u8>> {
        let mut state = self.lock();
        let queued = state.queued.pop_front()?;
        Some(match queued {
            Queued::Datagram(bytes) => bytes,
            Queued::ForRequest(build) => {
                let seq = state
                    .sent
                    .last()
                    .and_then(|d| split(d).ok()?.first().map(|m| m.seq))
                    .unwrap_or(0);
                drop(state);
                build(seq)
            }
        })
    }
}

impl Transport for FakeTransport {
    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        state.sent.push(datagram.to_vec());
        if let Some(responder) = state.responder.as_mut() {
            let replies = responder(datagram);
            state
                .queued
                .extend(replies.into_iter().map(Queued::Datagram));
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.next_reply()
            .ok_or_else(|| io::Error::new(io::ErrorKind::WouldBlock, "fake: no reply queued"))
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.next_reply())
    }
}

/// A netlink header for a message of `len` bytes (the caller appends the payload).
pub fn header(len: usize, msg_type: u16, flags: u16, seq: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    out.extend_from_slice(&msg_type.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out
}

/// A successful ACK (capped NLMSG_ERROR with code 0) for `seq`.
pub fn ack(seq: u32) -> Vec<u8> {
    error(seq, 0, None)
}

/// A capped NLMSG_ERROR for `seq` with a positive `errno` and an optional extended-ACK text.
pub fn error(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
    let mut tlvs = Vec::new();
    if let Some(t) = text {
        let attr_len = 4 + t.len() + 1;
        tlvs.extend_from_slice(&u16::try_from(attr_len).unwrap_or(u16::MAX).to_ne_bytes());
        tlvs.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        tlvs.extend_from_slice(t.as_bytes());
        tlvs.push(0);
        tlvs.resize(align(tlvs.len()), 0);
    }
    let flags = NLM_F_CAPPED | if tlvs.is_empty() { 0 } else { NLM_F_ACK_TLVS };
    let len = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN + tlvs.len();
    let mut out = header(len, NLMSG_ERROR, flags, seq);
    out.extend_from_slice(&(-errno).to_ne_bytes());
    out.extend_from_slice(&header(NLMSG_HDRLEN, 0, 0, seq)); // echoed request header
    out.extend_from_slice(&tlvs);
    out
}

/// The NLMSG_DONE that ends a dump.
pub fn done(seq: u32) -> Vec<u8> {
    let mut out = header(NLMSG_HDRLEN + 4, NLMSG_DONE, NLM_F_MULTIPART, seq);
    out.extend_from_slice(&0i32.to_ne_bytes());
    out
}
