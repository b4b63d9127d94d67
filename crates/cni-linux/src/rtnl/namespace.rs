//! Handles whose socket is opened inside another network namespace. Apart from the rest of the
//! client because the namespace code itself asks the kernel over a [`Handle`].

use super::{Error, Handle, SocketTransport};
use crate::netns::NetNs;

impl Handle {
    /// Opens a route socket inside `ns`. The socket stays bound to `ns` and the handle is used
    /// from the calling thread.
    pub fn in_netns(ns: &NetNs) -> Result<Self, Error> {
        let transport = ns.run(SocketTransport::open)??;
        Ok(Self::with_transport(Box::new(transport)))
    }
}
