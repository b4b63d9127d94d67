//! Ruleset change notifications: a netlink socket subscribed to the nf_tables multicast
//! group (`NFNLGRP_NFTABLES`), on which the kernel announces every table, chain, rule, set
//! and element added or removed in the socket's network namespace, by anyone (what
//! `nft monitor` listens to). Only the message types and table names are read: what counts
//! is that something was removed (a table, chain, rule, set or element), the one change a
//! repair answers, in a table the listener cares about (a program that keeps its own table up
//! to date, such as the node agent's policy table, deletes things in it all the time).

use std::io;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::attr;
use crate::sys::{
    NFNL_SUBSYS_NFTABLES, NFT_MSG_DELCHAIN, NFT_MSG_DELRULE, NFT_MSG_DELSET, NFT_MSG_DELSETELEM,
    NFT_MSG_DELTABLE,
};

/// The nf_tables multicast group (`enum nfnetlink_groups` in `linux/netfilter/nfnetlink.h`).
const NFNLGRP_NFTABLES: u32 = 7;

/// A subscription to the calling thread's namespace's nf_tables notifications.
#[derive(Debug)]
pub struct RulesetMonitor {
    socket: Socket,
    ignored_tables: Vec<String>,
}

impl RulesetMonitor {
    /// Subscribes in the calling thread's network namespace.
    pub fn open() -> io::Result<RulesetMonitor> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.add_membership(NFNLGRP_NFTABLES)?;
        Ok(RulesetMonitor {
            socket,
            ignored_tables: Vec::new(),
        })
    }

    /// Removals in the tables named `tables` (of any family) are not counted.
    pub fn ignoring_tables(mut self, tables: &[&str]) -> RulesetMonitor {
        self.ignored_tables = tables.iter().map(|t| t.to_string()).collect();
        self
    }

    /// Waits up to `timeout` for notifications and takes every one queued: how many of them
    /// announce a removal (0: none within `timeout`, or only additions). A queue that
    /// overflowed (`ENOBUFS`: notifications were lost) counts as one removal.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        // A zero SO_RCVTIMEO would mean "forever".
        let timeout = timeout.max(Duration::from_millis(1));
        let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
        let timeout = TimeVal::microseconds(micros);
        setsockopt(&self.socket, sockopt::ReceiveTimeout, &timeout)?;
        let mut buf = vec![0u8; 64 * 1024];
        let first = match self.socket.recv(&mut &mut buf[..], 0) {
            Ok(n) => removals(&buf[..n.min(buf.len())], &self.ignored_tables),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => 1,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(0)
            }
            Err(e) => return Err(e),
        };
        Ok(first + self.drain(&mut buf)?)
    }

    /// Takes what is queued without waiting; the removals among it.
    fn drain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut count = 0;
        loop {
            match self.socket.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
                Ok(n) => count += removals(&buf[..n.min(buf.len())], &self.ignored_tables),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(count),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => count += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// How many messages of one notification datagram announce a removal in a table not in
/// `ignored`.
fn removals(datagram: &[u8], ignored: &[String]) -> usize {
    const REMOVALS: [u8; 5] = [
        NFT_MSG_DELTABLE,
        NFT_MSG_DELCHAIN,
        NFT_MSG_DELRULE,
        NFT_MSG_DELSET,
        NFT_MSG_DELSETELEM,
    ];
    let is_removal =
        |kind: u16| kind >> 8 == NFNL_SUBSYS_NFTABLES && REMOVALS.contains(&((kind & 0xff) as u8));
    match cni_netlink::split(datagram) {
        Ok(messages) => messages
            .iter()
            .filter(|m| is_removal(m.msg_type))
            .filter(|m| !table(m.payload).is_some_and(|t| ignored.iter().any(|i| i == t)))
            .count(),
        // Never sent by the kernel; unreadable, it may have announced a removal.
        Err(_) => 1,
    }
}

/// The table a removal names: attribute 1 after the `nfgenmsg` header in every kind
/// (`NFTA_TABLE_NAME`, `NFTA_CHAIN_TABLE`, `NFTA_RULE_TABLE`, `NFTA_SET_TABLE`,
/// `NFTA_SET_ELEM_LIST_TABLE`). `None` when it cannot be read (then the removal counts).
fn table(payload: &[u8]) -> Option<&str> {
    const NFGENMSG_LEN: usize = 4;
    const TABLE_ATTR: u16 = 1;
    let attrs = attr::parse(payload.get(NFGENMSG_LEN..)?).ok()?;
    attr::find(&attrs, TABLE_ATTR)?.str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{NFT_MSG_NEWRULE, NFT_MSG_NEWSETELEM};

    fn message(kind: u16) -> Vec<u8> {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend(kind.to_ne_bytes());
        m.extend([0u8; 14]);
        m
    }

    #[test]
    fn only_removals_count() {
        let nft = |msg: u8| (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg);
        let mut d = message(nft(NFT_MSG_NEWRULE));
        d.extend(message(nft(NFT_MSG_DELRULE)));
        d.extend(message(nft(NFT_MSG_DELSETELEM)));
        d.extend(message(nft(NFT_MSG_NEWSETELEM)));
        // Another subsystem's message with a removal's number.
        d.extend(message((1 << 8) | u16::from(NFT_MSG_DELRULE)));
        assert_eq!(removals(&d, &[]), 2);
        assert_eq!(removals(&d[..10], &[]), 0);
    }

    /// A removal message naming `table` (an `nfgenmsg` header, then attribute 1).
    fn removal_in(kind: u16, table: &str) -> Vec<u8> {
        let mut body = vec![1u8, 0, 0, 0]; // nfgenmsg: family inet, version, resource id
        let name_len = table.len() + 1;
        body.extend(((4 + name_len) as u16).to_ne_bytes());
        body.extend(1u16.to_ne_bytes());
        body.extend(table.as_bytes());
        body.push(0);
        body.resize(body.len().next_multiple_of(4), 0);
        let mut m = ((16 + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend(kind.to_ne_bytes());
        m.extend([0u8; 10]);
        m.extend(body);
        m
    }

    #[test]
    fn removals_in_ignored_tables_do_not_count() {
        let nft = |msg: u8| (NFNL_SUBSYS_NFTABLES << 8) | u16::from(msg);
        let ignored = vec!["rcni_policy".to_string()];
        let mut d = removal_in(nft(NFT_MSG_DELSETELEM), "rcni_policy");
        d.extend(removal_in(nft(NFT_MSG_DELRULE), "rcni_policy"));
        assert_eq!(removals(&d, &ignored), 0);
        assert_eq!(removals(&d, &[]), 2);
        d.extend(removal_in(nft(NFT_MSG_DELRULE), "cni_portmap"));
        d.extend(removal_in(nft(NFT_MSG_DELTABLE), "rcni_policy_x"));
        assert_eq!(removals(&d, &ignored), 2);
        // A removal whose table cannot be read counts.
        d.extend(message(nft(NFT_MSG_DELCHAIN)));
        assert_eq!(removals(&d, &ignored), 3);
    }
}
