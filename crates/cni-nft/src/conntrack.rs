//! Conntrack listing and deletion over ctnetlink (portmap flushes stale UDP entries on ADD).
//!
//! The kernel cannot delete by filter, so this dumps the table of one family, selects entries
//! by their original-direction tuple, and deletes each by echoing that tuple back (with its
//! zone and id, so a recycled entry is never hit). An entry that vanished meanwhile is fine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::attr::{self, AttrWriter};
use crate::client::{DumpItem, Nft};
use crate::message::NfMsg;
use crate::objects::Family;
use crate::rule::L4Proto;
use crate::sys::*;
use crate::Error;

/// One conntrack entry, described by its original-direction tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackEntry {
    /// `ip` or `ip6`.
    pub family: Family,
    /// IP protocol number.
    pub protocol: u8,
    /// Original source address.
    pub src: IpAddr,
    /// Original destination address.
    pub dst: IpAddr,
    /// Original source port (TCP, UDP, SCTP...).
    pub src_port: Option<u16>,
    /// Original destination port.
    pub dst_port: Option<u16>,
    /// Conntrack zone, when not the default.
    pub zone: Option<u16>,
    id: Option<u32>,
    /// The raw original tuple, echoed back to delete the entry.
    tuple: Vec<u8>,
}

/// Which entries [`Nft::delete_conntrack`] removes: every set field must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackFilter {
    family: Family,
    protocol: Option<u8>,
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
}

impl ConntrackFilter {
    /// Every entry of `family` (`Family::Ip` or `Family::Ip6`).
    pub fn new(family: Family) -> Self {
        ConntrackFilter {
            family,
            protocol: None,
            src: None,
            dst: None,
            src_port: None,
            dst_port: None,
        }
    }

    /// Only this transport protocol.
    pub fn protocol(mut self, proto: L4Proto) -> Self {
        self.protocol = Some(proto.number());
        self
    }

    /// Only this original source address.
    pub fn src(mut self, addr: IpAddr) -> Self {
        self.src = Some(addr);
        self
    }

    /// Only this original destination address.
    pub fn dst(mut self, addr: IpAddr) -> Self {
        self.dst = Some(addr);
        self
    }

    /// Only this original source port.
    pub fn src_port(mut self, port: u16) -> Self {
        self.src_port = Some(port);
        self
    }

    /// Only this original destination port (portmap's host port).
    pub fn dst_port(mut self, port: u16) -> Self {
        self.dst_port = Some(port);
        self
    }

    /// True if `entry` matches every field that is set.
    pub fn matches(&self, entry: &ConntrackEntry) -> bool {
        entry.family == self.family
            && self.protocol.is_none_or(|p| p == entry.protocol)
            && self.src.is_none_or(|a| a == entry.src)
            && self.dst.is_none_or(|a| a == entry.dst)
            && self.src_port.is_none_or(|p| Some(p) == entry.src_port)
            && self.dst_port.is_none_or(|p| Some(p) == entry.dst_port)
    }
}

fn check_family(family: Family) -> Result<(), Error> {
    match family {
        Family::Ip | Family::Ip6 => Ok(()),
        f => Err(Error::Invalid(format!(
            "conntrack entries are listed per ip or ip6 family, not {f}"
        ))),
    }
}

fn ctnetlink(kind: u8, family: Family, attrs: Vec<u8>) -> NfMsg {
    NfMsg {
        msg_type: (NFNL_SUBSYS_CTNETLINK << 8) | u16::from(kind),
        flags: 0,
        family: family.number(),
        res_id: 0,
        attrs,
    }
}

fn addr_of(a: &attr::Attr<'_>) -> Result<IpAddr, Error> {
    match a.data.len() {
        4 => Ok(IpAddr::V4(Ipv4Addr::from(
            <[u8; 4]>::try_from(a.data).unwrap_or_default(),
        ))),
        16 => Ok(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(a.data).unwrap_or_default(),
        ))),
        n => Err(Error::Decode(format!("conntrack address of {n} bytes"))),
    }
}

fn parse_entry(family: Family, item: &DumpItem) -> Result<Option<ConntrackEntry>, Error> {
    let attrs = attr::parse(&item.attrs)?;
    let Some(orig) = attr::find(&attrs, CTA_TUPLE_ORIG) else {
        return Ok(None);
    };
    let tuple = orig.nested()?;
    let ip = attr::find(&tuple, CTA_TUPLE_IP)
        .ok_or_else(|| Error::Decode("conntrack tuple without addresses".into()))?
        .nested()?;
    let src = ip
        .iter()
        .find(|a| a.ty == CTA_IP_V4_SRC || a.ty == CTA_IP_V6_SRC)
        .ok_or_else(|| Error::Decode("conntrack tuple without source".into()))?;
    let dst = ip
        .iter()
        .find(|a| a.ty == CTA_IP_V4_DST || a.ty == CTA_IP_V6_DST)
        .ok_or_else(|| Error::Decode("conntrack tuple without destination".into()))?;
    let proto = attr::find(&tuple, CTA_TUPLE_PROTO)
        .ok_or_else(|| Error::Decode("conntrack tuple without protocol".into()))?
        .nested()?;
    let port = |ty: u16| attr::find(&proto, ty).map(|a| a.be16()).transpose();
    Ok(Some(ConntrackEntry {
        family,
        protocol: attr::find(&proto, CTA_PROTO_NUM)
            .ok_or_else(|| Error::Decode("conntrack tuple without protocol number".into()))?
            .u8()?,
        src: addr_of(src)?,
        dst: addr_of(dst)?,
        src_port: port(CTA_PROTO_SRC_PORT)?,
        dst_port: port(CTA_PROTO_DST_PORT)?,
        zone: attr::find(&attrs, CTA_ZONE).map(|a| a.be16()).transpose()?,
        id: attr::find(&attrs, CTA_ID).map(|a| a.be32()).transpose()?,
        tuple: orig.data.to_vec(),
    }))
}

