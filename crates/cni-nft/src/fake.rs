//! A recording [`Transport`] for unit tests without privileges.
//!
//! It keeps every datagram sent, and answers through a responder closure that sees each sent
//! datagram and returns the reply datagrams to queue. [`FakeTransport::acking`] answers like a
//! kernel that accepts everything: one ACK per message that asked for one. The helpers
//! [`ack`], [`error`] and [`done`] build reply messages. Clones share state, so a test keeps a
//! clone to inspect what the client sent.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use crate::message;
use crate::sys::*;
use crate::transport::Transport;

type Responder = Box<dyn FnMut(&[u8]) -> Vec<Vec<u8>> + Send>;

#[derive(Default)]
struct Inner {
    sent: Vec<Vec<u8>>,
    queued: VecDeque<Vec<u8>>,
    responder: Option<Responder>,
}

/// A transport that records requests and replays scripted replies.
#[derive(Clone, Default)]
pub struct FakeTransport {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for FakeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTransport").finish_non_exhaustive()
    }
}

impl FakeTransport {
    /// A transport that answers with whatever [`FakeTransport::queue`] was given.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transport whose replies are computed from each sent datagram.
    pub fn with_responder(f: impl FnMut(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> Self {
        let fake = Self::new();
        fake.lock().responder = Some(Box::new(f));
        fake
    }

    /// A transport that ACKs every message carrying `NLM_F_ACK` with success.
    pub fn acking() -> Self {
        Self::with_responder(|sent| {
            message::split(sent)
                .unwrap_or_default()
                .iter()
                .filter(|m| m.flags & NLM_F_ACK != 0)
                .map(|m| ack(m.seq))
                .collect()
        })
    }

    /// Queues a reply datagram.
    pub fn queue(&self, datagram: Vec<u8>) {
        self.lock().queued.push_back(datagram);
    }

    /// Every datagram sent so far.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.lock().sent.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A test that panicked while holding the lock leaves valid data behind.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Transport for FakeTransport {
    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        let mut inner = self.lock();
        inner.sent.push(datagram.to_vec());
        if let Some(responder) = inner.responder.as_mut() {
            let replies = responder(datagram);
            inner.queued.extend(replies);
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.lock()
            .queued
            .pop_front()
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "fake: no reply queued"))
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.lock().queued.pop_front())
    }
}

fn header(len: usize, msg_type: u16, flags: u16, seq: u32) -> Vec<u8> {
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

/// An NLMSG_ERROR for `seq` with a positive `errno` and an optional extended-ACK message.
pub fn error(seq: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
    let mut tlvs = crate::attr::AttrWriter::new();
    if let Some(t) = text {
        tlvs.str(NLMSGERR_ATTR_MSG, t);
    }
    let tlvs = tlvs.into_bytes();
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

/// One multipart dump message of nfnetlink type `msg_type` carrying `attrs` (already encoded).
pub fn dump_part(seq: u32, msg_type: u16, family: u8, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
    let mut out = header(len, msg_type, NLM_F_MULTIPART, seq);
    out.extend_from_slice(&[family, NFNETLINK_V0, 0, 0]);
    out.extend_from_slice(attrs);
    out.resize(crate::attr::align(out.len()), 0);
    out
}
