//! The kernel's WireGuard over generic netlink: the family `wireguard` (its id resolved through
//! the controller, which also loads the module where it is one), `WG_CMD_GET_DEVICE` as a dump
//! and `WG_CMD_SET_DEVICE` (linux/wireguard.h). The messages are rust-netlink's
//! `netlink-packet-wireguard` codecs on `netlink-packet-generic`, the same core as the route
//! codec; the exchange (sequence numbers, ACKs, interrupted dumps) is `cni_netlink`'s.
//!
//! Two details of the kernel's side shape this client, as they shape `wg(8)`'s:
//!
//! - a dump may split one peer across messages: the continuation repeats the peer's public key
//!   and carries only more allowed IPs, which are merged into the peer before;
//! - a set request is one message per [`PEERS_PER_MESSAGE`] peers (the first carries the
//!   device's key, port and "replace peers" flag), so a node with thousands of peers never
//!   sends a message larger than the socket's buffer.

use std::fmt::Debug;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use ipnet::IpNet;
use netlink_packet_core::{
    Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, ParseableParametrized, NLM_F_ACK,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::traits::GenlFamily;
use netlink_packet_generic::{GenlHeader, GenlMessage};
use netlink_packet_wireguard::{
    WireguardAddressFamily, WireguardAllowedIp, WireguardAllowedIpAttr, WireguardAttribute,
    WireguardCmd, WireguardDeviceFlags, WireguardMessage, WireguardPeer, WireguardPeerAttribute,
    WireguardPeerFlags,
};

use cni_netlink::{retry_interrupted_dump, Connection, Dump, Protocol, SocketTransport};

use super::{Device, DeviceControl, DeviceUpdate, Error, Peer, PeerChange, PeerConfig};
use super::{PublicKey, SecretKey};
use crate::rtnl::{Error as NlError, KernelError, Transport};

/// Peers per set message.
pub const PEERS_PER_MESSAGE: usize = 64;

/// The family's name.
pub const FAMILY: &str = "wireguard";

/// A generic netlink socket and the `wireguard` family's id.
pub struct Genl {
    conn: Connection,
    family: u16,
}

impl std::fmt::Debug for Genl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Genl")
            .field("family", &self.family)
            .finish()
    }
}

impl Genl {
    /// Opens a socket in the calling thread's namespace and resolves the family;
    /// [`Error::NoKernelSupport`] when the kernel has no WireGuard.
    pub fn open() -> Result<Self, Error> {
        let socket = SocketTransport::open(Protocol::Generic).map_err(NlError::Io)?;
        Genl::resolve(Box::new(socket))
    }

    /// Resolves the family over any transport (a fake in unit tests).
    pub fn resolve(transport: Box<dyn Transport>) -> Result<Self, Error> {
        let mut conn = Connection::new(transport);
        let request = GenlMessage::from_payload(GenlCtrl {
            cmd: GenlCtrlCmd::GetFamily,
            nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY.to_string())],
        });
        let replies = match exchange(&mut conn, "CTRL_CMD_GETFAMILY", request, 0) {
            Err(e) if e.errno() == Some(libc::ENOENT) => return Err(Error::NoKernelSupport),
            other => other?.messages,
        };
        let family = replies
            .iter()
            .flat_map(|m| &m.payload.nlas)
            .find_map(|a| match a {
                GenlCtrlAttrs::FamilyId(id) => Some(*id),
                _ => None,
            })
            .ok_or_else(|| NlError::Unexpected("no family id in the controller's answer".into()))?;
        Ok(Genl { conn, family })
    }

    /// The family's id.
    pub fn family(&self) -> u16 {
        self.family
    }

    fn message(
        &self,
        cmd: WireguardCmd,
        attributes: Vec<WireguardAttribute>,
    ) -> GenlMessage<WireguardMessage> {
        let mut msg = GenlMessage::from_payload(WireguardMessage { cmd, attributes });
        msg.set_resolved_family_id(self.family);
        msg
    }

    /// The device with interface index `ifindex`.
    pub fn read(&mut self, ifindex: u32) -> Result<Device, Error> {
        let request = self.message(
            WireguardCmd::GetDevice,
            vec![WireguardAttribute::IfIndex(ifindex)],
        );
        let conn = &mut self.conn;
        let messages = retry_interrupted_dump("WG_CMD_GET_DEVICE", || {
            let reply = exchange(conn, "WG_CMD_GET_DEVICE", request.clone(), NLM_F_DUMP)?;
            Ok::<_, NlError>(if reply.interrupted {
                Dump::Interrupted
            } else {
                Dump::Complete(reply.messages)
            })
        })?;
        Ok(device_from(
            messages.into_iter().map(|m| m.payload.attributes),
        ))
    }

    /// Applies `update` to the device with interface index `ifindex`.
    pub fn apply(&mut self, ifindex: u32, update: &DeviceUpdate) -> Result<(), Error> {
        for attributes in set_messages(ifindex, update) {
            let msg = self.message(WireguardCmd::SetDevice, attributes);
            exchange(&mut self.conn, "WG_CMD_SET_DEVICE", msg, NLM_F_ACK)?;
        }
        Ok(())
    }
}

