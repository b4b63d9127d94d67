//! sbr (Go: containernetworking/plugins `plugins/meta/sbr/main.go`): source-based routing for
//! `CNI_IFNAME`, chained after the plugin that made it. Each of its `prevResult` IPs gets its own
//! routing table (the first from 100 that no rule or route uses), a rule
//! `from <ip> lookup <table>`, a default route via its gateway (or the `gateways` entry of its
//! family) and copies of the interface's routes; then the interface's routes leave the main table.
//! With `table`, only the rules are added, pointing at that table.
//!
//! - [`conf`]: the keys; [`add`]: transactional ADD; [`del`]: DEL and CHECK. STATUS and GC
//!   are no-ops, as in Go.
//!
//! Deliberate differences from the Go plugin:
//! - a failed ADD removes the rules and routes it added and puts the main-table routes back
//!   (Go has no rollback);
//! - DEL with an empty or vanished `CNI_NETNS` is success (Go fails, and recreates the path
//!   as a file); besides the rules it flushes the per-IP tables they pointed to;
//! - CHECK checks that every IP has its rule (Go's CHECK does nothing);
//! - the netns file is locked (`flock`) as in Go, but opened, never created;
//! - `addSourceHints` and `vrfname` are refused (code 7), not implemented.

pub mod add;
pub mod conf;
pub mod del;

use cni_plugin::FnPlugin;

/// The sbr plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin::new(add::add, del::del, del::check);
