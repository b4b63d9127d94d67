//! The DHCPv4 client exchanges of RFC 2131 over a [`Transport`]: acquire
//! (DISCOVER → OFFER → REQUEST → ACK), renew (unicast REQUEST to the granting server at T1),
//! rebind (broadcast REQUEST at T2) and release. No sockets and no clock here: the daemon
//! passes a UDP transport inside the container netns, the unit tests a scripted server.
//!
//! Messages before an address is bound set the broadcast flag, so that the server's answer
//! reaches a UDP socket on an interface that has no address yet.

use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

use super::message::{code, Message, MessageType, BOOT_REPLY, BOOT_REQUEST};

use super::conf::LeaseParams;
use super::lease::{AckError, Lease};

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// 255.255.255.255:67 out of the interface.
    Broadcast,
    /// A server's address, port 67.
    Server(Ipv4Addr),
}

/// Sends and receives DHCP messages on one interface.
pub trait Transport {
    fn send(&mut self, msg: &Message, to: Dest) -> io::Result<()>;
    /// The next DHCP message that arrives within `wait`, `None` when none did. Undecodable
    /// datagrams are skipped by the transport.
    fn recv(&mut self, wait: Duration) -> io::Result<Option<Message>>;
}

/// Who the client is on the wire.
#[derive(Debug, Clone)]
pub struct Identity {
    pub mac: [u8; 6],
    /// Go's `<containerID>/<network>/<ifname>`, sent as option 61 after a 0 type byte.
    pub client_id: Vec<u8>,
    pub params: LeaseParams,
    /// Go's `-broadcast`: ask for broadcast answers on renewals too, not only before an
    /// address is bound.
    pub always_broadcast: bool,
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("DHCP socket: {0}")]
    Io(#[from] io::Error),
    #[error("no {what} from any DHCP server within {}s", .waited.as_secs())]
    NoReply {
        what: &'static str,
        waited: Duration,
    },
    #[error("DHCP server {server} refused the request (DHCPNAK)")]
    Nak { server: Ipv4Addr },
    #[error("unusable DHCPACK: {0}")]
    BadAck(#[from] AckError),
}

/// The retransmission waits of one exchange: 2 s doubling up to `max_wait`, cut to `budget`
/// in total (RFC 2131 §4.1 suggests 4 s doubling to 64 s; containers are waiting for it).
pub fn schedule(budget: Duration, max_wait: Duration) -> Vec<Duration> {
    let mut out = Vec::new();
    let mut left = budget;
    let mut next = Duration::from_secs(2).min(max_wait);
    while !left.is_zero() && !next.is_zero() {
        let wait = next.min(left);
        out.push(wait);
        left -= wait;
        next = (next * 2).min(max_wait);
    }
    out
}

/// One client run: an identity on a transport, with a retransmission schedule and a clock
/// (Unix seconds) to stamp leases with.
pub struct Client<'a, T: Transport> {
    pub transport: &'a mut T,
    pub id: &'a Identity,
    pub schedule: Vec<Duration>,
    pub now: &'a dyn Fn() -> u64,
    pub xid: &'a mut dyn FnMut() -> u32,
}