/// One kernel WireGuard device.
#[derive(Debug)]
pub struct KernelDevice {
    genl: Genl,
    ifindex: u32,
}

impl KernelDevice {
    /// The device with interface index `ifindex` over `genl`.
    pub fn new(genl: Genl, ifindex: u32) -> Self {
        KernelDevice { genl, ifindex }
    }
}

impl DeviceControl for KernelDevice {
    fn read(&mut self) -> Result<Device, Error> {
        self.genl.read(self.ifindex)
    }

    fn apply(&mut self, update: &DeviceUpdate) -> Result<(), Error> {
        self.genl.apply(self.ifindex, update)
    }
}

/// The attributes of each `WG_CMD_SET_DEVICE` message of `update` (at least one).
pub fn set_messages(ifindex: u32, update: &DeviceUpdate) -> Vec<Vec<WireguardAttribute>> {
    let mut first = vec![WireguardAttribute::IfIndex(ifindex)];
    if let Some(key) = &update.private_key {
        first.push(WireguardAttribute::PrivateKey(*key.expose()));
    }
    if let Some(port) = update.listen_port {
        first.push(WireguardAttribute::ListenPort(port));
    }
    if update.replace_peers {
        first.push(WireguardAttribute::Flags(
            WireguardDeviceFlags::ReplacePeers,
        ));
    }
    let mut chunks = update.peers.chunks(PEERS_PER_MESSAGE);
    if let Some(peers) = chunks.next() {
        first.push(WireguardAttribute::Peers(
            peers.iter().map(peer_attributes).collect(),
        ));
    }
    let mut out = vec![first];
    for peers in chunks {
        out.push(vec![
            WireguardAttribute::IfIndex(ifindex),
            WireguardAttribute::Peers(peers.iter().map(peer_attributes).collect()),
        ]);
    }
    out
}

fn peer_attributes(change: &PeerChange) -> WireguardPeer {
    let key = WireguardPeerAttribute::PublicKey(change.public_key().0);
    let c = match change {
        PeerChange::Remove(_) => {
            return WireguardPeer(vec![
                key,
                WireguardPeerAttribute::Flags(WireguardPeerFlags::RemoveMe),
            ])
        }
        PeerChange::Set(c) => c,
    };
    let psk = c.preshared_key.unwrap_or(SecretKey::from_bytes([0; 32]));
    let mut attrs = vec![
        key,
        WireguardPeerAttribute::Flags(WireguardPeerFlags::ReplaceAllowedIps),
        WireguardPeerAttribute::PresharedKey(*psk.expose()),
        WireguardPeerAttribute::PersistentKeepalive(c.persistent_keepalive),
    ];
    if let Some(endpoint) = c.endpoint {
        attrs.push(WireguardPeerAttribute::Endpoint(endpoint));
    }
    attrs.push(WireguardPeerAttribute::AllowedIps(
        c.allowed_ips.iter().map(allowed_ip).collect(),
    ));
    WireguardPeer(attrs)
}

