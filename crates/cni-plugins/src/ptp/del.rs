//! ptp DEL: the masquerade teardown (by attachment, so it runs even when the netns
//! is gone: no #810 leak), then (with a netns) delete the container veth, which takes the host
//! end with its address and route, with IPAM DEL beside it.
//! Best effort: a failing step does not stop the later ones, and the errors are reported
//! together. A missing netns or interface is success.
//!
//! GC: what DEL removes, for every attachment of the network not in the valid list.

use cni_plugin::{ipam, CmdArgs};
use cni_types::CniError;

use super::PtpConf;
use crate::common::errors::combine;
use crate::common::veth;
use crate::common::{masquerade, phase_trace};
use crate::netns::{self, Opened};

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = PtpConf::parse(&args.conf)?;
    let mut errors = Vec::new();
    // First, so that its socket's closing wait overlaps the veth deletion (see Teardown).
    let mut masq_teardown = None;
    if conf.ip_masq {
        match masquerade::start_teardown(&args.conf.name, &args.container_id, &args.ifname) {
            Ok(t) => masq_teardown = Some(t),
            Err(e) => errors.push(e),
        }
    }
    phase_trace::mark("masq");
    let mut ns = None;
    if !args.netns.as_os_str().is_empty() {
        match netns::open(&args.netns) {
            Ok(Opened::Ns(opened)) => ns = Some(opened),
            Ok(Opened::Gone(e)) => log::info!("DEL: {e}; nothing to delete in it"),
            Err(e) => errors.push(e),
        }
    }
    let owner = args.id();
    let release = || ipam::ipam_del(args).err();
    let (link_errors, ipam_error) =
        veth::delete_attachment_beside(ns.as_ref(), &args.ifname, &owner, release);
    // IPAM's error first, as when it ran before the deletion.
    errors.extend(ipam_error);
    errors.extend(link_errors);
    phase_trace::mark("links and lease");
    drop(masq_teardown);
    combine(errors)
}

/// GC: the IPAM plugin's, then the `ipMasq` rules and veths of attachments that are not valid.
pub fn gc(args: &CmdArgs) -> Result<(), CniError> {
    let conf = PtpConf::parse(&args.conf)?;
    combine(
        [
            ipam::ipam_gc(args),
            masquerade::gc_for(args, conf.ip_masq),
            veth::gc_for(args),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect(),
    )
}