impl<T: Transport> Client<'_, T> {
    /// INIT → SELECTING → REQUESTING → BOUND. `requested` asks for a known address again.
    pub fn acquire(&mut self, requested: Option<Ipv4Addr>) -> Result<Lease, ClientError> {
        let xid = (self.xid)();
        let mut discover = self.message(xid, MessageType::Discover, Ipv4Addr::UNSPECIFIED);
        if let Some(ip) = requested {
            discover.set_ipv4(code::REQUESTED_IP, ip);
        }
        let offer = self.exchange(&discover, Dest::Broadcast, "DHCPOFFER", |m| {
            m.msg_type() == Some(MessageType::Offer) && !m.yiaddr.is_unspecified()
        })?;
        let server = server_id(&offer).unwrap_or(Ipv4Addr::UNSPECIFIED);
        let mut request = self.message(xid, MessageType::Request, Ipv4Addr::UNSPECIFIED);
        request.set_ipv4(code::REQUESTED_IP, offer.yiaddr);
        request.set_ipv4(code::SERVER_ID, server);
        let reply = self.exchange(&request, Dest::Broadcast, "DHCPACK", |m| {
            is_ack_or_nak(m) && server_id(m).is_none_or(|s| s == server)
        })?;
        self.bound(&reply, server)
    }

    /// RENEWING (unicast to the server that granted `lease`) or REBINDING (broadcast).
    pub fn renew(&mut self, lease: &Lease, rebinding: bool) -> Result<Lease, ClientError> {
        let xid = (self.xid)();
        let request = self.message(xid, MessageType::Request, lease.address);
        let dest = if rebinding {
            Dest::Broadcast
        } else {
            Dest::Server(lease.server)
        };
        let reply = self.exchange(&request, dest, "DHCPACK", is_ack_or_nak)?;
        self.bound(&reply, lease.server)
    }

    /// DHCPRELEASE to the granting server; there is no answer to wait for.
    pub fn release(&mut self, lease: &Lease) -> Result<(), ClientError> {
        let xid = (self.xid)();
        let mut msg = self.message(xid, MessageType::Release, lease.address);
        msg.remove(code::PARAMETER_REQUEST_LIST);
        msg.set_ipv4(code::SERVER_ID, lease.server);
        self.transport.send(&msg, Dest::Server(lease.server))?;
        Ok(())
    }

    fn bound(&self, reply: &Message, server: Ipv4Addr) -> Result<Lease, ClientError> {
        if reply.msg_type() == Some(MessageType::Nak) {
            return Err(ClientError::Nak {
                server: server_id(reply).unwrap_or(server),
            });
        }
        Ok(Lease::from_ack(reply, (self.now)(), server)?)
    }

    /// A request of `kind` with the provided options, the client identifier and the
    /// parameter request list.
    fn message(&self, xid: u32, kind: MessageType, ciaddr: Ipv4Addr) -> Message {
        let mut m = Message::new(BOOT_REQUEST, xid, self.id.mac);
        m.ciaddr = ciaddr;
        m.broadcast = ciaddr.is_unspecified() || self.id.always_broadcast;
        let mut client_id = vec![0];
        client_id.extend_from_slice(&self.id.client_id);
        m.set(code::CLIENT_ID, client_id);
        // Provided options may replace the client identifier (as in Go), not the ones below.
        for (code, value) in &self.id.params.provide {
            m.set(*code, value.clone());
        }
        m.set_type(kind);
        m.set(code::PARAMETER_REQUEST_LIST, self.id.params.request.clone());
        m
    }

    /// Sends `msg` and waits for a reply with its xid that `wanted` accepts, retransmitting
    /// on the schedule.
    fn exchange(
        &mut self,
        msg: &Message,
        dest: Dest,
        what: &'static str,
        wanted: impl Fn(&Message) -> bool,
    ) -> Result<Message, ClientError> {
        for wait in self.schedule.clone() {
            self.transport.send(msg, dest)?;
            let started = std::time::Instant::now();
            loop {
                let left = wait.saturating_sub(started.elapsed());
                let Some(reply) = self.transport.recv(left)? else {
                    break;
                };
                if reply.op == BOOT_REPLY
                    && reply.xid == msg.xid
                    && reply.chaddr[..6] == self.id.mac
                    && wanted(&reply)
                {
                    return Ok(reply);
                }
                if left.is_zero() {
                    break;
                }
            }
        }
        Err(ClientError::NoReply {
            what,
            waited: self.schedule.iter().sum(),
        })
    }
}

fn is_ack_or_nak(m: &Message) -> bool {
    matches!(m.msg_type(), Some(MessageType::Ack | MessageType::Nak))
}

