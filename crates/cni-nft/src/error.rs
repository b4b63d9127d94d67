//! The crate's error type.

use std::io;

/// Errors from building or running nf_tables and conntrack requests.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The netlink socket failed (open, send or receive).
    #[error("netfilter netlink socket: {0}")]
    Io(#[source] io::Error),
    /// The kernel rejected a request. `what` names the request, for a batch the message that
    /// caused the failure (for example `add rule ip cni_hostport hostports`).
    #[error("{what}: {}{}", io::Error::from_raw_os_error(*.errno), .message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Kernel {
        /// The failing request.
        what: String,
        /// Positive errno.
        errno: i32,
        /// The kernel's extended-ACK text, when it sent one.
        message: Option<String>,
    },
    /// Concurrent ruleset changes kept interrupting a dump; trying again later can succeed.
    #[error("{what}: dump interrupted {attempts} times by concurrent changes")]
    DumpInterrupted { what: String, attempts: usize },
    /// A reply could not be decoded, or did not follow the protocol.
    #[error("malformed netfilter netlink reply: {0}")]
    Decode(String),
    /// A request needs a netlink attribute longer than its 16-bit length field can describe
    /// (65,535 bytes, header included). The encoder refuses it instead of sending it cut;
    /// element lists are split across messages before they reach this limit, so it only
    /// concerns a single object (one rule's expressions, one element) that is too large.
    #[error("{what}: netlink attribute {attr} would be {len} bytes, more than the 65535 its length field holds")]
    TooLong {
        /// The request, for example `add rule inet t c`.
        what: String,
        /// The attribute's type (nesting flag removed).
        attr: u16,
        /// The length it would have had, header included.
        len: usize,
    },
    /// A batch is larger than the netlink socket can send in one datagram (the kernel needs
    /// the whole transaction in one). Raising `net.core.wmem_max`, or running with
    /// CAP_NET_ADMIN in the initial user namespace (which lifts that limit), lets it pass.
    #[error("nf_tables batch of {bytes} bytes in {messages} messages does not fit the netlink socket's send buffer: {source}")]
    BatchTooLarge {
        /// The datagram's size.
        bytes: usize,
        /// Messages in it.
        messages: usize,
        /// The socket's answer (EMSGSIZE).
        #[source]
        source: io::Error,
    },
    /// The caller asked for something that cannot be encoded (too-long name or comment,
    /// address of the wrong family, ...).
    #[error("invalid nftables request: {0}")]
    Invalid(String),
}

impl Error {
    /// The kernel errno, if the kernel rejected the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// True if the kernel answered ENOENT (missing table, chain, rule, set or conntrack entry).
    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(libc::ENOENT)
    }

    /// True for failures caused by concurrent changes, where a later attempt can succeed:
    /// an interrupted dump, or EBUSY from a colliding transaction.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::DumpInterrupted { .. }) || self.errno() == Some(libc::EBUSY)
    }

    /// True if the kernel answered EEXIST.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_error_text_names_request_and_errno() {
        let e = Error::Kernel {
            what: "add table ip t".into(),
            errno: 2,
            message: Some("bad".into()),
        };
        let text = e.to_string();
        assert!(text.starts_with("add table ip t: No such file or directory"));
        assert!(text.ends_with("(bad)"));
        assert!(e.is_not_found());
        assert!(!e.is_exists());
    }
}
