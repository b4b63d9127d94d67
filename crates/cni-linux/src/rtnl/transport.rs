//! The byte pipe under [`super::Handle`]: the shared netlink core's socket, opened for
//! NETLINK_ROUTE, or a test double ([`super::fake::FakeTransport`]).

use std::io;

pub use cni_netlink::Transport;
use cni_netlink::{Protocol, SocketTransport as CoreSocket};

use super::Error;

/// A blocking NETLINK_ROUTE socket with strict checking and extended ACKs turned on.
#[derive(Debug)]
pub struct SocketTransport(CoreSocket);

impl SocketTransport {
    /// Opens, binds and connects a route socket in the calling thread's namespace.
    pub fn open() -> Result<Self, Error> {
        CoreSocket::open(Protocol::Route)
            .map(SocketTransport)
            .map_err(Error::Io)
    }
}

impl Transport for SocketTransport {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.0.send(request)
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.0.recv()
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.0.try_recv()
    }
}
