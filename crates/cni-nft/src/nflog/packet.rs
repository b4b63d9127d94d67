//! The headers of a logged packet's copied bytes: addresses, transport protocol, ports and
//! TCP flags. The copy starts at the network header (what nfnetlink_log sends for the IP
//! hooks); it may be cut short (the group's copy range), so every read is bounds-checked and
//! a header that does not fit is left out, never guessed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What the network and transport headers of a packet say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeaders {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The transport protocol number (6 TCP, 17 UDP, 132 SCTP, 1 ICMP, 58 ICMPv6).
    pub protocol: u8,
    pub transport: Transport,
}

/// The transport header, when the copy holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp {
        src_port: u16,
        dst_port: u16,
        flags: TcpFlags,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Sctp {
        src_port: u16,
        dst_port: u16,
    },
    Icmp {
        kind: u8,
        code: u8,
    },
    /// Another protocol, a later fragment, or a header cut off by the copy range.
    Unknown,
}

/// The flags byte of a TCP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const ACK: u8 = 0x10;

    /// A connection's first packet: SYN without ACK.
    pub fn is_syn(self) -> bool {
        self.0 & (Self::SYN | Self::ACK) == Self::SYN
    }
}

impl Transport {
    /// The source and destination ports, for the protocols that have them.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match *self {
            Transport::Tcp {
                src_port, dst_port, ..
            }
            | Transport::Udp { src_port, dst_port }
            | Transport::Sctp { src_port, dst_port } => Some((src_port, dst_port)),
            _ => None,
        }
    }
}

/// IPv6 extension headers walked to find the transport header (hop-by-hop, routing,
/// destination options); a fragment header's first fragment is walked through too.
const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DEST_OPTIONS: u8 = 60;
/// More extension headers than this and the packet is left without its transport.
const MAX_EXTENSIONS: usize = 8;

impl PacketHeaders {
    /// The headers of `bytes` (starting at the IP header), or `None` when even the IP header
    /// is not there or is not IPv4 or IPv6.
    pub fn parse(bytes: &[u8]) -> Option<PacketHeaders> {
        match bytes.first()? >> 4 {
            4 => Self::ipv4(bytes),
            6 => Self::ipv6(bytes),
            _ => None,
        }
    }

    fn ipv4(b: &[u8]) -> Option<PacketHeaders> {
        let ihl = usize::from(b[0] & 0x0f) * 4;
        if ihl < 20 || b.len() < 20 {
            return None;
        }
        let protocol = b[9];
        let src = Ipv4Addr::from(<[u8; 4]>::try_from(&b[12..16]).ok()?);
        let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&b[16..20]).ok()?);
        let fragment_offset = u16::from_be_bytes([b[6], b[7]]) & 0x1fff;
        let transport = match (fragment_offset, b.get(ihl..)) {
            (0, Some(rest)) => transport(protocol, rest, 1),
            _ => Transport::Unknown,
        };
        Some(PacketHeaders {
            src: src.into(),
            dst: dst.into(),
            protocol,
            transport,
        })
    }

    fn ipv6(b: &[u8]) -> Option<PacketHeaders> {
        if b.len() < 40 {
            return None;
        }
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?);
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).ok()?);
        let (mut next, mut at) = (b[6], 40usize);
        let mut transport_found = None;
        for _ in 0..MAX_EXTENSIONS {
            match next {
                HOP_BY_HOP | ROUTING | DEST_OPTIONS => {
                    let Some(h) = b.get(at..at + 2) else { break };
                    next = h[0];
                    at += (usize::from(h[1]) + 1) * 8;
                }
                FRAGMENT => {
                    let Some(h) = b.get(at..at + 8) else { break };
                    let offset = u16::from_be_bytes([h[2], h[3]]) >> 3;
                    next = h[0];
                    at += 8;
                    if offset != 0 {
                        transport_found = Some(Transport::Unknown);
                        break;
                    }
                }
                _ => {
                    let rest = b.get(at..).unwrap_or_default();
                    transport_found = Some(transport(next, rest, 58));
                    break;
                }
            }
        }
        Some(PacketHeaders {
            src: src.into(),
            dst: dst.into(),
            protocol: next,
            transport: transport_found.unwrap_or(Transport::Unknown),
        })
    }
}

