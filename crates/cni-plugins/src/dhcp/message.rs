//! The DHCPv4 message on the wire (RFC 2131 §2: the BOOTP header, the magic cookie, then
//! options as code-length-value) and the few options of RFC 2132 and RFC 3442 the client
//! reads and writes.
//!
//! Our own codec rather than a DHCP library: the client needs one message type and a dozen
//! options, and the library it used (dhcproto, with hickory-proto for DNS names and rand)
//! made up about a quarter of the multi-call binary every plugin starts from.
//!
//! Options are kept as raw bytes, one entry per code, and typed only when read: an option
//! whose length is wrong for its type reads as absent. Instances of one code that the sender
//! split (RFC 3396) are joined on decode; values over 255 bytes are split on encode.
//! Option overload (52: options in the `sname`/`file` fields) is not followed.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// `op` of a message a client sends.
pub const BOOT_REQUEST: u8 = 1;
/// `op` of a message a server sends.
pub const BOOT_REPLY: u8 = 2;

/// The option codes the client uses (RFC 2132, RFC 3442).
pub mod code {
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const STATIC_ROUTES: u8 = 33;
    pub const REQUESTED_IP: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLIENT_ID: u8 = 61;
    pub const CLASSLESS_ROUTES: u8 = 121;
}

const PAD: u8 = 0;
const END: u8 = 255;
/// RFC 2131 §3: the first four bytes of the options field.
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// op .. file: the fixed part before the cookie.
const HEADER_LEN: usize = 236;
/// The `flags` bit asking the server to broadcast its answer.
const BROADCAST_FLAG: u16 = 0x8000;
const HTYPE_ETHERNET: u8 = 1;

/// Option 53 (RFC 2132 §9.6), the kinds the client sends or reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Ack = 5,
    Nak = 6,
    Release = 7,
}

impl MessageType {
    fn from_u8(v: u8) -> Option<MessageType> {
        Some(match v {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            _ => return None,
        })
    }
}

/// One DHCPv4 message on an Ethernet link. `hops`, `secs`, `sname` and `file` are always
/// zero on encode and ignored on decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub op: u8,
    pub xid: u32,
    pub broadcast: bool,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub siaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    /// The client hardware address field; on Ethernet the MAC is its first 6 bytes.
    pub chaddr: [u8; 16],
    options: BTreeMap<u8, Vec<u8>>,
}

impl Message {
    /// A message with addresses 0.0.0.0, no flags and no options.
    pub fn new(op: u8, xid: u32, mac: [u8; 6]) -> Message {
        let mut chaddr = [0; 16];
        chaddr[..6].copy_from_slice(&mac);
        let zero = Ipv4Addr::UNSPECIFIED;
        Message {
            op,
            xid,
            broadcast: false,
            ciaddr: zero,
            yiaddr: zero,
            siaddr: zero,
            giaddr: zero,
            chaddr,
            options: BTreeMap::new(),
        }
    }

    /// Sets option `code` to `value`, replacing what it held.
    pub fn set(&mut self, code: u8, value: Vec<u8>) {
        self.options.insert(code, value);
    }

    pub fn remove(&mut self, code: u8) {
        self.options.remove(&code);
    }

    /// The raw value of option `code`.
    pub fn get(&self, code: u8) -> Option<&[u8]> {
        self.options.get(&code).map(Vec::as_slice)
    }

    pub fn set_type(&mut self, kind: MessageType) {
        self.set(code::MESSAGE_TYPE, vec![kind as u8]);
    }

    pub fn set_ipv4(&mut self, code: u8, ip: Ipv4Addr) {
        self.set(code, ip.octets().to_vec());
    }

    pub fn msg_type(&self) -> Option<MessageType> {
        match self.get(code::MESSAGE_TYPE)? {
            [v] => MessageType::from_u8(*v),
            _ => None,
        }
    }

    /// An option holding one address (mask, server identifier, requested address).
    pub fn ipv4(&self, code: u8) -> Option<Ipv4Addr> {
        let b: [u8; 4] = self.get(code)?.try_into().ok()?;
        Some(Ipv4Addr::from(b))
    }

    /// An option holding one or more addresses (routers).
    pub fn ipv4s(&self, code: u8) -> Option<Vec<Ipv4Addr>> {
        let v = self.get(code)?;
        if v.is_empty() || v.len() % 4 != 0 {
            return None;
        }
        Some(v.chunks_exact(4).map(ipv4_at).collect())
    }

