//! The pod-sandbox network contract a CRI runtime owes kubelet (what containerd's CRI plugin
//! and go-cni do above libcni), on top of `cni-runtime`:
//!
//! - [`Sandboxes::run`] (RunPodSandbox): a netns of its own unless given one, the built-in
//!   loopback network on `lo`, the default network on `eth0` and extra networks on `net1`…,
//!   containerd's `CNI_ARGS` and capability args; a failure undoes everything.
//! - [`Sandboxes::stop`] / [`Sandboxes::remove`]: DEL of every network in reverse, continuing
//!   past a failing plugin (libcni's `DelNetworkList` stops at the first one and leaks,
//!   containerd issue #12130),
//!   an empty `CNI_NETNS` when the namespace is gone; idempotent; a retry finishes the rest.
//! - [`Sandboxes::status`] never fails; [`Sandboxes::ready`] is NetworkReady from STATUS.
//! - [`update_cidr`]: containerd's `conf_template` rendered once with the pod CIDR.
//! - [`Sandboxes::gc`]: recovery plus the runtime's GC with every recorded sandbox as valid.
//!
//! State: one record per sandbox under a state dir ([`store`]), written atomically before and
//! after every side effect; a record a killed process left in `setting-up` or `stopping` is
//! undone or finished by [`Sandboxes::recover`], through the same functions the verbs use.
//!
//! Files: `record` (the record), `store` (files and locks), `request` (run's inputs,
//! `CNI_ARGS`, capability args), `lifecycle` (run, stop, remove, status, recovery),
//! `readiness`, `cidr`, `gc`, `namespaces` (the netns seam the caller fills).

mod cidr;
mod error;
mod gc;
mod lifecycle;
mod namespaces;
mod readiness;
pub mod record;
mod request;
mod status;
pub mod store;

pub use cidr::{parse_cidrs, render, update_cidr, CidrUpdate, RENDERED_NAME};
pub use error::SandboxError;
pub use gc::GcReport;
pub use lifecycle::{Recovery, Sandboxes, STATE_MARK};
pub use namespaces::{netns_name, Namespaces};
pub use readiness::Readiness;
pub use record::{NetnsOwner, PodMeta, SandboxRecord, State};
pub use request::{cni_args, new_id, PortMapping, RunRequest};
pub use status::{NetworkStatus, SandboxStatus};
pub use store::{RecordStore, DEFAULT_STATE_DIR};

pub use cni_runtime::SetupMode;
