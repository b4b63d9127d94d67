//! ipvlan ADD, as a transaction: a failure deletes the link and releases the IPAM
//! lease (Go rolls back neither). Chained without IPAM, the `prevResult` IPs are configured.

use cni_linux::rtnl::link_add::LinkKind;
use cni_linux::rtnl::virt::IpvlanFlag;
use cni_plugin::CmdArgs;
use cni_types::{CniError, CniResult};

use super::conf::IpvlanConf;
use crate::common::sublink::{self, AddPlan, Addressing};
use crate::netns;

pub fn add(args: &CmdArgs) -> Result<CniResult, CniError> {
    let conf = IpvlanConf::parse(&args.conf)?;
    let prev = args.prev_result.as_ref();
    let addressing = match conf.chained_ips(prev)? {
        Some(r) => Addressing::Prev(r),
        None => Addressing::Ipam,
    };
    let master_name = conf.master_name(prev)?;
    let ns = netns::open_required(&args.netns)?;
    let mut mh = sublink::master_handle(Some(&ns), conf.link_in_container)?;
    let master = sublink::resolve_master(&mut mh, master_name.as_deref())?;

    let plan = AddPlan {
        plugin: "ipvlan",
        kind: LinkKind::Ipvlan {
            mode: conf.mode,
            flag: IpvlanFlag::Bridge,
        },
        master: Some(master.index),
        link_in_container: conf.link_in_container,
        mtu: conf.mtu,
        mac: None,
        addressing,
        notify: true,
        dns: Some(conf.dns),
    };
    sublink::add_link(args, &ns, plan)
}
