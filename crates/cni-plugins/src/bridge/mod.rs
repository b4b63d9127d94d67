//! bridge (Go: containernetworking/plugins `plugins/main/bridge/bridge.go`): connects the container
//! to a Linux bridge in the host namespace through a veth pair, optionally with the gateway on the
//! bridge.
//!
//! - [`conf`]: the config keys; [`vlan`]: VLAN trunks and port VLANs; [`gateway`]: gateway
//!   computation and the bridge address.
//! - [`add`], [`del`] (with GC), [`check`] (with rcni's repair of the `ipMasq` and
//!   `macspoofchk` rules): the commands. STATUS and GC go to the IPAM plugin when
//!   `ipam.type` is set (after `rcniNodeStatus`, the node agent's health: `cni_types::node_agent`,
//!   which also refuses ADD with code 11 while that agent is down); with `rcniNodeSocket`, ADD
//!   and DEL tell the agent about the pod (`common::node_pods`);
//!   GC also removes `ipMasq` rules of attachments that are not valid.
//!
//! `ipMasq` and `macspoofchk` are nf_tables rules made over netlink (`common::masquerade`,
//! `common::spoofcheck`); both `ipMasqBackend` values are served by it.
//!
//! Deliberate differences from the Go plugin (nothing a runtime depends on changes):
//! - a failed ADD removes the veth pair (with its addresses and routes) and releases the IPAM
//!   lease; the namespace is opened before the bridge is created;
//! - the host veth gets an explicit random MAC, and CHECK does not compare the host veth's MAC
//!   (containernetworking/plugins issue #805);
//! - container IPv6 addresses are added with `nodad` unless `enabledad` (Go turns DAD off with
//!   `accept_dad=0`, to the same effect);
//! - DEL keeps going after a failed step and reports every error at the end;
//! - CHECK of an L2-only bridge skips IPAM CHECK (Go fails running an empty IPAM type);
//! - the bridge MAC is pinned with its current value, not the one read before the port was
//!   added (which is all-zero for a bridge whose last port went away);
//! - GC is implemented (Go's is a no-op); config values of the wrong type are code 7;
//! - a container interface whose attachment has no IPv6 address gets no IPv6 link-local
//!   address (`addrgenmode none`, set before it comes up) unless `ipv6LinkLocal: true`: the
//!   bridge floods the MLD reports and router solicitations such an address sends to every
//!   port, so with Go's behaviour each new pod costs work in every pod already on the bridge;
//! - the host veth (a bridge port) gets no IPv6 address either (`common::veth`).

pub mod add;
pub mod check;
pub mod conf;
pub mod del;
pub mod gateway;
pub mod vlan;

use cni_plugin::{ipam, CmdArgs, FnPlugin};
use cni_types::CniError;

/// The bridge plugin: the function each command runs.
pub const PLUGIN: FnPlugin = FnPlugin {
    status,
    gc: del::gc,
    repair: check::repair,
    ..FnPlugin::new(add::add, del::del, check::check)
};

/// STATUS: the node agent's health (its status file, and its pod socket where the config
/// names one), then the IPAM plugin's when one is configured.
fn status(args: &CmdArgs) -> Result<(), CniError> {
    cni_types::node_agent::check(&args.conf.raw)?;
    crate::common::node_pods::status(args)?;
    ipam::ipam_status_if_configured(args)
}