impl Nft {
    /// Every conntrack entry of `family` (`ip` or `ip6`).
    pub fn list_conntrack(&mut self, family: Family) -> Result<Vec<ConntrackEntry>, Error> {
        check_family(family)?;
        let msg = ctnetlink(IPCTNL_MSG_CT_GET, family, Vec::new());
        let items = self.dump(&msg, &format!("list {family} conntrack entries"))?;
        let mut out = Vec::new();
        for item in &items {
            if let Some(entry) = parse_entry(family, item)? {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Deletes one entry; an entry that is already gone is not an error.
    pub fn delete_conntrack_entry(&mut self, entry: &ConntrackEntry) -> Result<(), Error> {
        let mut a = AttrWriter::new();
        a.bytes(CTA_TUPLE_ORIG | NLA_F_NESTED, &entry.tuple);
        if let Some(zone) = entry.zone {
            a.be16(CTA_ZONE, zone);
        }
        if let Some(id) = entry.id {
            a.be32(CTA_ID, id);
        }
        let what = format!(
            "delete conntrack entry proto {} {} -> {}",
            entry.protocol, entry.src, entry.dst
        );
        let msg = ctnetlink(IPCTNL_MSG_CT_DELETE, entry.family, a.finish(&what)?);
        match self.request(msg, &what) {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes every conntrack entry matching `filter` and returns how many were deleted.
    pub fn delete_conntrack(&mut self, filter: &ConntrackFilter) -> Result<usize, Error> {
        let mut deleted = 0;
        for entry in self.list_conntrack(filter.family)? {
            if filter.matches(&entry) {
                self.delete_conntrack_entry(&entry)?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, FakeTransport};
    use crate::message;

    fn entry_attrs(dport: u16) -> Vec<u8> {
        let mut a = AttrWriter::new();
        a.nested(CTA_TUPLE_ORIG, |t| {
            t.nested(CTA_TUPLE_IP, |ip| {
                ip.bytes(CTA_IP_V4_SRC, &[198, 18, 128, 1])
                    .bytes(CTA_IP_V4_DST, &[198, 18, 128, 2]);
            })
            .nested(CTA_TUPLE_PROTO, |p| {
                p.u8(CTA_PROTO_NUM, 17)
                    .be16(CTA_PROTO_SRC_PORT, 5000)
                    .be16(CTA_PROTO_DST_PORT, dport);
            });
        })
        .be32(CTA_ID, 77);
        a.into_bytes()
    }

    #[test]
    fn deletes_matching_entries_by_echoing_their_tuple() {
        let get = (NFNL_SUBSYS_CTNETLINK << 8) | u16::from(IPCTNL_MSG_CT_GET);
        // IPCTNL_MSG_CT_NEW is 0: dump replies carry the bare subsystem.
        let new = NFNL_SUBSYS_CTNETLINK << 8;
        let fake = FakeTransport::with_responder(move |sent| {
            let m = message::split(sent).unwrap()[0];
            if m.msg_type == get {
                let mut d = fake::dump_part(m.seq, new, 2, &entry_attrs(53));
                d.extend(fake::dump_part(m.seq, new, 2, &entry_attrs(80)));
                d.extend(fake::done(m.seq));
                vec![d]
            } else {
                vec![fake::ack(m.seq)]
            }
        });
        let mut nft = Nft::with_transport(Box::new(fake.clone()));
        let filter = ConntrackFilter::new(Family::Ip)
            .protocol(L4Proto::Udp)
            .dst_port(53);
        assert_eq!(nft.delete_conntrack(&filter).unwrap(), 1);
        let sent = fake.sent();
        assert_eq!(sent.len(), 2);
        let del = message::split(&sent[1]).unwrap()[0];
        assert_eq!(
            del.msg_type,
            (NFNL_SUBSYS_CTNETLINK << 8) | u16::from(IPCTNL_MSG_CT_DELETE)
        );
        let attrs = crate::message::attrs(&del).unwrap();
        let orig = attr::find(&attrs, CTA_TUPLE_ORIG).unwrap();
        let want = attr::parse(&entry_attrs(53)).unwrap()[0].data.to_vec();
        assert_eq!(orig.data, want.as_slice());
        assert_eq!(attr::find(&attrs, CTA_ID).unwrap().be32().unwrap(), 77);
    }

    #[test]
    fn only_ip_families_are_listed() {
        let mut nft = Nft::with_transport(Box::new(FakeTransport::new()));
        assert!(matches!(
            nft.list_conntrack(Family::Inet),
            Err(Error::Invalid(_))
        ));
    }
}
