//! Ruleset change notifications: a netlink socket subscribed to the nf_tables multicast
//! group (`NFNLGRP_NFTABLES`), on which the kernel announces every table, chain, rule, set
//! and element added or removed in the socket's network namespace, by anyone (what
//! `nft monitor` listens to). The messages are not decoded: a notification says only "the
//! ruleset changed, look again".

use std::io;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::{TimeVal, TimeValLike};

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

    /// Waits up to `timeout` for notifications and takes every one queued: how many
    /// datagrams arrived (0: none within `timeout`). A queue that overflowed (`ENOBUFS`:
    /// notifications were lost) counts as one.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<usize> {
        // A zero SO_RCVTIMEO would mean "forever".
        let timeout = timeout.max(Duration::from_millis(1));
        let micros = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
        let timeout = TimeVal::microseconds(micros);
        setsockopt(&self.socket, sockopt::ReceiveTimeout, &timeout)?;
        let mut buf = vec![0u8; 64 * 1024];
        let first = match self.socket.recv(&mut &mut buf[..], 0) {
            Ok(_) => 1,
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

    /// Takes what is queued without waiting.
    fn drain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut count = 0;
        loop {
            match self.socket.recv(&mut &mut buf[..], libc::MSG_DONTWAIT) {
                Ok(_) => count += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(count),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => count += 1,
                Err(e) => return Err(e),
            }
        }
    }
}
