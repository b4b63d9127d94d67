//! bridge DEL: the masquerade teardown (first, its socket closed at the end),
//! delete the container interface (its host peer goes with it) with IPAM DEL beside it, then
//! the spoof-check teardown. Both teardowns select rules
//! by attachment, so they need neither the addresses nor the netns (no #810 leak).
//!
//! Idempotent and best effort: an empty CNI_NETNS, a namespace that is gone, or an interface
//! that is already deleted still runs IPAM DEL, and a failing step does not stop the later
//! ones; all errors are reported together at the end.
//!
//! GC: what DEL removes, for every attachment of the network not in the valid list.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::conf::BridgeConf;
use crate::common::errors::combine;
use crate::common::veth;
use crate::common::{masquerade, node_pods, phase_trace, spoofcheck};
use crate::netns::{self, Opened};

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    phase_trace::mark("conf");
    // Before the addresses are released, so that no later pod inherits this one's policies.
    node_pods::forget(args);
    let mut errors = Vec::new();
    // First, and its socket kept open until the veth is gone, so that the socket's closing
    // wait overlaps the veth deletion (see masquerade::Teardown).
    let mut masq_teardown = None;
    if conf.layer3 && conf.ip_masq {
        match masquerade::start_teardown(&args.conf.name, &args.container_id, &args.ifname) {
            Ok(t) => masq_teardown = Some(t),
            Err(e) => errors.push(e),
        }
    }
    phase_trace::mark("masq");
    errors.extend(delete_links_and_lease(args, &conf));
    drop(masq_teardown);
    combine(errors)
}

/// Everything of the DEL but masquerading; returns the errors of the steps that failed.
fn delete_links_and_lease(args: &CmdArgs, conf: &BridgeConf) -> Vec<CniError> {
    let mut errors: Vec<CniError> = Vec::new();
    let mut ns = None;
    if !args.netns.as_os_str().is_empty() {
        match netns::open(&args.netns) {
            Ok(Opened::Ns(opened)) => ns = Some(opened),
            Ok(Opened::Gone(e)) => log::info!("DEL: {e}; only releasing the IPAM lease"),
            Err(e) => errors.push(e),
        }
    }
    let owner = args.id();
    let release = || {
        conf.layer3
            .then(|| ipam::ipam_del(args))
            .and_then(Result::err)
    };
    let (link_errors, ipam_error) =
        veth::delete_attachment_beside(ns.as_ref(), &args.ifname, &owner, release);
    errors.extend(link_errors);
    errors.extend(ipam_error);
    phase_trace::mark("links and lease");

    if conf.macspoofchk {
        if let Err(e) = spoofcheck::teardown_spoofcheck(&args.container_id, &args.ifname) {
            // Logged only, as in Go.
            log::warn!("spoof check teardown: {}", e.msg);
        }
    }
    errors
}

/// GC: the IPAM plugin's when one is configured, then the `ipMasq` rules, veths and spoof
/// checks of attachments that are not valid.
pub fn gc(args: &CmdArgs) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.conf, &args.cni_args()?)?;
    let ipam = match args.conf.ipam_type.is_empty() {
        true => Ok(()),
        false => ipam::ipam_gc(args),
    };
    combine(
        [
            ipam,
            masquerade::gc_for(args, conf.ip_masq),
            veth::gc_for(args),
            // After the veths: a check is stale once its veth is gone.
            spoofcheck::gc_spoofcheck(args.valid_attachments()),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect(),
    )
}
