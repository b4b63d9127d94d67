//! host-local IPAM: configuration, allocator and on-disk store, byte-compatible with the Go
//! `host-local` plugin of containernetworking/plugins so that both can share a data directory.
//!
//! Typical use by a plugin:
//!
//! ```no_run
//! # fn main() -> Result<(), cni_ipam::IpamError> {
//! let stdin = br#"{"cniVersion":"1.0.0","name":"net","ipam":{"type":"host-local","subnet":"198.19.128.0/20"}}"#;
//! let config = cni_ipam::HostLocalConfig::parse(stdin, None)?;
//! let ipam = cni_ipam::HostLocal::new(&config)?;
//! let allocations = ipam.allocate("ctr1", "eth0", &config.requested_ips)?;
//! # let _ = allocations;
//! ipam.release("ctr1", "eth0")?;
//! # Ok(()) }
//! ```

mod allocator;
mod config;
mod error;
mod files;
mod ident;
mod ip;
mod owner_index;
mod range;
mod resolv;
mod static_config;
mod store;

pub use allocator::{assign_requested, Allocation, HostLocal};
pub use config::{HostLocalConfig, Route};
pub use error::{code, ConfigError, IpamError};
pub use ident::{is_valid_ifname, is_valid_name};
pub use ip::go_string as go_ip_string;
pub use ip::parse_ip_with_optional_prefix as parse_requested_ip;
pub use owner_index::INDEX_PREFIX;
pub use range::{Candidates, Range, RangeSet, RangeSpec};
pub use resolv::{parse_resolv_conf, parse_resolv_conf_text, Dns};
pub use static_config::{StaticAddress, StaticConfig};
pub use store::{
    lease_content, DiskStore, Held, Lease, LeaseOwner, LockedStore, LAST_RESERVED_PREFIX,
    LINE_BREAK, LOCK_FILE, TEMP_PREFIX,
};
