//! rcni-node: the node agent of a multi-node pod network, on flannel's model.
//!
//! Each node holds a subnet lease in etcd (flannel's key layout) and connects to every other
//! node's subnet through a backend (host-gw routes, a VXLAN tunnel or encrypted WireGuard
//! tunnels) programmed over netlink;
//! it writes the conflist its container runtime uses, flannel's subnet file, and a status file
//! the plugins' STATUS and ADD read (ADD is refused with code 11 while the agent is down).
//!
//! - [`network`]: the network config (`<prefix>/config`) and subnet arithmetic;
//! - [`lease`]: lease keys and values;
//! - [`store`]: the datastore trait and its etcd implementation;
//! - [`backend`]: the `Backend` trait, [`backend::host_gw`], [`backend::vxlan`] and
//!   [`backend::wireguard`];
//! - [`agent`]: lease acquisition and the reconcile loop;
//! - [`cni_conf`], [`cni_version`], [`masq`], [`files`]: what the agent writes for the node;
//! - [`gc`] with [`cri`]: reclaiming the attachments of sandboxes the CRI runtime forgot;
//! - [`rule_repair`]: putting back the node's nf_tables rules after another firewall removed them;
//! - [`health`]: the health state, the status file and `/healthz` + `/metrics` ([`prometheus`]:
//!   label escaping), with [`policy_health`] for NetworkPolicy's part;
//! - [`shutdown`]: the stop value every task waits on;
//! - [`pods`] and [`policy`]: the node's pods, published in the datastore, and NetworkPolicy
//!   enforced on them with nf_tables ([`bridge_kind`]: whether the bridge tells the agent
//!   about new pods, which the hold needs);
//! - [`node`]: wiring it together from the command line's options.

pub mod agent;
pub mod backend;
pub mod bridge_kind;
pub mod cni_conf;
pub mod cni_version;
pub mod cri;
pub mod files;
pub mod gc;
pub mod health;
pub mod lease;
pub mod masq;
pub mod network;
pub mod node;
pub mod pods;
pub mod policy;
pub mod policy_health;
pub mod prometheus;
pub mod rule_repair;
pub mod shutdown;
pub mod store;
