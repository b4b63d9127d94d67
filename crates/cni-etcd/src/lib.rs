//! How every rcni program reaches etcd as production runs it (etcd v3 over gRPC, through
//! the `etcd-client` crate).
//!
//! - [`access`]: the command-line options (`--etcd-endpoints`, the TLS files, user and
//!   password, or the `RCNI_ETCD_*` environment variables) and their checked form [`Access`].
//! - [`cause`]: why one endpoint failed, in one line an operator can act on ([`Cause`]).
//! - [`connection`]: a [`Connection`] to the first endpoint that answers, moving to the next
//!   when a member fails, using rotated TLS files from the next check on, with generic key
//!   operations (get, put, delete, transactions, watch, store leases).
//! - [`pages`]: a prefix of any size, read in pages at one revision
//!   ([`Connection::get_prefix`], or page by page with [`Connection::pages`]).
//!
//! What the keys mean is the business of the programs: `rcni-node`'s subnet leases, the
//! policies, namespaces and pods of `cni-policy`'s layout.

pub mod access;
pub mod cause;
pub mod connection;
pub mod pages;

pub use access::{Access, AccessError, EtcdOptions, Secret};
pub use cause::{Cause, Kind};
pub use connection::{
    ConnectError, Connection, Entry, EtcdError, LeaseId, Listing, Probe, Watch, WatchEvent,
    RELOAD_CHECK, REQUEST_TIMEOUT,
};
pub use pages::{Pages, MAX_PAGE_REPLY, PAGE_BYTES};
/// The key prefix rcni's network lives under unless `--prefix` says otherwise: subnet leases
/// and the network config (`rcni-node`), policies, namespaces and published pods
/// (`cni_policy::stored`).
pub const DEFAULT_PREFIX: &str = "/rcni.io/network";

/// The client crate, for the programs that build their own transactions.
pub use etcd_client;
