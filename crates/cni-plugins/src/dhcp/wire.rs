//! The plugin ↔ daemon protocol on the unix socket: one JSON request per connection, the
//! plugin half-closes, the daemon answers one JSON response and closes. (Go's plugin speaks
//! Go `net/rpc` with gob encoding, which only Go's daemon understands; both sides are
//! replaced together.)

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_types::CniError;
use serde::{Deserialize, Serialize};

use super::conf::LeaseParams;
use super::lease::Lease;
use cni_attribution::AttachmentId;

/// Longest request or response accepted.
const MAX_MESSAGE: u64 = 1 << 20;

/// How long the plugin waits for an answer: an acquisition may retransmit for a while.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// An attachment and what its lease is acquired with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    pub key: AttachmentId,
    /// JSON text on the wire: the plugin checks it is UTF-8 before it asks.
    pub netns: PathBuf,
    pub params: LeaseParams,
}

/// What the plugin asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// ADD: the attachment's lease, acquired now unless the daemon holds one.
    Allocate(LeaseRequest),
    /// CHECK: the lease the daemon holds for the attachment, an error when none.
    Check(LeaseRequest),
    /// DEL: stop maintenance, DHCPRELEASE, forget.
    Release { key: AttachmentId },
    /// STATUS: is the daemon there.
    Status,
    /// GC: release every lease of `network` whose attachment is not in `valid`.
    Gc {
        network: String,
        valid: Vec<AttachmentId>,
    },
}

/// What the daemon answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Response {
    Ok { lease: Option<Lease> },
    Error(CniError),
}

/// Why a call did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(
        "the dhcp daemon is not reachable at {}: {source} (is `rcni-plugins dhcp daemon` running?)",
        .path.display()
    )]
    Unreachable { path: PathBuf, source: io::Error },
    #[error("the dhcp daemon at {} answered badly: {reason}", .path.display())]
    Protocol { path: PathBuf, reason: String },
}

/// Sends `request` to the daemon at `socket` and returns its answer.
pub fn call(socket: &Path, request: &Request) -> Result<Response, CallError> {
    let unreachable = |source| CallError::Unreachable {
        path: socket.to_path_buf(),
        source,
    };
    let protocol = |reason: String| CallError::Protocol {
        path: socket.to_path_buf(),
        reason,
    };
    let mut stream = UnixStream::connect(socket).map_err(unreachable)?;
    let body = serde_json::to_vec(request).expect("serializable");
    stream
        .write_all(&body)
        .and_then(|_| stream.shutdown(Shutdown::Write))
        .map_err(|e| protocol(format!("sending: {e}")))?;
    stream
        .set_read_timeout(Some(CALL_TIMEOUT))
        .map_err(|e| protocol(e.to_string()))?;
    let answer = read_message(&mut stream).map_err(|e| protocol(format!("reading: {e}")))?;
    serde_json::from_slice(&answer).map_err(|e| protocol(format!("decoding: {e}")))
}

/// Reads one message: everything until the peer's half-close.
pub fn read_message(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    stream.take(MAX_MESSAGE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_MESSAGE {
        return Err(io::Error::other("message larger than 1 MiB"));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let r = Request::Gc {
            network: "n".into(),
            valid: vec![AttachmentId::new("n", "c", "eth0")],
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"op":"gc","network":"n","valid":[{"containerId":"c","network":"n","ifname":"eth0"}]}"#
        );
        assert!(matches!(
            serde_json::from_str::<Request>(&s).unwrap(),
            Request::Gc { .. }
        ));
        let e = Response::Error(CniError::new(11, "x"));
        let s = serde_json::to_string(&e).unwrap();
        assert!(matches!(
            serde_json::from_str::<Response>(&s).unwrap(),
            Response::Error(c) if c.code == 11
        ));
    }

    #[test]
    fn a_missing_socket_is_unreachable_and_says_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = call(&dir.path().join("none.sock"), &Request::Status).unwrap_err();
        assert!(matches!(e, CallError::Unreachable { .. }));
        assert!(e.to_string().contains("rcni-plugins dhcp daemon"), "{e}");
    }
}
