//! bandwidth (Go: containernetworking/plugins `plugins/meta/bandwidth/`): a chained plugin that
//! shapes an attachment's traffic with token-bucket (TBF) qdiscs in the host namespace, on the host
//! end of the container's veth.
//!
//! - Ingress (into the container): a TBF root qdisc `1:` on the host veth.
//! - Egress (out of the container): an IFB device named by [`conf::ifb_name`], with a TBF root
//!   qdisc; the host veth gets an ingress qdisc and a u32 match-all filter redirecting every
//!   packet to the IFB.
//! - With `shapedSubnets` or `unshapedSubnets` (mutually exclusive, code 7 if both are set) the
//!   root qdiscs are the HTB layout of Go v1.5.x instead: HTB `1:` with class `1:30` (the
//!   limit; ceiling twice the rate) and class `1:1` (100 GB/s), u32 filters (priority 16 for
//!   IPv4, 15 for IPv6) sending the listed subnets to `1:30` (shaped) or `1:1` (unshaped),
//!   the other class being the default. Upstream dropped this layout again in v1.6.0; without
//!   either list rcni keeps the TBF layout of Go 1.1.1 and v1.6+, and CHECK and DEL read it.
//! - [`add`]: ADD needs `prevResult` (unless nothing is shaped) and returns it, with the IFB
//!   appended to `interfaces`; [`del`]: DEL deletes the IFB and needs no netns; [`check`]:
//!   CHECK compares the TBF (or HTB) settings. GC removes IFBs of attachments not in the valid list; STATUS is a no-op. Versions from 0.3.0.
//!
//! Deliberate differences from the Go plugin:
//! - invalid input is code 7 (Go: 999); rates below 8 bit/s and bursts below 8 bits are refused
//!   (Go divides by zero or asks the kernel for an empty bucket);
//! - a failed ADD removes what it created (Go leaves it until DEL);
//! - `prevResult` is required even when nothing is shaped (Go cannot print a missing result
//!   either);
//! - every object is created with "fail if it exists" and a failed ADD undoes only what it
//!   created itself, so a repeated ADD of a live attachment fails with "already exists" and
//!   leaves the first ADD's qdiscs and IFB untouched (Go fails too, on the existing qdisc);
//! - the redirect filter carries one mirred action (Go's netlink library sends the same
//!   redirect twice);
//! - DEL does not validate the limits (it only needs the network name and container ID), but
//!   refuses a key of the wrong type, as Go and every rcni plugin do;
//! - the HTB filters on the host veth (traffic into the container) match the peer's *source*
//!   address; Go v1.5.x matched the destination there too, which is the pod's own address, so
//!   its lists never selected the peer for ingress traffic. CHECK accepts either match there;
//! - the IFB of the HTB layout gets the veth's txqlen, at least 1000, as in Go v1.5.x (with
//!   txqlen 0, as Go v1.6+ makes it, HTB's class queues drop every packet);
//! - the IFB is made in the container's namespace and moved to the host's with its attachment
//!   as interface alias (the tag of `common::nft_tag`) in one request, so a killed ADD leaves
//!   nothing DEL or GC cannot attribute; DEL also removes such an IFB left in the container's
//!   namespace, and GC removes the tagged IFBs of the network's attachments not in the valid
//!   list (Go's GC is a no-op; Go's IFBs carry no alias, so GC leaves those alone);
//! - before the IFB is created, ADD writes the attachment's record (network, container,
//!   interface, netns path; `common::sublink_record`, in `dataDir`, default [`RECORD_DIR`]),
//!   removed by DEL and by the undo of a failed ADD, so GC, which gets no netns, also enters
//!   the namespace of an attachment missing from the valid list and deletes the IFB a killed
//!   ADD left there before moving it (found by its name, derived from the attachment).

pub mod add;
pub mod check;
pub mod conf;
pub mod del;

use cni_linux::rtnl::link::Link;
use cni_linux::{Handle, NetlinkError};
use cni_plugin::{CmdArgs, Plugin};
use cni_types::{CniError, CniResult, SpecVersion};

use crate::netns;

/// Where the attachment records go when the config names no `dataDir`.
pub use cni_attribution::names::BANDWIDTH_RECORD_DIR as RECORD_DIR;

/// What its attachment records are called in errors and logs.
const RECORD: &str = "bandwidth IFB record";

/// The directory of the attachment records (see [`add`]): `dataDir`, else [`RECORD_DIR`].
fn record_dir(args: &CmdArgs) -> Result<std::path::PathBuf, CniError> {
    crate::common::sublink_record::state_dir_or(&args.conf.raw, RECORD_DIR)
}

/// The bandwidth plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct BandwidthPlugin;

fn netlink_error(what: &str, e: NetlinkError) -> CniError {
    CniError::internal(format!("bandwidth: {what}: {e}"))
}

fn host_handle() -> Result<Handle, CniError> {
    Handle::new().map_err(|e| netlink_error("cannot open a netlink socket", e))
}

/// The host end of the container interface's veth, which must be listed in `prevResult` as a
/// host interface (found as Go finds it: through the container link's peer index).
fn host_veth(args: &CmdArgs, prev: &CniResult, host: &mut Handle) -> Result<Link, CniError> {
    if prev.interfaces.is_empty() {
        return Err(CniError::invalid_config(
            "bandwidth: no interfaces provided",
        ));
    }
    let ns = netns::open_required(&args.netns)?;
    let ifname = args.ifname.clone();
    let peer = ns
        .run(move || -> Result<Option<u32>, NetlinkError> {
            let link = Handle::new()?.link_by_name(&ifname)?;
            Ok(link.link.filter(|_| link.kind.as_deref() == Some("veth")))
        })
        .map_err(|e| CniError::invalid_netns(format!("bandwidth: {e}")))?;
    let peer = match peer {
        Ok(Some(index)) if index > 0 => index,
        Ok(_) => {
            return Err(CniError::internal(format!(
                "container interface {} has no veth peer",
                args.ifname
            )))
        }
        Err(e) => {
            return Err(CniError::internal(format!(
                "container interface {} has no veth peer: {e}",
                args.ifname
            )))
        }
    };
    let link = host.link_by_index(peer).map_err(|_| {
        CniError::internal(format!("veth peer with index {peer} is not in host ns"))
    })?;
    if prev
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == link.name)
    {
        Ok(link)
    } else {
        Err(CniError::internal(
            "no veth peer of container interface found in host ns",
        ))
    }
}

fn required_prev(args: &CmdArgs) -> Result<CniResult, CniError> {
    args.prev_result
        .clone()
        .ok_or_else(|| CniError::invalid_config("must be called as chained plugin"))
}

impl Plugin for BandwidthPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add::add(args)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        // Types are checked like ADD's, so every command refuses the same configs.
        conf::check_types(&args.conf)?;
        del::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check::check(args)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::gc(args)
    }

    fn supported_versions(&self) -> Vec<SpecVersion> {
        SpecVersion::ALL
            .into_iter()
            .filter(|v| *v >= SpecVersion::V0_3_0)
            .collect()
    }
}
