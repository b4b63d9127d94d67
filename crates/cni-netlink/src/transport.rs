//! The byte pipe under a netlink client: a real socket, or a test double
//! ([`crate::fake::FakeTransport`]).

use std::io;

use netlink_sys::{
    protocols::{NETLINK_GENERIC, NETLINK_NETFILTER, NETLINK_ROUTE},
    Socket, SocketAddr,
};
use nix::sys::socket::{setsockopt, sockopt};

/// Kernel accounting per queued ACK (its skb's truesize), with room to spare.
const BYTES_PER_ACK: usize = 1024;
/// Headroom the kernel keeps below `SO_SNDBUF` for one netlink send.
const SEND_HEADROOM: usize = 4096;

/// Sends whole netlink requests and receives reply datagrams.
pub trait Transport: Send {
    /// Sends one datagram (one request, or a batch of them).
    fn send(&mut self, datagram: &[u8]) -> io::Result<()>;
    /// Receives one datagram (it may hold several messages), waiting for it.
    fn recv(&mut self) -> io::Result<Vec<u8>>;
    /// Receives one datagram if one is already queued. nfnetlink processes a batch inside
    /// `send`, so every reply to it is queued by the time `send` returns.
    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>>;
    /// Prepares for a send of `send_bytes` that will be answered by `replies` messages
    /// (the socket buffers must hold the whole batch, and all its ACKs at once).
    fn reserve(&mut self, send_bytes: usize, replies: usize) -> io::Result<()> {
        let _ = (send_bytes, replies);
        Ok(())
    }
}

/// The netlink families rcni speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// NETLINK_ROUTE: links, addresses, routes, rules, neighbours, qdiscs.
    Route,
    /// NETLINK_NETFILTER: nf_tables and conntrack.
    Netfilter,
    /// NETLINK_GENERIC: families the kernel registers by name (WireGuard's `wireguard`).
    Generic,
}

/// A blocking netlink socket with extended ACKs turned on.
#[derive(Debug)]
pub struct SocketTransport {
    socket: Socket,
    /// Buffer sizes already requested, so they are raised only when a batch needs more.
    send_buffer: usize,
    recv_buffer: usize,
}

impl SocketTransport {
    /// Opens, binds and connects a socket in the calling thread's network namespace.
    pub fn open(protocol: Protocol) -> io::Result<Self> {
        let number = match protocol {
            Protocol::Route => NETLINK_ROUTE,
            Protocol::Netfilter => NETLINK_NETFILTER,
            Protocol::Generic => NETLINK_GENERIC,
        };
        let mut socket = Socket::new(number)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        match protocol {
            Protocol::Route => enable_route_options(&mut socket),
            Protocol::Netfilter | Protocol::Generic => {
                // Extended ACKs carry the kernel's error text; capping keeps ACKs small.
                socket.set_ext_ack(true)?;
                socket.set_cap_ack(true)?;
            }
        }
        Ok(SocketTransport {
            socket,
            send_buffer: 0,
            recv_buffer: 0,
        })
    }

    /// Raises a socket buffer to `size`: the forcing option (root) passes the system limit,
    /// the plain one is the fallback.
    fn grow(&self, size: usize, send: bool) -> io::Result<()> {
        let forced = if send {
            setsockopt(&self.socket, sockopt::SndBufForce, &size)
        } else {
            setsockopt(&self.socket, sockopt::RcvBufForce, &size)
        };
        if forced.is_ok() {
            return Ok(());
        }
        let plain = if send {
            setsockopt(&self.socket, sockopt::SndBuf, &size)
        } else {
            setsockopt(&self.socket, sockopt::RcvBuf, &size)
        };
        plain.map_err(io::Error::from)
    }

    fn recv_flags(&self, flags: i32) -> io::Result<Vec<u8>> {
        loop {
            // Peek for the size first so a large dump datagram is never truncated.
            let mut probe: Vec<u8> = Vec::new();
            let size = match self
                .socket
                .recv(&mut probe, flags | libc::MSG_PEEK | libc::MSG_TRUNC)
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let mut buf = Vec::with_capacity(size);
            match self.socket.recv(&mut buf, flags) {
                Ok(_) => return Ok(buf),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Strict checking makes the kernel honour filters in dump requests; extended ACKs carry the
/// kernel's error text; capping keeps ACKs small. Older kernels lack some of these options, and
/// every caller also filters replies itself, so failures only log.
fn enable_route_options(socket: &mut Socket) {
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
}

impl Transport for SocketTransport {
    fn reserve(&mut self, send_bytes: usize, replies: usize) -> io::Result<()> {
        let send = send_bytes + SEND_HEADROOM;
        if send > self.send_buffer {
            self.grow(send, true)?;
            self.send_buffer = send;
        }
        let recv = replies * BYTES_PER_ACK;
        if recv > self.recv_buffer {
            self.grow(recv, false)?;
            self.recv_buffer = recv;
        }
        Ok(())
    }

    fn send(&mut self, datagram: &[u8]) -> io::Result<()> {
        let sent = self.socket.send(datagram, 0)?;
        if sent != datagram.len() {
            return Err(io::Error::other(format!(
                "short netlink send: {sent} of {} bytes",
                datagram.len()
            )));
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        self.recv_flags(0)
    }

    fn try_recv(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self.recv_flags(libc::MSG_DONTWAIT) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}
