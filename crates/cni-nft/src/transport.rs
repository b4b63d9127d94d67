//! The byte pipe under [`crate::Nft`]: the shared netlink core's transport, opened for
//! NETLINK_NETFILTER, or its test double ([`crate::fake::FakeTransport`]).

pub use cni_netlink::{SocketTransport, Transport};
