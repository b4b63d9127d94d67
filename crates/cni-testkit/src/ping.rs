//! ICMP echo from inside a namespace, over a raw socket (no `ping` binary needed).

use std::net::Ipv4Addr;
use std::net::{IpAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    recvfrom, sendto, setsockopt, socket, sockopt::ReceiveTimeout, AddressFamily, MsgFlags,
    SockFlag, SockProtocol, SockType, SockaddrIn, SockaddrIn6, SockaddrLike, SockaddrStorage,
};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::in_netns::run_in;

/// Echo requests sent per [`ping`] before giving up.
const ATTEMPTS: u16 = 2;
/// How long each request waits for its reply.
const REPLY_WAIT: Duration = Duration::from_millis(1000);

const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

/// Distinguishes concurrent pings of one process (raw sockets see every ICMP packet).
static NEXT_ID: AtomicU16 = AtomicU16::new(0);

/// True when `addr` answers an ICMP echo sent from namespace `from_ns`.
///
/// Sends up to 2 requests, waiting 1 s for each. Errors (a missing namespace, an
/// unreachable network) count as no answer and are printed to stderr. IPv6 link-local
/// addresses are not supported (no scope id).
pub fn ping(from_ns: &str, addr: impl Into<IpAddr>) -> bool {
    let addr = addr.into();
    match run_in(from_ns, move || Ok(echo(addr)?)) {
        Ok(answered) => answered,
        Err(e) => {
            eprintln!("cni-testkit: ping {addr} from {from_ns}: {e:#}");
            false
        }
    }
}

fn echo(addr: IpAddr) -> nix::Result<bool> {
    let (family, protocol, request_type) = match addr {
        IpAddr::V4(_) => (AddressFamily::Inet, SockProtocol::Icmp, ECHO_REQUEST_V4),
        IpAddr::V6(_) => (AddressFamily::Inet6, SockProtocol::IcmpV6, ECHO_REQUEST_V6),
    };
    let sock = socket(family, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol)?;
    let id = NEXT_ID
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(std::process::id() as u16);
    for seq in 1..=ATTEMPTS {
        let packet = echo_request(request_type, id, seq);
        match addr {
            IpAddr::V4(a) => {
                let dest = SockaddrIn::from(SocketAddrV4::new(a, 0));
                sendto(sock.as_raw_fd(), &packet, &dest, MsgFlags::empty())?
            }
            IpAddr::V6(a) => {
                let dest = SockaddrIn6::from(SocketAddrV6::new(a, 0, 0, 0));
                sendto(sock.as_raw_fd(), &packet, &dest, MsgFlags::empty())?
            }
        };
        if await_reply(&sock, addr, id, seq)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// An echo request with a checksum. (The kernel fills in the ICMPv6 checksum itself
/// and overwrites ours, which is harmless.)
fn echo_request(icmp_type: u8, id: u16, seq: u16) -> Vec<u8> {
    let mut packet = vec![icmp_type, 0, 0, 0];
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(b"rcni-testkit-ping");
    let sum = checksum(&packet);
    packet[2..4].copy_from_slice(&sum.to_be_bytes());
    packet
}

/// The Internet checksum (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn await_reply(sock: &OwnedFd, addr: IpAddr, id: u16, seq: u16) -> nix::Result<bool> {
    let deadline = Instant::now() + REPLY_WAIT;
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        // A zero timeout would mean "wait forever".
        let wait = TimeVal::microseconds(left.as_micros().max(1) as i64);
        setsockopt(sock, ReceiveTimeout, &wait)?;
        let (len, from) = match recvfrom::<SockaddrStorage>(sock.as_raw_fd(), &mut buf) {
            Ok(received) => received,
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(e) => return Err(e),
        };
        if from.as_ref().and_then(source_ip) == Some(addr) && is_reply(&buf[..len], addr, id, seq) {
            return Ok(true);
        }
    }
}

fn source_ip(from: &SockaddrStorage) -> Option<IpAddr> {
    match from.family()? {
        AddressFamily::Inet => Some(IpAddr::V4(from.as_sockaddr_in()?.ip())),
        AddressFamily::Inet6 => Some(IpAddr::V6(from.as_sockaddr_in6()?.ip())),
        _ => None,
    }
}

/// Raw IPv4 sockets deliver the IP header too; raw ICMPv6 sockets deliver only ICMP.
fn is_reply(packet: &[u8], addr: IpAddr, id: u16, seq: u16) -> bool {
    let (icmp, reply_type) = match addr {
        IpAddr::V4(_) => {
            let header_len = usize::from(packet.first().map_or(0, |b| b & 0x0f)) * 4;
            (packet.get(header_len..).unwrap_or_default(), ECHO_REPLY_V4)
        }
        IpAddr::V6(_) => (packet, ECHO_REPLY_V6),
    };
    icmp.len() >= 8
        && icmp[0] == reply_type
        && icmp[4..6] == id.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
}

/// What a [`PingStream`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingCount {
    /// Echo requests sent.
    pub sent: u64,
    /// Requests answered.
    pub received: u64,
    /// The first unanswered sequence numbers (at most 20).
    pub lost: Vec<u64>,
}

/// Echo requests sent every `interval` from a namespace to an IPv4 address until
/// [`PingStream::stop`], like `ping -i`; every reply is matched to its request.
pub struct PingStream {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<nix::Result<PingCount>>,
}

/// How long a request may wait for its reply once the stream stops.
const LAST_REPLY_WAIT: Duration = Duration::from_secs(1);