    /// An option holding a 32-bit number (lease, renewal and rebinding times).
    pub fn u32(&self, code: u8) -> Option<u32> {
        let b: [u8; 4] = self.get(code)?.try_into().ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// Option 33: pairs of destination and router.
    pub fn static_routes(&self) -> Option<Vec<(Ipv4Addr, Ipv4Addr)>> {
        let v = self.get(code::STATIC_ROUTES)?;
        if v.is_empty() || v.len() % 8 != 0 {
            return None;
        }
        Some(
            v.chunks_exact(8)
                .map(|p| (ipv4_at(&p[..4]), ipv4_at(&p[4..])))
                .collect(),
        )
    }

    /// Option 121 (RFC 3442): each route is the prefix length, the destination's significant
    /// octets, then the router.
    pub fn classless_routes(&self) -> Option<Vec<(Ipv4Net, Ipv4Addr)>> {
        let mut v = self.get(code::CLASSLESS_ROUTES)?;
        let mut routes = Vec::new();
        while let Some((&width, rest)) = v.split_first() {
            let significant = usize::from(width).div_ceil(8);
            if width > 32 || rest.len() < significant + 4 {
                return None;
            }
            let mut dst = [0; 4];
            dst[..significant].copy_from_slice(&rest[..significant]);
            let net = Ipv4Net::new(Ipv4Addr::from(dst), width).ok()?.trunc();
            routes.push((net, ipv4_at(&rest[significant..significant + 4])));
            v = &rest[significant + 4..];
        }
        Some(routes)
    }

    /// The datagram: header, cookie, options in code order, end.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(300);
        out.extend_from_slice(&[self.op, HTYPE_ETHERNET, 6, 0]);
        out.extend_from_slice(&self.xid.to_be_bytes());
        out.extend_from_slice(&[0, 0]); // secs
        let flags = if self.broadcast { BROADCAST_FLAG } else { 0 };
        out.extend_from_slice(&flags.to_be_bytes());
        for ip in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            out.extend_from_slice(&ip.octets());
        }
        out.extend_from_slice(&self.chaddr);
        out.resize(HEADER_LEN, 0); // sname, file
        out.extend_from_slice(&MAGIC_COOKIE);
        for (&code, value) in &self.options {
            // RFC 3396: a longer value goes as consecutive instances of the code.
            let mut chunks = value.chunks(255).peekable();
            if chunks.peek().is_none() {
                out.extend_from_slice(&[code, 0]);
            }
            for chunk in chunks {
                out.extend_from_slice(&[code, chunk.len() as u8]);
                out.extend_from_slice(chunk);
            }
        }
        out.push(END);
        out
    }

    /// Reads a datagram; `None` when it is not a DHCP message (too short, no magic cookie).
    /// Options after a truncated one are dropped, as is the truncated one.
    pub fn decode(bytes: &[u8]) -> Option<Message> {
        if bytes.len() < HEADER_LEN + MAGIC_COOKIE.len()
            || bytes[HEADER_LEN..HEADER_LEN + 4] != MAGIC_COOKIE
        {
            return None;
        }
        let mut chaddr = [0; 16];
        chaddr.copy_from_slice(&bytes[28..44]);
        let mut m = Message {
            op: bytes[0],
            xid: u32::from_be_bytes(bytes[4..8].try_into().ok()?),
            broadcast: u16::from_be_bytes([bytes[10], bytes[11]]) & BROADCAST_FLAG != 0,
            ciaddr: ipv4_at(&bytes[12..16]),
            yiaddr: ipv4_at(&bytes[16..20]),
            siaddr: ipv4_at(&bytes[20..24]),
            giaddr: ipv4_at(&bytes[24..28]),
            chaddr,
            options: BTreeMap::new(),
        };
        let mut rest = &bytes[HEADER_LEN + 4..];
        while let Some((&code, tail)) = rest.split_first() {
            match code {
                END => break,
                PAD => rest = tail,
                _ => {
                    let Some((&len, tail)) = tail.split_first() else {
                        break;
                    };
                    let Some(value) = tail.get(..usize::from(len)) else {
                        break;
                    };
                    m.options.entry(code).or_default().extend_from_slice(value);
                    rest = &tail[usize::from(len)..];
                }
            }
        }
        Some(m)
    }
}

