//! Helpers shared by the interface plugins (bridge, ptp, and later macvlan, ipvlan, ...).
//!
//! - [`veth`]: veth pairs with a random `vethXXXXXXXX` host end (Go's `ip.SetupVeth`).
//! - [`iface_config`]: applying an IPAM result to an interface (Go's `ipam.ConfigureIface`).
//! - [`link_info`]: result `interfaces` entries from kernel links.
//! - [`validate`]: CHECK helpers comparing a `prevResult` with the kernel.
//! - [`masquerade`]: per-attachment `ipMasq` rules on nf_tables (set up, tear down, GC).
//! - [`spoofcheck`]: bridge `macspoofchk` rules on nf_tables.
//! - [`attachment_rules`]: CHECK and repair of an attachment's `ipMasq` and `macspoofchk`
//!   rules (bridge, ptp).
//! - [`nft_skeleton`]: writing a table's constant part only when it is missing.
//! - [`conf`]: case-insensitive decoding of plugin keys, the way Go's `encoding/json` reads them.
//! - [`errors`]: several DEL errors reported as one.
//! - [`fault`]: test-only failure injection at named ADD steps (debug builds).
//! - [`sublink`]: master look-up, temporary-name creation and DEL/CHECK steps shared by
//!   macvlan, ipvlan, vlan and dummy.
//! - [`random`]: random bytes for interface names and MACs.
//! - [`state_file`]: per-attachment state files in checked directories, written atomically.
//! - [`sublink_record`]: where a sub-link's attachment lives, so GC can reach its namespace.
//! - [`phase_trace`]: phase timestamps for benchmarks (`RCNI_TRACE_PHASES`).
//! - [`node_pods`]: telling the node agent about a pod at ADD and DEL (`rcniNodeSocket`).

pub mod attachment_rules;
pub mod conf;
pub mod errors;
pub mod fault;
pub mod iface_config;
pub mod link_info;
pub mod masquerade;
pub mod nft_skeleton;
pub mod nft_tag;
pub mod node_pods;
pub mod phase_trace;
pub mod random;
pub mod spoofcheck;
pub mod state_file;
pub mod step;
pub mod sublink;
pub mod sublink_record;
pub mod validate;
pub mod veth;