fn allowed_ip(net: &IpNet) -> WireguardAllowedIp {
    let family = match net {
        IpNet::V4(_) => WireguardAddressFamily::Ipv4,
        IpNet::V6(_) => WireguardAddressFamily::Ipv6,
    };
    WireguardAllowedIp(vec![
        WireguardAllowedIpAttr::Family(family),
        WireguardAllowedIpAttr::IpAddr(net.network()),
        WireguardAllowedIpAttr::Cidr(net.prefix_len()),
    ])
}

/// The device the messages of a dump describe; a peer continued in the next message (same
/// public key first) gets the continuation's allowed IPs.
pub fn device_from(messages: impl IntoIterator<Item = Vec<WireguardAttribute>>) -> Device {
    let mut device = Device::default();
    for attributes in messages {
        for attr in attributes {
            match attr {
                WireguardAttribute::PrivateKey(k) => {
                    device.private_key = Some(SecretKey::from_bytes(k)).filter(|k| !k.is_zero())
                }
                WireguardAttribute::ListenPort(p) => device.listen_port = p,
                WireguardAttribute::Peers(peers) => {
                    for peer in peers {
                        let peer = peer_from(peer.0);
                        match device.peers.last_mut() {
                            Some(last) if last.config.public_key == peer.config.public_key => {
                                last.config.allowed_ips.extend(peer.config.allowed_ips)
                            }
                            _ => device.peers.push(peer),
                        }
                    }
                }
                _ => {}
            }
        }
    }
    for peer in &mut device.peers {
        peer.config = peer.config.clone().normalized();
    }
    device
}

fn peer_from(attributes: Vec<WireguardPeerAttribute>) -> Peer {
    let mut peer = Peer {
        config: PeerConfig {
            public_key: PublicKey([0; 32]),
            preshared_key: None,
            endpoint: None,
            persistent_keepalive: 0,
            allowed_ips: Vec::new(),
        },
        last_handshake: None,
        rx_bytes: 0,
        tx_bytes: 0,
    };
    for attr in attributes {
        match attr {
            WireguardPeerAttribute::PublicKey(k) => peer.config.public_key = PublicKey(k),
            WireguardPeerAttribute::PresharedKey(k) => {
                peer.config.preshared_key = Some(SecretKey::from_bytes(k))
            }
            WireguardPeerAttribute::Endpoint(e) => peer.config.endpoint = Some(e),
            WireguardPeerAttribute::PersistentKeepalive(s) => peer.config.persistent_keepalive = s,
            WireguardPeerAttribute::LastHandshake(t) if t.seconds > 0 || t.nano_seconds > 0 => {
                peer.last_handshake = Some(
                    SystemTime::UNIX_EPOCH
                        + Duration::new(
                            t.seconds as u64,
                            t.nano_seconds.clamp(0, 999_999_999) as u32,
                        ),
                )
            }
            WireguardPeerAttribute::RxBytes(n) => peer.rx_bytes = n,
            WireguardPeerAttribute::TxBytes(n) => peer.tx_bytes = n,
            WireguardPeerAttribute::AllowedIps(ips) => peer
                .config
                .allowed_ips
                .extend(ips.iter().filter_map(net_from)),
            _ => {}
        }
    }
    peer
}

fn net_from(ip: &WireguardAllowedIp) -> Option<IpNet> {
    let mut addr: Option<IpAddr> = None;
    let mut cidr = None;
    for attr in &ip.0 {
        match attr {
            WireguardAllowedIpAttr::IpAddr(a) => addr = Some(*a),
            WireguardAllowedIpAttr::Cidr(c) => cidr = Some(*c),
            _ => {}
        }
    }
    IpNet::new(addr?, cidr?).ok()
}

/// What one exchange gave.
struct Reply<F> {
    messages: Vec<GenlMessage<F>>,
    interrupted: bool,
}