fn server_id(m: &Message) -> Option<Ipv4Addr> {
    m.ipv4(code::SERVER_ID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

    /// A scripted server: answers each sent message with what `answer` returns.
    struct FakeServer<F: FnMut(&Message, Dest) -> Vec<Message>> {
        answer: F,
        sent: Vec<(Message, Dest)>,
        inbox: VecDeque<Message>,
    }

    impl<F: FnMut(&Message, Dest) -> Vec<Message>> Transport for FakeServer<F> {
        fn send(&mut self, msg: &Message, to: Dest) -> io::Result<()> {
            self.sent.push((msg.clone(), to));
            let replies = (self.answer)(msg, to);
            self.inbox.extend(replies);
            Ok(())
        }
        fn recv(&mut self, _wait: Duration) -> io::Result<Option<Message>> {
            Ok(self.inbox.pop_front())
        }
    }

    fn fake<F: FnMut(&Message, Dest) -> Vec<Message>>(answer: F) -> FakeServer<F> {
        FakeServer {
            answer,
            sent: Vec::new(),
            inbox: VecDeque::new(),
        }
    }

    fn reply_to(req: &Message, kind: MessageType, yiaddr: Ipv4Addr) -> Message {
        let mut mac = [0; 6];
        mac.copy_from_slice(&req.chaddr[..6]);
        let mut m = Message::new(BOOT_REPLY, req.xid, mac);
        m.yiaddr = yiaddr;
        m.set_type(kind);
        m.set_ipv4(code::SERVER_ID, SERVER);
        m.set_ipv4(code::SUBNET_MASK, Ipv4Addr::new(255, 255, 255, 0));
        m.set_ipv4(code::ROUTER, SERVER);
        m.set(code::LEASE_TIME, 120u32.to_be_bytes().to_vec());
        m.set(code::RENEWAL_TIME, 10u32.to_be_bytes().to_vec());
        m.set(code::REBINDING_TIME, 100u32.to_be_bytes().to_vec());
        m
    }

    /// A well-behaved server handing out 198.18.0.50.
    fn good_server(req: &Message, _to: Dest) -> Vec<Message> {
        let ip = Ipv4Addr::new(198, 18, 0, 50);
        match req.msg_type() {
            Some(MessageType::Discover) => vec![reply_to(req, MessageType::Offer, ip)],
            Some(MessageType::Request) => vec![reply_to(req, MessageType::Ack, ip)],
            _ => vec![],
        }
    }

    fn identity() -> Identity {
        Identity {
            mac: MAC,
            client_id: b"cid/net/eth0".to_vec(),
            params: LeaseParams {
                provide: vec![(12, b"web-0".to_vec())],
                request: vec![121, 1, 3],
                ..LeaseParams::default()
            },
            always_broadcast: false,
        }
    }

    fn run<T: Transport, R>(t: &mut T, budget: u64, f: impl FnOnce(&mut Client<'_, T>) -> R) -> R {
        let id = identity();
        let now = || 5000;
        let mut n = 0;
        let mut xid = || {
            n += 1;
            0x1000 + n
        };
        let mut c = Client {
            transport: t,
            id: &id,
            schedule: schedule(Duration::from_secs(budget), Duration::from_secs(16)),
            now: &now,
            xid: &mut xid,
        };
        f(&mut c)
    }

    #[test]
    fn schedule_doubles_and_fits_the_budget() {
        let s: Vec<u64> = schedule(Duration::from_secs(30), Duration::from_secs(16))
            .iter()
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(s, [2, 4, 8, 16]);
        let s: Vec<u64> = schedule(Duration::from_secs(10), Duration::from_secs(16))
            .iter()
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(s, [2, 4, 4]);
        let s: Vec<u64> = schedule(Duration::from_secs(20), Duration::from_secs(4))
            .iter()
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(s, [2, 4, 4, 4, 4, 2]);
    }

    #[test]
    fn always_broadcast_sets_the_flag_on_renewals_too() {
        let lease = run(&mut fake(good_server), 10, |c| c.acquire(None)).unwrap();
        let mut t = fake(good_server);
        let mut id = identity();
        id.always_broadcast = true;
        let now = || 1;
        let mut xid = || 7;
        let mut c = Client {
            transport: &mut t,
            id: &id,
            schedule: schedule(Duration::from_secs(2), Duration::from_secs(2)),
            now: &now,
            xid: &mut xid,
        };
        c.renew(&lease, false).unwrap();
        assert!(t.sent[0].0.broadcast);
    }

    #[test]
    fn acquire_goes_discover_offer_request_ack() {
        let mut t = fake(good_server);
        let lease = run(&mut t, 10, |c| c.acquire(None)).unwrap();
        assert_eq!(lease.address, Ipv4Addr::new(198, 18, 0, 50));
        assert_eq!(lease.server, SERVER);
        assert_eq!(
            (lease.bound_at, lease.t1_secs, lease.t2_secs),
            (5000, 10, 100)
        );

        let kinds: Vec<_> = t.sent.iter().map(|(m, d)| (m.msg_type(), *d)).collect();
        assert_eq!(
            kinds,
            [
                (Some(MessageType::Discover), Dest::Broadcast),
                (Some(MessageType::Request), Dest::Broadcast)
            ]
        );
        let (req, _) = &t.sent[1];
        assert!(req.broadcast);
        assert_eq!(req.xid, t.sent[0].0.xid);
        assert_eq!(
            req.ipv4(code::REQUESTED_IP),
            Some(Ipv4Addr::new(198, 18, 0, 50))
        );
        assert_eq!(req.ipv4(code::SERVER_ID), Some(SERVER));
        assert_eq!(req.get(code::CLIENT_ID), Some(&b"\0cid/net/eth0"[..]));
        assert_eq!(req.get(12), Some(&b"web-0"[..])); // host name, as provided
        assert_eq!(
            req.get(code::PARAMETER_REQUEST_LIST),
            Some(&[code::CLASSLESS_ROUTES, code::SUBNET_MASK, code::ROUTER][..])
        );
    }

    #[test]
    fn replies_for_other_transactions_or_clients_are_ignored() {
        let mut t = fake(|req: &Message, to| {
            let mut stray = good_server(req, to);
            for m in &mut stray {
                m.xid = req.xid ^ 1;
            }
            let mut other_mac = good_server(req, to);
            for m in &mut other_mac {
                m.chaddr[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            }
            stray
                .into_iter()
                .chain(other_mac)
                .chain(good_server(req, to))
                .collect()
        });
        let lease = run(&mut t, 10, |c| c.acquire(None)).unwrap();
        assert_eq!(lease.address, Ipv4Addr::new(198, 18, 0, 50));
        assert_eq!(t.sent.len(), 2);
    }

    #[test]
    fn a_silent_server_means_retransmits_then_no_reply() {
        let mut t = fake(|_: &Message, _| vec![]);
        let e = run(&mut t, 10, |c| c.acquire(None)).unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::NoReply {
                    what: "DHCPOFFER",
                    ..
                }
            ),
            "{e}"
        );
        // One DISCOVER per scheduled wait, all with one xid.
        assert_eq!(t.sent.len(), 3);
        assert!(t.sent.iter().all(|(m, _)| m.xid == t.sent[0].0.xid));
    }

    #[test]
    fn renew_is_unicast_without_broadcast_flag_and_rebind_is_broadcast() {
        let mut t = fake(good_server);
        let lease = run(&mut t, 10, |c| c.acquire(None)).unwrap();
        t.sent.clear();
        let renewed = run(&mut t, 10, |c| c.renew(&lease, false)).unwrap();
        assert_eq!(renewed.address, lease.address);
        let (req, dest) = &t.sent[0];
        assert_eq!(*dest, Dest::Server(SERVER));
        assert_eq!(req.ciaddr, lease.address);
        assert!(!req.broadcast);
        assert_eq!(req.get(code::SERVER_ID), None);
        assert_eq!(req.get(code::REQUESTED_IP), None);

        t.sent.clear();
        run(&mut t, 10, |c| c.renew(&lease, true)).unwrap();
        assert_eq!(t.sent[0].1, Dest::Broadcast);
    }

    #[test]
    fn a_nak_on_renew_is_an_error() {
        let mut t =
            fake(|req: &Message, _| vec![reply_to(req, MessageType::Nak, Ipv4Addr::UNSPECIFIED)]);
        let lease = run(&mut fake(good_server), 10, |c| c.acquire(None)).unwrap();
        let e = run(&mut t, 10, |c| c.renew(&lease, false)).unwrap_err();
        assert!(matches!(e, ClientError::Nak { server: SERVER }), "{e}");
    }

    #[test]
    fn release_names_the_lease_and_server() {
        let lease = run(&mut fake(good_server), 10, |c| c.acquire(None)).unwrap();
        let mut t = fake(|_: &Message, _| vec![]);
        run(&mut t, 10, |c| c.release(&lease)).unwrap();
        let (m, dest) = &t.sent[0];
        assert_eq!(*dest, Dest::Server(SERVER));
        assert_eq!(m.msg_type(), Some(MessageType::Release));
        assert_eq!(m.ciaddr, lease.address);
        assert_eq!(m.get(code::PARAMETER_REQUEST_LIST), None);
    }

    #[test]
    fn an_ack_without_a_mask_is_refused() {
        let mut t = fake(|req: &Message, to| {
            let mut v = good_server(req, to);
            for m in &mut v {
                m.remove(code::SUBNET_MASK);
            }
            v
        });
        let e = run(&mut t, 10, |c| c.acquire(None)).unwrap_err();
        assert!(matches!(e, ClientError::BadAck(AckError::NoMask)), "{e}");
    }
}