/// The address in the first four bytes of `b` (callers pass at least four).
fn ipv4_at(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// Option 121's value for `routes` (the encoding [`Message::classless_routes`] reads); only
/// the unit tests play the server.
#[cfg(test)]
pub fn classless_routes_value(routes: &[(Ipv4Net, Ipv4Addr)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (net, router) in routes {
        let significant = usize::from(net.prefix_len()).div_ceil(8);
        v.push(net.prefix_len());
        v.extend_from_slice(&net.network().octets()[..significant]);
        v.extend_from_slice(&router.octets());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn encode_lays_out_the_rfc_2131_header_cookie_and_options() {
        let mut m = Message::new(BOOT_REQUEST, 0x0102_0304, MAC);
        m.broadcast = true;
        m.ciaddr = ip("198.18.0.9");
        m.set_type(MessageType::Request);
        m.set(code::PARAMETER_REQUEST_LIST, vec![1, 3]);
        let b = m.encode();
        assert_eq!(&b[..4], [1, 1, 6, 0]);
        assert_eq!(&b[4..8], [1, 2, 3, 4]);
        assert_eq!(&b[10..12], [0x80, 0]);
        assert_eq!(&b[12..16], [198, 18, 0, 9]);
        assert_eq!(&b[28..34], MAC);
        assert!(b[34..236].iter().all(|&x| x == 0));
        assert_eq!(&b[236..240], MAGIC_COOKIE);
        // Options in code order, then end.
        assert_eq!(&b[240..], [53, 1, 3, 55, 2, 1, 3, 255]);
    }

    #[test]
    fn decode_reads_back_what_encode_wrote() {
        let mut m = Message::new(BOOT_REPLY, 77, MAC);
        m.yiaddr = ip("198.18.0.50");
        m.siaddr = ip("198.18.0.1");
        m.set_type(MessageType::Ack);
        m.set_ipv4(code::SUBNET_MASK, ip("255.255.255.0"));
        m.set(code::ROUTER, vec![198, 18, 0, 1, 198, 18, 0, 2]);
        m.set(code::LEASE_TIME, 120u32.to_be_bytes().to_vec());
        m.set(12, Vec::new()); // host name, empty
        let d = Message::decode(&m.encode()).unwrap();
        assert_eq!(d, m);
        assert_eq!(d.msg_type(), Some(MessageType::Ack));
        assert_eq!(d.ipv4(code::SUBNET_MASK), Some(ip("255.255.255.0")));
        assert_eq!(
            d.ipv4s(code::ROUTER),
            Some(vec![ip("198.18.0.1"), ip("198.18.0.2")])
        );
        assert_eq!(d.u32(code::LEASE_TIME), Some(120));
        assert_eq!(d.get(12), Some(&[][..]));
    }

    #[test]
    fn long_values_are_split_on_encode_and_joined_on_decode() {
        let mut m = Message::new(BOOT_REQUEST, 1, MAC);
        let long: Vec<u8> = (0..=255).collect();
        m.set(code::PARAMETER_REQUEST_LIST, long.clone());
        let b = m.encode();
        assert_eq!(&b[240..242], [55, 255]);
        assert_eq!(&b[497..499], [55, 1]);
        assert_eq!(Message::decode(&b).unwrap().get(55), Some(&long[..]));
    }

    #[test]
    fn pads_are_skipped_and_a_truncated_option_ends_the_list() {
        let mut b = Message::new(BOOT_REPLY, 1, MAC).encode();
        b.pop(); // end
        b.extend_from_slice(&[0, 0, 53, 1, 2, 0, 54, 4, 198, 18]);
        let m = Message::decode(&b).unwrap();
        assert_eq!(m.msg_type(), Some(MessageType::Offer));
        assert_eq!(m.get(code::SERVER_ID), None);
    }

    #[test]
    fn not_a_dhcp_message_is_refused() {
        let b = Message::new(BOOT_REPLY, 1, MAC).encode();
        assert!(Message::decode(&b[..239]).is_none());
        let mut bad_cookie = b.clone();
        bad_cookie[236] = 0;
        assert!(Message::decode(&bad_cookie).is_none());
        assert!(Message::decode(&[]).is_none());
    }

    #[test]
    fn options_of_the_wrong_length_read_as_absent() {
        let mut m = Message::new(BOOT_REPLY, 1, MAC);
        m.set(code::SUBNET_MASK, vec![255, 255, 255]);
        m.set(code::ROUTER, vec![198, 18, 0, 1, 9]);
        m.set(code::LEASE_TIME, vec![0, 0, 120]);
        m.set(code::STATIC_ROUTES, vec![198, 18, 0, 0]);
        m.set(code::MESSAGE_TYPE, vec![4]);
        assert_eq!(m.ipv4(code::SUBNET_MASK), None);
        assert_eq!(m.ipv4s(code::ROUTER), None);
        assert_eq!(m.u32(code::LEASE_TIME), None);
        assert_eq!(m.static_routes(), None);
        assert_eq!(m.msg_type(), None);
    }

    #[test]
    fn classless_routes_follow_rfc_3442() {
        let mut m = Message::new(BOOT_REPLY, 1, MAC);
        // RFC 3442 §3's examples: a default route, a /9, a /24 and an on-link /32.
        m.set(
            code::CLASSLESS_ROUTES,
            vec![
                0, 198, 18, 0, 1, //
                9, 198, 128, 198, 18, 0, 2, //
                24, 198, 19, 7, 198, 18, 0, 3, //
                32, 198, 19, 8, 9, 0, 0, 0, 0,
            ],
        );
        let want: Vec<(Ipv4Net, Ipv4Addr)> = vec![
            ("0.0.0.0/0".parse().unwrap(), ip("198.18.0.1")),
            ("198.128.0.0/9".parse().unwrap(), ip("198.18.0.2")),
            ("198.19.7.0/24".parse().unwrap(), ip("198.18.0.3")),
            ("198.19.8.9/32".parse().unwrap(), Ipv4Addr::UNSPECIFIED),
        ];
        assert_eq!(m.classless_routes(), Some(want.clone()));
        assert_eq!(
            classless_routes_value(&want),
            m.get(code::CLASSLESS_ROUTES).unwrap()
        );
        // A width over 32, or a route cut short, makes the whole option unusable.
        m.set(code::CLASSLESS_ROUTES, vec![33, 1, 2, 3, 4, 5, 0, 0, 0, 0]);
        assert_eq!(m.classless_routes(), None);
        m.set(code::CLASSLESS_ROUTES, vec![24, 198, 19, 7, 198, 18]);
        assert_eq!(m.classless_routes(), None);
    }
}
