//! vlan ADD, as a transaction: a failure deletes the link and releases the IPAM
//! lease (Go keeps the link).

use cni_linux::rtnl::link_add::LinkKind;
use cni_plugin::CmdArgs;
use cni_types::{CniError, CniResult};

use super::conf::VlanConf;
use crate::common::sublink::{self, AddPlan, Addressing};
use crate::netns;

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = VlanConf::parse(&args.conf)?;
    conf.require_ipam()?;
    let ns = netns::open_required(&args.netns)?;
    let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
    let master = sublink::lookup_master(&mut mh, &conf.master)?;
    sublink::check_mtu_within_master(conf.mtu, &master)?;

    let plan = AddPlan {
        plugin: "vlan",
        kind: LinkKind::Vlan { id: conf.vlan_id },
        master: Some(master.index),
        link_in_container: conf.link_in_container,
        mtu: conf.mtu,
        mac: None,
        addressing: Addressing::Ipam,
        notify: false,
        dns: Some(conf.dns),
    };
    sublink::add_link(args, &ns, plan)
}
