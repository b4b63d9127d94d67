//! A transport and the sequence numbers of the requests sent over it.

use std::io;

use crate::Transport;

/// One netlink socket (or fake) and the sequence number of the last request sent on it.
/// Replies are matched to requests by sequence number; 0 is never used.
pub struct Connection {
    transport: Box<dyn Transport>,
    seq: u32,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("seq", &self.seq)
            .finish()
    }
}

impl Connection {
    pub fn new(transport: Box<dyn Transport>) -> Self {
        Connection { transport, seq: 0 }
    }

    /// The sequence number for the next request.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq
    }

    /// The sequence number of the last request.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    pub fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        self.transport.send(datagram)
    }

    pub fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.transport.recv()
    }

    pub fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.transport.try_recv()
    }

    pub fn reserve(&mut self, send_bytes: usize, replies: usize) -> io::Result<()> {
        self.transport.reserve(send_bytes, replies)
    }
}
