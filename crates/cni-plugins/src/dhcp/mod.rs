//! dhcp (Go: containernetworking/plugins `plugins/ipam/dhcp/`): an IPAM plugin whose leases come
//! from a DHCP server on the container's link, through a long-running daemon
//! (`rcni-plugins dhcp daemon`) that holds and renews them.
//!
//! - `conf.rs`: the `ipam` keys (`daemonSocketPath`, `provide`, `request`, `priority`,
//!   `suppress`) resolved to the parameters a lease is acquired with.
//! - `plugin.rs`: ADD/DEL/CHECK/STATUS/GC, each one request to the daemon (`wire.rs`).
//! - `client.rs`: the RFC 2131 exchanges over a transport; `message.rs`: the DHCPv4 message
//!   and options on the wire; `transport.rs`: the UDP socket bound to the container interface
//!   inside its netns; `lease.rs`: a lease, its timers and result.
//! - `daemon.rs`: the leases held, acquire/release, one maintenance thread per lease
//!   (`maintain.rs`: renew at T1, rebind at T2); `store.rs`: leases persisted in the state dir;
//!   `server.rs`: the command line, socket and signals.
//!
//! Deliberate differences from Go's dhcp plugin:
//! - Leases are persisted (one file per attachment, written atomically): a restarted daemon
//!   answers ADD/CHECK with the same lease and keeps renewing it (Go's are lost: #235, #767).
//! - The plugin/daemon protocol is JSON over the unix socket, not Go's net/rpc + gob, so the
//!   plugin and daemon of one implementation go together; the default socket is
//!   `/run/cni/rcni-dhcp.sock` so both daemons can run side by side.
//! - STATUS asks the daemon and answers 50 when it is not reachable (Go's STATUS is a no-op);
//!   ADD/DEL/CHECK/GC answer 11 (try again later) naming the socket. GC releases the leases of
//!   this network whose attachments are not in the valid list (Go's GC is a no-op).
//! - CHECK requires the daemon to hold a live lease for the attachment whose address is in
//!   `prevResult` (Go's CHECK acquires a lease if none is held).
//! - The client uses a UDP socket bound to the interface (Go: a packet socket) and so always
//!   sets the broadcast flag before it has an address; `--broadcast` sets it on renewals too.
//! - `--timeout` bounds a whole acquisition (Go: one attempt); retransmissions wait 2 s
//!   doubling up to `--resendmax` (default 16 s; Go 62 s). No systemd socket activation: taking
//!   over an inherited descriptor needs `unsafe`, which the workspace denies.
//! - DHCPRELEASE needs the container interface: a main plugin that deletes it before IPAM DEL
//!   (bridge, as in Go) leaves the server's lease to expire; the daemon forgets it anyway.
//! - Default T2 is 87.5 % of the lease (RFC 2131; Go uses 85 %). A DHCPNAK on renewal ends
//!   the lease like an expiry does (the link is set down), instead of a new DISCOVER that
//!   could hand the container an address it is not configured with.
//! - Maintenance also stops, and the record is dropped, when a periodic check (every
//!   `--check-interval`, default 60 s) finds the netns or interface gone, not only at renewal.

mod client;
mod conf;
mod daemon;
mod lease;
mod maintain;
mod message;
mod plugin;
mod server;
mod store;
mod transport;
mod wire;

use cni_plugin::FnPlugin;

pub use conf::DEFAULT_SOCKET;
pub use server::{run as run_daemon, DEFAULT_STATE_DIR};

/// The dhcp IPAM plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status: plugin::status,
    gc: plugin::gc,
    ..FnPlugin::new(plugin::add, plugin::del, plugin::check)
};
