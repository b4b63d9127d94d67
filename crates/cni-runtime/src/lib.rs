//! The runtime side of CNI (what libcni and go-cni are for Go runtimes): config discovery,
//! plugin chains for ADD/DEL/CHECK/STATUS/GC/VERSION, a result cache Go libcni can read and
//! write, trace context for plugins, GC exclusion, rollback of failed ADDs, and multi-network sandboxes. Synchronous.
//!
//! ```no_run
//! use cni_runtime::{discover, Attachment, Runtime};
//! let found = discover("/etc/cni/net.d".as_ref())?;
//! let net = found.require("mynet")?;
//! let rt = Runtime::new(vec!["/opt/cni/bin".into()], "/var/lib/cni");
//! let att = Attachment::new("c1", "/run/netns/pod1", "eth0");
//! let result = rt.add(net, &att)?;
//! rt.check(net, &att)?;
//! rt.del(net, &att)?;
//! # let _ = result;
//! # Ok::<(), cni_runtime::RuntimeError>(())
//! ```

mod attachment;
pub mod cache;
mod cache_temp;
mod conf_dir;
mod deadline;
mod discovery;
mod error;
pub mod gojson;
mod lock;
mod network;
pub mod repair;
pub mod request;
mod runtime;
pub mod sandbox;
mod statedir;
mod trace;

pub use attachment::Attachment;
pub use cache::{CacheEntry, ResultCache, CACHE_KIND, DEFAULT_CACHE_DIR, MAX_ENTRY_NAME};
pub use conf_dir::{conf_files, CONF_EXTENSIONS};
pub use discovery::{discover, load_network, ConfWarning, Discovery};
pub use error::{Operation, PluginFailure, PluginId, RuntimeError, Stage};
pub use lock::NetworkLock;
pub use network::{Network, LOOPBACK_CONFIG};
pub use runtime::{GcReport, PluginVersion, Runtime, Timeouts, ValidationReport};
pub use sandbox::{
    default_ifname, InterfaceConfig, Member, NetworkResult, SandboxNetworks, SandboxRequest,
    SandboxResult, SetupMode,
};
pub use trace::{TraceContext, TRACE_ENV};

pub use cni_attribution::AttachmentId;
pub use cni_invoke::ExecOptions;
pub use cni_types::{CniError, CniResult, SpecVersion};
