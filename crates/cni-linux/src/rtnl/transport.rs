//! The byte pipe under [`super::Handle`]: a real netlink socket, or a test double.

use std::io;

use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::Error;

/// Sends whole netlink requests and receives reply datagrams.
pub trait Transport: Send {
    /// Sends one serialized request.
    fn send(&mut self, request: &[u8]) -> io::Result<()>;
    /// Receives one datagram (it may hold several netlink messages).
    fn recv(&mut self) -> io::Result<Vec<u8>>;
}

/// A blocking NETLINK_ROUTE socket with strict checking and extended ACKs turned on.
#[derive(Debug)]
pub struct SocketTransport {
    socket: Socket,
}

impl SocketTransport {
    /// Opens, binds and connects a route socket in the calling thread's namespace.
    pub fn open() -> Result<Self, Error> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(Error::Io)?;
        socket.bind_auto().map_err(Error::Io)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(Error::Io)?;
        // Strict checking makes the kernel honour filters in dump requests; extended ACKs
        // carry the kernel's error text; capping keeps ACKs small. Older kernels lack some of
        // these options, and every caller also filters replies itself, so failures only log.
        let options: [(&str, io::Result<()>); 3] = [
            (
                "NETLINK_GET_STRICT_CHK",
                socket.set_netlink_get_strict_chk(true),
            ),
            ("NETLINK_EXT_ACK", socket.set_ext_ack(true)),
            ("NETLINK_CAP_ACK", socket.set_cap_ack(true)),
        ];
        for (name, result) in options {
            if let Err(e) = result {
                log::debug!("cannot enable {name} on the netlink socket: {e}");
            }
        }
        Ok(SocketTransport { socket })
    }
}

impl Transport for SocketTransport {
    fn send(&mut self, request: &[u8]) -> io::Result<()> {
        let sent = self.socket.send(request, 0)?;
        if sent != request.len() {
            return Err(io::Error::other(format!(
                "short netlink send: {sent} of {} bytes",
                request.len()
            )));
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        loop {
            match self.socket.recv_from_full() {
                Ok((data, _)) => return Ok(data),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
