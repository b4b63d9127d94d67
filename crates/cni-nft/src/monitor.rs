//! Ruleset change notifications: a netlink socket subscribed to the nf_tables multicast
//! group (`NFNLGRP_NFTABLES`), on which the kernel announces every table, chain, rule, set
//! and element added or removed in the socket's network namespace, by anyone (what
//! `nft monitor` listens to). Only the message types are read: what counts is that something
//! was removed (a table, chain, rule, set or element), the one change a repair answers.

use std::io;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::{TimeVal, TimeValLike};

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
}

impl RulesetMonitor {
    /// Subscribes in the calling thread's network namespace.
    pub fn open() -> io::Result<RulesetMonitor> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.add_membership(NFNLGRP_NFTABLES)?;
        Ok(RulesetMonitor { socket })
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
            Ok(n) => removals(&buf[..n.min(buf.len())]),
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
                Ok(n) => count += removals(&buf[..n.min(buf.len())]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(count),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => count += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// How many messages of one notification datagram announce a removal.
fn removals(datagram: &[u8]) -> usize {
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
        Ok(messages) => messages.iter().filter(|m| is_removal(m.msg_type)).count(),
        // Never sent by the kernel; unreadable, it may have announced a removal.
        Err(_) => 1,
    }
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
        assert_eq!(removals(&d), 2);
        assert_eq!(removals(&d[..10]), 0);
    }
}