impl PingStream {
    /// Starts pinging `addr` from namespace `from_ns` every `interval`.
    pub fn start(from_ns: &str, addr: Ipv4Addr, interval: Duration) -> anyhow::Result<Self> {
        // The socket is made inside the namespace and stays there; the loop runs anywhere.
        let sock = run_in(from_ns, || {
            Ok(socket(
                AddressFamily::Inet,
                SockType::Raw,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                SockProtocol::Icmp,
            )?)
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || stream(&sock, addr, interval, &stopped));
        Ok(PingStream { stop, thread })
    }

    /// Stops sending, waits a moment for the last replies and counts.
    pub fn stop(self) -> PingCount {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(Ok(count)) => count,
            Ok(Err(e)) => panic!("ping stream: {e}"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

fn stream(
    sock: &OwnedFd,
    addr: Ipv4Addr,
    interval: Duration,
    stop: &AtomicBool,
) -> nix::Result<PingCount> {
    let id = NEXT_ID
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(std::process::id() as u16);
    let dest = SockaddrIn::from(SocketAddrV4::new(addr, 0));
    // Answered requests by sequence number (the 16-bit wire field wraps; a run of a few
    // minutes at 2 ms stays within 65536 outstanding requests).
    let mut answered: Vec<bool> = Vec::new();
    let mut next = Instant::now();
    let mut stopped_at = None;
    let mut buf = [0u8; 2048];
    loop {
        let now = Instant::now();
        if stopped_at.is_none() && stop.load(Ordering::Relaxed) {
            stopped_at = Some(now);
        }
        if let Some(at) = stopped_at {
            if now.duration_since(at) > LAST_REPLY_WAIT {
                break;
            }
        } else if now >= next {
            let seq = answered.len() as u16;
            let packet = echo_request(ECHO_REQUEST_V4, id, seq);
            match sendto(sock.as_raw_fd(), &packet, &dest, MsgFlags::empty()) {
                // A request the kernel refused to send is a lost one too.
                Ok(_) | Err(Errno::ENETUNREACH | Errno::EHOSTUNREACH | Errno::EAGAIN) => {}
                Err(e) => return Err(e),
            }
            answered.push(false);
            next += interval;
        }
        loop {
            match recvfrom::<SockaddrStorage>(sock.as_raw_fd(), &mut buf) {
                Ok((len, from)) => {
                    if from.as_ref().and_then(source_ip) != Some(IpAddr::V4(addr)) {
                        continue;
                    }
                    if let Some(seq) = reply_seq(&buf[..len], id) {
                        // The latest request with this 16-bit sequence number.
                        let base = answered.len().saturating_sub(1) & !0xffff;
                        let mut i = base + usize::from(seq);
                        if i >= answered.len() {
                            i = i.wrapping_sub(0x10000);
                        }
                        if let Some(slot) = answered.get_mut(i) {
                            *slot = true;
                        }
                    }
                }
                Err(Errno::EAGAIN | Errno::EINTR) => break,
                Err(e) => return Err(e),
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(PingCount {
        sent: answered.len() as u64,
        received: answered.iter().filter(|a| **a).count() as u64,
        lost: answered
            .iter()
            .enumerate()
            .filter(|(_, a)| !**a)
            .map(|(i, _)| i as u64)
            .take(20)
            .collect(),
    })
}

/// The sequence number of an IPv4 echo reply (IP header included) with identifier `id`.
fn reply_seq(packet: &[u8], id: u16) -> Option<u16> {
    let header_len = usize::from(packet.first()? & 0x0f) * 4;
    let icmp = packet.get(header_len..)?;
    (icmp.len() >= 8 && icmp[0] == ECHO_REPLY_V4 && icmp[4..6] == id.to_be_bytes())
        .then(|| u16::from_be_bytes([icmp[6], icmp[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_request_verifies_to_zero() {
        let packet = echo_request(ECHO_REQUEST_V4, 0x1234, 1);
        assert_eq!(checksum(&packet), 0);
        // RFC 1071 example bytes
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    #[test]
    fn replies_are_matched_by_type_id_and_seq() {
        let mut v4 = vec![0x45u8; 20];
        v4.extend_from_slice(&[ECHO_REPLY_V4, 0, 0, 0, 0x12, 0x34, 0, 1]);
        let a4: IpAddr = "198.18.0.1".parse().unwrap();
        assert!(is_reply(&v4, a4, 0x1234, 1));
        assert!(!is_reply(&v4, a4, 0x1234, 2));
        assert!(!is_reply(&v4, a4, 0x9999, 1));
        let a6: IpAddr = "2001:2::1".parse().unwrap();
        assert!(is_reply(
            &[ECHO_REPLY_V6, 0, 0, 0, 0x12, 0x34, 0, 1],
            a6,
            0x1234,
            1
        ));
        assert!(!is_reply(
            &[ECHO_REQUEST_V6, 0, 0, 0, 0x12, 0x34, 0, 1],
            a6,
            0x1234,
            1
        ));
        assert!(!is_reply(&[], a4, 0, 0));
    }

    #[test]
    fn stream_replies_give_their_sequence_number() {
        let mut v4 = vec![0x45u8; 20];
        v4.extend_from_slice(&[ECHO_REPLY_V4, 0, 0, 0, 0x12, 0x34, 0x01, 0x02]);
        assert_eq!(reply_seq(&v4, 0x1234), Some(0x0102));
        assert_eq!(reply_seq(&v4, 0x9999), None);
        v4[20] = ECHO_REQUEST_V4;
        assert_eq!(reply_seq(&v4, 0x1234), None);
        assert_eq!(reply_seq(&[], 0x1234), None);
    }

    #[test]
    fn ping_from_a_missing_namespace_is_false() {
        assert!(!ping("rcnit-does-not-exist", [127, 0, 0, 1]));
    }
}