/// Sends one request (`NLM_F_REQUEST` plus `flags`) and reads replies until the exchange is
/// complete: the ACK, the end of the dump, or the single answer of a GET.
fn exchange<F>(
    conn: &mut Connection,
    name: &'static str,
    msg: GenlMessage<F>,
    flags: u16,
) -> Result<Reply<F>, NlError>
where
    F: GenlFamily + Emitable + ParseableParametrized<[u8], GenlHeader> + Debug,
{
    let seq = conn.next_seq();
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | flags;
    header.sequence_number = seq;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    conn.send(&buf).map_err(NlError::Io)?;
    let ends_with_ack = flags & NLM_F_ACK != 0;
    let mut reply = Reply {
        messages: Vec::new(),
        interrupted: false,
    };
    loop {
        let datagram = conn.recv().map_err(NlError::Io)?;
        let raws = cni_netlink::split(&datagram).map_err(|e| NlError::Decode(e.to_string()))?;
        for raw in raws.into_iter().filter(|r| r.seq == seq) {
            let parsed = NetlinkMessage::<GenlMessage<F>>::deserialize(raw.bytes)
                .map_err(|e| NlError::Decode(format!("{name} reply: {e}")))?;
            reply.interrupted |= parsed.header.flags & NLM_F_DUMP_INTR != 0;
            let multipart = parsed.header.flags & NLM_F_MULTIPART != 0;
            match parsed.payload {
                NetlinkPayload::InnerMessage(m) => {
                    reply.messages.push(m);
                    if !multipart && !ends_with_ack {
                        return Ok(reply);
                    }
                }
                NetlinkPayload::Done(done) if done.code != 0 => {
                    return Err(NlError::Kernel(KernelError::new(name, done.code, None)))
                }
                NetlinkPayload::Done(_) => return Ok(reply),
                NetlinkPayload::Error(err) => match err.code {
                    None => return Ok(reply),
                    Some(code) => {
                        let text = crate::rtnl::error_ext_ack(raw.flags, &err.header);
                        return Err(NlError::Kernel(KernelError::new(name, code.get(), text)));
                    }
                },
                NetlinkPayload::Noop => {}
                other => return Err(NlError::Unexpected(format!("{name}: {other:?}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_netlink::fake::{self, FakeTransport};

    fn key(b: u8) -> PublicKey {
        PublicKey([b; 32])
    }

    fn set(b: u8, nets: &[&str]) -> PeerChange {
        PeerChange::Set(PeerConfig {
            public_key: key(b),
            preshared_key: None,
            endpoint: Some("198.18.0.12:51820".parse().unwrap()),
            persistent_keepalive: 25,
            allowed_ips: nets.iter().map(|n| n.parse().unwrap()).collect(),
        })
    }

    /// A datagram of `messages` for the latest request.
    fn genl_datagram(
        family: u16,
        cmd: WireguardCmd,
        messages: Vec<Vec<WireguardAttribute>>,
        seq: u32,
        flags: u16,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for attributes in messages {
            let mut m = GenlMessage::from_payload(WireguardMessage { cmd, attributes });
            m.set_resolved_family_id(family);
            let mut header = NetlinkHeader::default();
            header.flags = flags;
            header.sequence_number = seq;
            let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(m));
            packet.finalize();
            let mut buf = vec![0u8; packet.buffer_len()];
            packet.serialize(&mut buf);
            out.extend(buf);
        }
        out
    }

    fn resolved(fake: &FakeTransport, family: u16) -> Genl {
        fake.queue_for_last_request(move |seq| {
            let mut m = GenlMessage::from_payload(GenlCtrl {
                cmd: GenlCtrlCmd::NewFamily,
                nlas: vec![
                    GenlCtrlAttrs::FamilyName(FAMILY.into()),
                    GenlCtrlAttrs::FamilyId(family),
                ],
            });
            m.finalize();
            let mut header = NetlinkHeader::default();
            header.sequence_number = seq;
            let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(m));
            packet.finalize();
            let mut buf = vec![0u8; packet.buffer_len()];
            packet.serialize(&mut buf);
            buf
        });
        Genl::resolve(Box::new(fake.clone())).unwrap()
    }

    #[test]
    fn the_family_is_resolved_by_name_and_its_absence_named() {
        let fake = FakeTransport::new();
        let genl = resolved(&fake, 0x1b);
        assert_eq!(genl.family(), 0x1b);
        let sent = fake.sent();
        let raw = &cni_netlink::split(&sent[0]).unwrap()[0];
        assert_eq!(raw.msg_type, 0x10, "to the controller");
        assert!(raw.payload.windows(10).any(|w| w == b"wireguard\0"));

        let absent = FakeTransport::new();
        absent.queue_for_last_request(|seq| fake::error(seq, libc::ENOENT, None));
        assert!(matches!(
            Genl::resolve(Box::new(absent)),
            Err(Error::NoKernelSupport)
        ));
    }

    #[test]
    fn a_dump_is_read_as_one_device_with_a_split_peer_merged() {
        let fake = FakeTransport::new();
        let mut genl = resolved(&fake, 0x1b);
        let first = vec![
            WireguardAttribute::IfIndex(7),
            WireguardAttribute::PrivateKey([9; 32]),
            WireguardAttribute::ListenPort(51820),
            WireguardAttribute::Peers(vec![peer_attributes(&set(2, &["198.19.2.0/24"]))]),
        ];
        // The continuation: the same key, more allowed IPs only.
        let second = vec![
            WireguardAttribute::IfIndex(7),
            WireguardAttribute::Peers(vec![WireguardPeer(vec![
                WireguardPeerAttribute::PublicKey(key(2).0),
                WireguardPeerAttribute::AllowedIps(vec![allowed_ip(
                    &"2001:2:1:2::/64".parse().unwrap(),
                )]),
            ])]),
        ];
        fake.queue_for_last_request(move |seq| {
            let mut d = genl_datagram(
                0x1b,
                WireguardCmd::GetDevice,
                vec![first, second],
                seq,
                NLM_F_MULTIPART,
            );
            d.extend(fake::done(seq));
            d
        });
        let device = genl.read(7).unwrap();
        assert_eq!(device.private_key, Some(SecretKey::from_bytes([9; 32])));
        assert_eq!(device.listen_port, 51820);
        assert_eq!(device.peers.len(), 1);
        let p = &device.peers[0];
        assert_eq!(
            p.config.allowed_ips,
            vec![
                "198.19.2.0/24".parse::<IpNet>().unwrap(),
                "2001:2:1:2::/64".parse().unwrap()
            ]
        );
        assert_eq!(p.config.persistent_keepalive, 25);
        assert_eq!(p.config.preshared_key, None);
        let sent = fake.sent();
        let raw = &cni_netlink::split(&sent[1]).unwrap()[0];
        assert_eq!(raw.msg_type, 0x1b);
        assert_eq!(raw.flags, NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(raw.payload[0], 0, "WG_CMD_GET_DEVICE");
    }

    #[test]
    fn a_large_update_is_split_and_only_the_first_message_carries_the_device_settings() {
        let peers: Vec<PeerChange> = (0..150u8).map(|b| set(b, &["198.19.2.0/24"])).collect();
        let update = DeviceUpdate {
            private_key: Some(SecretKey::from_bytes([1; 32])),
            listen_port: Some(51820),
            replace_peers: true,
            peers,
        };
        let messages = set_messages(4, &update);
        assert_eq!(messages.len(), 3);
        let count = |m: &Vec<WireguardAttribute>| {
            m.iter()
                .map(|a| match a {
                    WireguardAttribute::Peers(p) => p.len(),
                    _ => 0,
                })
                .sum::<usize>()
        };
        assert_eq!(messages.iter().map(count).collect::<Vec<_>>(), [64, 64, 22]);
        assert!(messages[0].contains(&WireguardAttribute::Flags(
            WireguardDeviceFlags::ReplacePeers
        )));
        assert!(messages[0].contains(&WireguardAttribute::ListenPort(51820)));
        for later in &messages[1..] {
            assert_eq!(later.len(), 2, "index and peers only");
            assert_eq!(later[0], WireguardAttribute::IfIndex(4));
        }
        // A removal is the key and the flag.
        let removal = peer_attributes(&PeerChange::Remove(key(5)));
        assert_eq!(
            removal.0,
            vec![
                WireguardPeerAttribute::PublicKey([5; 32]),
                WireguardPeerAttribute::Flags(WireguardPeerFlags::RemoveMe)
            ]
        );
        // Sent and acknowledged one by one.
        let fake = FakeTransport::new();
        let mut genl = resolved(&fake, 0x1b);
        for _ in 0..3 {
            fake.queue_for_last_request(fake::ack);
        }
        genl.apply(4, &update).unwrap();
        assert_eq!(fake.sent().len(), 4);
    }
}