/// The transport header of `protocol` at the start of `b`; `icmp` is the ICMP number of the
/// IP version (1, or 58 for ICMPv6).
fn transport(protocol: u8, b: &[u8], icmp: u8) -> Transport {
    let ports = || -> Option<(u16, u16)> {
        let h = b.get(..4)?;
        Some((
            u16::from_be_bytes([h[0], h[1]]),
            u16::from_be_bytes([h[2], h[3]]),
        ))
    };
    match protocol {
        6 => match (ports(), b.get(13)) {
            (Some((src_port, dst_port)), Some(flags)) => Transport::Tcp {
                src_port,
                dst_port,
                flags: TcpFlags(*flags),
            },
            _ => Transport::Unknown,
        },
        17 => ports().map_or(Transport::Unknown, |(src_port, dst_port)| Transport::Udp {
            src_port,
            dst_port,
        }),
        132 => ports().map_or(Transport::Unknown, |(src_port, dst_port)| Transport::Sctp {
            src_port,
            dst_port,
        }),
        p if p == icmp => match b.get(..2) {
            Some(h) => Transport::Icmp {
                kind: h[0],
                code: h[1],
            },
            None => Transport::Unknown,
        },
        _ => Transport::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(protocol: u8, transport: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        p.extend([198, 18, 1, 2, 198, 18, 2, 3]);
        p.extend_from_slice(transport);
        p
    }

    fn ipv6(next: u8, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, next, 64];
        p.extend("2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend("2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(rest);
        p
    }

    #[test]
    fn a_tcp_syn_over_ipv4_gives_addresses_ports_and_flags() {
        let mut tcp = vec![0xc3, 0x50, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02];
        tcp.extend([0u8; 6]);
        let h = PacketHeaders::parse(&ipv4(6, &tcp)).unwrap();
        assert_eq!(h.src, "198.18.1.2".parse::<IpAddr>().unwrap());
        assert_eq!(h.dst, "198.18.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(h.protocol, 6);
        match h.transport {
            Transport::Tcp { flags, .. } => assert!(flags.is_syn()),
            other => panic!("{other:?}"),
        }
        assert_eq!(h.transport.ports(), Some((50000, 80)));
    }

    #[test]
    fn udp_over_ipv6_through_a_hop_by_hop_header() {
        let mut rest = vec![17, 0, 0, 0, 0, 0, 0, 0]; // hop-by-hop, 8 bytes, next UDP
        rest.extend([0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
        let h = PacketHeaders::parse(&ipv6(HOP_BY_HOP, &rest)).unwrap();
        assert_eq!(h.protocol, 17);
        assert_eq!(h.transport.ports(), Some((12345, 53)));
        assert_eq!(h.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn cut_headers_and_later_fragments_have_no_transport() {
        // The copy range cut the TCP header after the ports.
        let h = PacketHeaders::parse(&ipv4(6, &[0, 1, 0, 2])).unwrap();
        assert_eq!(h.transport, Transport::Unknown);
        // A later IPv4 fragment: its first bytes are data, not a header.
        let mut p = ipv4(17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        p[6] = 0x00;
        p[7] = 0x10;
        assert_eq!(
            PacketHeaders::parse(&p).unwrap().transport,
            Transport::Unknown
        );
        // A later IPv6 fragment.
        let frag = [17, 0, 0, 0x10, 0, 0, 0, 1, 0, 1, 0, 2];
        let h = PacketHeaders::parse(&ipv6(FRAGMENT, &frag)).unwrap();
        assert_eq!(h.transport, Transport::Unknown);
        // Not IP, or shorter than its header.
        assert_eq!(PacketHeaders::parse(&[0x20; 40]), None);
        assert_eq!(PacketHeaders::parse(&ipv4(6, &[])[..19]), None);
        assert_eq!(PacketHeaders::parse(&[]), None);
    }

    #[test]
    fn icmp_types_per_ip_version() {
        let h = PacketHeaders::parse(&ipv4(1, &[8, 0, 0, 0])).unwrap();
        assert_eq!(h.transport, Transport::Icmp { kind: 8, code: 0 });
        let h = PacketHeaders::parse(&ipv6(58, &[128, 0, 0, 0])).unwrap();
        assert_eq!(h.transport, Transport::Icmp { kind: 128, code: 0 });
    }
}
