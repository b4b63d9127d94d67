//! Error type of the netlink client, and decoding of the kernel's extended ACK.

use std::fmt;
use std::io;

use cni_netlink::consts::{NLMSGERR_ATTR_MSG, NLMSG_HDRLEN};
use netlink_packet_core::{NlasIterator, NLM_F_ACK_TLVS, NLM_F_CAPPED};

use crate::netns::error::NsError;

/// An error reported by the kernel in reply to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// The request that failed, e.g. `RTM_NEWLINK`.
    pub request: &'static str,
    /// The positive errno value.
    pub errno: i32,
    /// The extended-ACK message, when the kernel gave one.
    pub message: Option<String>,
}

impl KernelError {
    pub(crate) fn new(request: &'static str, code: i32, message: Option<String>) -> Self {
        KernelError {
            request,
            errno: code.abs(),
            message,
        }
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.request,
            io::Error::from_raw_os_error(self.errno)
        )?;
        if let Some(msg) = &self.message {
            write!(f, " ({msg})")?;
        }
        Ok(())
    }
}

/// Errors of the netlink client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Socket creation, send or receive failed.
    #[error("netlink socket: {0}")]
    Io(#[source] io::Error),
    /// The kernel refused the request.
    #[error("{0}")]
    Kernel(KernelError),
    /// A reply could not be decoded.
    #[error("cannot decode netlink reply: {0}")]
    Decode(String),
    /// A dump was interrupted by concurrent changes on every attempt.
    #[error("netlink dump interrupted by concurrent changes {attempts} times")]
    DumpInterrupted {
        /// Number of attempts made.
        attempts: usize,
    },
    /// The kernel answered with something the request did not expect.
    #[error("unexpected netlink reply: {0}")]
    Unexpected(String),
    /// No link with this name or index exists.
    #[error("link {0} not found")]
    LinkNotFound(String),
    /// An argument cannot be encoded (for example an address of the wrong family).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Entering the namespace for the socket failed.
    #[error(transparent)]
    Netns(#[from] NsError),
}

impl Error {
    /// The errno of a kernel error.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Kernel(k) => Some(k.errno),
            Error::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// True if the object already exists (`EEXIST`).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }

    /// True if the object (link, address, route, neighbour) does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::LinkNotFound(_) => true,
            Error::Kernel(k) => matches!(
                k.errno,
                libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL
            ),
            _ => false,
        }
    }
}

/// The message text of an `NLMSG_ERROR` payload's extended ACK, if any.
///
/// `payload` is what follows the error code: the original request header (or the whole request
/// when the ACK is not capped), then the TLVs when `NLM_F_ACK_TLVS` is set.
pub(crate) fn error_ext_ack(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || payload.len() < NLMSG_HDRLEN {
        return None;
    }
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        let len = u32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
        (len + 3) & !3
    };
    payload.get(echoed..).and_then(ext_ack_message)
}

/// Finds `NLMSGERR_ATTR_MSG` in a run of extended-ACK attributes.
pub(crate) fn ext_ack_message(tlvs: &[u8]) -> Option<String> {
    NlasIterator::new(tlvs)
        .filter_map(Result::ok)
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            let value = nla.value();
            let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
            String::from_utf8_lossy(&value[..end]).into_owned()
        })
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    #[test]
    fn capped_ack_message_is_decoded() {
        let mut payload = vec![0u8; 16];
        payload.extend(tlv(2, &7u32.to_ne_bytes()));
        payload.extend(tlv(1, b"Unknown device type\0"));
        let msg = error_ext_ack(NLM_F_CAPPED | NLM_F_ACK_TLVS, &payload);
        assert_eq!(msg.as_deref(), Some("Unknown device type"));
    }

    #[test]
    fn uncapped_ack_skips_the_echoed_request() {
        let mut payload = 20u32.to_ne_bytes().to_vec();
        payload.extend([0u8; 16]); // rest of a 20-byte request, padded to 20
        payload.extend(tlv(1, b"bad\0"));
        assert_eq!(
            error_ext_ack(NLM_F_ACK_TLVS, &payload).as_deref(),
            Some("bad")
        );
        assert_eq!(error_ext_ack(0, &payload), None);
    }

    #[test]
    fn kernel_error_reads_well() {
        let e = Error::Kernel(KernelError::new("RTM_NEWLINK", -17, Some("boom".into())));
        assert!(e.is_exists());
        assert!(!e.is_not_found());
        assert_eq!(
            e.to_string(),
            "RTM_NEWLINK: File exists (os error 17) (boom)"
        );
        let e = Error::Kernel(KernelError::new("RTM_GETLINK", -19, None));
        assert!(e.is_not_found());
    }
}
