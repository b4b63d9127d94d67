//! macvlan ADD, as a transaction: a failure after the link exists deletes it and
//! releases the IPAM lease (Go leaves the link behind on IPAM errors).

use cni_linux::rtnl::link_add::LinkKind;
use cni_plugin::CmdArgs;
use cni_types::{CniError, CniResult};

use super::conf::MacvlanConf;
use crate::common::sublink::{self, AddPlan, Addressing};
use crate::netns;

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = MacvlanConf::parse(&args.conf, &args.cni_args()?)?;
    let ns = netns::open_required(&args.netns)?;
    let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
    let master = sublink::resolve_master(&mut mh, conf.master.as_deref())?;
    sublink::check_mtu_within_master(conf.mtu, &master)?;

    let plan = AddPlan {
        plugin: "macvlan",
        kind: LinkKind::Macvlan {
            mode: conf.mode,
            bc_queue_len: conf.bc_queue_len,
        },
        master: Some(master.index),
        link_in_container: conf.link_in_container,
        mtu: conf.mtu,
        mac: conf.mac,
        addressing: if conf.layer3 {
            Addressing::Ipam
        } else {
            Addressing::L2
        },
        notify: true,
        // Go copies the config's DNS into the result, replacing IPAM's.
        dns: Some(conf.dns),
    };
    sublink::add_link(args, &ns, plan)
}
