//! The real [`Transport`]: a UDP socket on port 68 bound to the container interface
//! (SO_BINDTODEVICE), created on a thread inside the container netns; the socket stays in that
//! namespace, so the daemon thread that opened it uses it from outside.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::{Handle, NetNs};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};

use super::client::{Dest, Transport};
use super::message::Message;

/// Why the container side could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The netns path no longer names a namespace: the container is gone.
    #[error("network namespace {} is gone", .0.display())]
    NetnsGone(PathBuf),
    /// The interface is not (or no longer) in the namespace.
    #[error("interface {0:?} is not in the container")]
    LinkGone(String),
    #[error("{0}")]
    Other(String),
}

impl OpenError {
    /// True when the attachment itself has disappeared (maintenance stops for good).
    pub fn attachment_gone(&self) -> bool {
        matches!(self, OpenError::NetnsGone(_) | OpenError::LinkGone(_))
    }
}

/// A DHCP client socket on one container interface.
pub struct UdpTransport {
    sock: UdpSocket,
}

impl UdpTransport {
    /// Opens the socket on `ifname` inside the namespace at `netns`, setting the link up when
    /// it is down (as Go does: the calling plugin brings it up only after IPAM). Returns the
    /// transport and the interface's MAC address.
    pub fn open(netns: &Path, ifname: &str) -> Result<(UdpTransport, [u8; 6]), OpenError> {
        let ns = open_netns(netns)?;
        ns.run(|| open_inside(ifname))
            .map_err(|e| OpenError::Other(e.to_string()))?
    }
}

/// Whether the namespace at `netns` still exists and holds `ifname`, changing nothing.
pub fn attachment_present(netns: &Path, ifname: &str) -> Result<(), OpenError> {
    let ns = open_netns(netns)?;
    ns.run(|| {
        let mut h = Handle::new().map_err(|e| other("netlink", &e))?;
        lookup(&mut h, ifname).map(drop)
    })
    .map_err(|e| OpenError::Other(e.to_string()))?
}

fn open_netns(netns: &Path) -> Result<NetNs, OpenError> {
    NetNs::open(netns).map_err(|e| {
        if e.is_not_found() {
            OpenError::NetnsGone(netns.to_path_buf())
        } else {
            OpenError::Other(e.to_string())
        }
    })
}

fn other(what: &str, e: &dyn std::fmt::Display) -> OpenError {
    OpenError::Other(format!("{what}: {e}"))
}

fn lookup(h: &mut Handle, ifname: &str) -> Result<cni_linux::rtnl::link::Link, OpenError> {
    h.link_by_name(ifname).map_err(|e| {
        if e.is_not_found() {
            OpenError::LinkGone(ifname.to_string())
        } else {
            other(&format!("looking up {ifname:?}"), &e)
        }
    })
}

fn open_inside(ifname: &str) -> Result<(UdpTransport, [u8; 6]), OpenError> {
    let mut h = Handle::new().map_err(|e| other("netlink", &e))?;
    let link = lookup(&mut h, ifname)?;
    let mac = link
        .mac
        .ok_or_else(|| OpenError::Other(format!("{ifname:?} has no Ethernet address")))?;
    if !link.up {
        h.change_link(&LinkChange::of(link.index).up())
            .map_err(|e| other(&format!("setting {ifname:?} up"), &e))?;
    }
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| other("UDP socket", &e))?;
    let opt = |r: nix::Result<()>, what: &str| r.map_err(|e| other(what, &e));
    opt(
        socket::setsockopt(&fd, sockopt::ReuseAddr, &true),
        "SO_REUSEADDR",
    )?;
    opt(
        socket::setsockopt(&fd, sockopt::Broadcast, &true),
        "SO_BROADCAST",
    )?;
    opt(
        socket::setsockopt(&fd, sockopt::BindToDevice, &OsString::from(ifname)),
        "SO_BINDTODEVICE",
    )?;
    let any = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 68));
    opt(socket::bind(fd.as_raw_fd(), &any), "binding UDP port 68")?;
    Ok((
        UdpTransport {
            sock: UdpSocket::from(fd),
        },
        mac.octets(),
    ))
}

impl Transport for UdpTransport {
    fn send(&mut self, msg: &Message, to: Dest) -> io::Result<()> {
        let bytes = msg.encode();
        let ip = match to {
            Dest::Broadcast => Ipv4Addr::BROADCAST,
            Dest::Server(ip) => ip,
        };
        self.sock
            .send_to(&bytes, SocketAddr::V4(SocketAddrV4::new(ip, 67)))?;
        Ok(())
    }

    fn recv(&mut self, wait: Duration) -> io::Result<Option<Message>> {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 1500];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    if let Some(m) = Message::decode(&buf[..n]) {
                        return Ok(Some(m));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
