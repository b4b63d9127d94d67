//! vxlan: one device `rcni.<VNI>` (learning off, local VTEP = the node's public IP, address
//! `<subnet>.0/32`), and per remote node, in flannel's order, a permanent neighbour entry
//! `<remote subnet>.0 -> remote VTEP MAC`, a permanent FDB entry `VTEP MAC -> remote PublicIP`
//! and the route `<remote subnet> via <remote subnet>.0 dev rcni.<VNI> onlink`. Removal goes in
//! the reverse order.
//!
//! On an IPv6 network a second device `rcni6.<VNI>` does the same for the IPv6 subnets over the
//! nodes' public IPv6 addresses (local VTEP = `--public-ipv6`, address `<subnet6>::/128`, MAC
//! published in `BackendV6Data`), as flannel's `flannel-v6.<VNI>` does. Deliberate difference:
//! the shorter name fits the kernel's 15 characters for every VNI.
//!
//! The devices are the agent's own (their names say so): every permanent neighbour and FDB entry
//! on them belongs to the agent, so a resync may remove the stale ones.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni_linux::rtnl::link_add::LinkAdd;
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::overlay::{FdbEntry, NextHopRoute};
use cni_linux::rtnl::vxlan::VxlanSpec;
use cni_linux::{Handle, MacAddr};
use ipnet::IpNet;

use super::{
    gone_is_fine, nl_err, set_device_address, Backend, BackendError, Repairs, RTPROT_RCNI,
};
use crate::lease::{BackendData, Lease, Subnets};

/// The settings of the node's VXLAN devices.
#[derive(Debug, Clone, Copy)]
pub struct VxlanSetup {
    /// VXLAN network identifier.
    pub vni: u32,
    /// UDP port.
    pub port: u16,
    /// Local IPv4 VTEP (the node's public IP), when the network has IPv4.
    pub local: Option<Ipv4Addr>,
    /// Local IPv6 VTEP (the node's public IPv6), when the network has IPv6.
    pub local6: Option<Ipv6Addr>,
    /// Underlay device index.
    pub underlay: u32,
    /// Underlay MTU (each device takes its own overhead from it).
    pub underlay_mtu: u32,
}

/// The objects one remote node needs in one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RemotePath {
    gateway: IpAddr,
    mac: MacAddr,
    fdb: FdbEntry,
    route: NextHopRoute,
}

/// One VXLAN device (one address family).
#[derive(Debug, Clone, Copy)]
struct Device {
    index: u32,
    mac: MacAddr,
}

/// The VXLAN backend.
pub struct Vxlan {
    nl: Handle,
    vni: u32,
    v4: Option<Device>,
    v6: Option<Device>,
}

/// The IPv4 device name for a VNI.
pub fn device_name(vni: u32) -> String {
    format!("rcni.{vni}")
}

/// The IPv6 device name for a VNI.
pub fn device_name_v6(vni: u32) -> String {
    format!("rcni6.{vni}")
}

/// Creates the device `name` with `spec` and `mtu`, or reuses an existing one of that name
/// with the same settings (a restarted agent); one with other settings is replaced (the name
/// is the agent's).
fn ensure_device(
    nl: &mut Handle,
    name: &str,
    mtu: u32,
    spec: &VxlanSpec,
) -> Result<Device, BackendError> {
    let existing = match nl.link_by_name(name) {
        Ok(link) => Some(link),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(nl_err(format!("look up {name}"))(e)),
    };
    if let Some(link) = existing {
        let same = nl
            .vxlan_details(link.index)
            .map_err(nl_err(format!("read {name}")))?
            .is_some_and(|d| d.matches(spec));
        if !same {
            log::info!("{name} exists with other settings: recreating it");
            nl.delete_link(link.index)
                .map_err(nl_err(format!("delete {name}")))?;
        } else if link.mtu != mtu {
            nl.change_link(&LinkChange::of(link.index).mtu(mtu))
                .map_err(nl_err(format!("set MTU of {name}")))?;
        }
    }
    if nl.link_by_name(name).is_err() {
        let request = LinkAdd::vxlan(name, spec.clone()).mtu(mtu);
        nl.add_link(&request).map_err(|e| {
            if e.errno() == Some(libc::EOPNOTSUPP) {
                BackendError::Setup(format!(
                    "cannot create {name}: this kernel has no VXLAN support (CONFIG_VXLAN)"
                ))
            } else {
                nl_err(format!("create {name}"))(e)
            }
        })?;
    }
    let link = nl
        .link_by_name(name)
        .map_err(nl_err(format!("look up {name}")))?;
    nl.change_link(&LinkChange::of(link.index).up())
        .map_err(nl_err(format!("set {name} up")))?;
    let mac = link
        .mac
        .ok_or_else(|| BackendError::Setup(format!("{name} has no MAC address")))?;
    Ok(Device {
        index: link.index,
        mac,
    })
}

/// Removes a device of the agent's that the network no longer needs (IPv6 turned off).
fn remove_device(nl: &mut Handle, name: &str) -> Result<(), BackendError> {
    match nl.link_by_name(name) {
        Ok(link) => {
            log::info!("{name} is not needed by the network config: deleting it");
            gone_is_fine(nl.delete_link(link.index)).map_err(nl_err(format!("delete {name}")))
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(nl_err(format!("look up {name}"))(e)),
    }
}

impl Vxlan {
    /// Creates (or reuses) the device of each family the network has.
    pub fn setup(mut nl: Handle, setup: VxlanSetup) -> Result<Self, BackendError> {
        let spec = |local: IpAddr| VxlanSpec {
            vni: setup.vni,
            local: Some(local),
            port: Some(setup.port),
            learning: false,
            underlay: Some(setup.underlay),
        };
        let mut device = |name: String, local: Option<IpAddr>, overhead: u32| match local {
            Some(local) => {
                let mtu = setup.underlay_mtu - overhead;
                ensure_device(&mut nl, &name, mtu, &spec(local)).map(Some)
            }
            None => remove_device(&mut nl, &name).map(|()| None),
        };
        let v4 = device(device_name(setup.vni), setup.local.map(IpAddr::V4), 50)?;
        let v6 = device(device_name_v6(setup.vni), setup.local6.map(IpAddr::V6), 70)?;
        Ok(Vxlan {
            nl,
            vni: setup.vni,
            v4,
            v6,
        })
    }

    /// The path through `dev` to `subnet` behind the VTEP `vtep` that published `data`.
    fn path(
        &self,
        lease: &Lease,
        dev: Option<Device>,
        subnet: IpNet,
        vtep: Option<IpAddr>,
        data: Option<&BackendData>,
    ) -> Option<RemotePath> {
        let dev = dev?;
        let (true, Some(vtep), Some(mac)) = (
            lease.attrs.backend_type == "vxlan",
            vtep,
            data.and_then(BackendData::vtep_mac),
        ) else {
            log::warn!(
                "lease {} ({} backend) has no VXLAN VTEP for {subnet}: skipped",
                lease.subnet,
                lease.attrs.backend_type
            );
            return None;
        };
        if let Some(vni) = data.and_then(|d| d.vni).filter(|v| *v != self.vni) {
            log::warn!(
                "lease {} uses VNI {vni}, not {}: skipped",
                lease.subnet,
                self.vni
            );
            return None;
        }
        let gateway = subnet.network();
        Some(RemotePath {
            gateway,
            mac,
            fdb: FdbEntry { mac, dst: vtep },
            route: NextHopRoute {
                dst: subnet,
                via: gateway,
                oif: dev.index,
                onlink: true,
                protocol: RTPROT_RCNI,
            },
        })
    }

    /// The paths a remote lease needs: one per family both sides have.
    fn paths_for(&self, lease: &Lease) -> Vec<RemotePath> {
        let a = &lease.attrs;
        let v4 = lease.subnet.v4.and_then(|net| {
            self.path(
                lease,
                self.v4,
                IpNet::V4(net),
                a.public_ipv4().map(IpAddr::V4),
                a.backend_data.as_ref(),
            )
        });
        let v6 = lease.subnet.v6.and_then(|net| {
            self.path(
                lease,
                self.v6,
                IpNet::V6(net),
                a.public_ipv6.map(IpAddr::V6),
                a.backend_v6_data.as_ref(),
            )
        });
        v4.into_iter().chain(v6).collect()
    }

    fn program(&mut self, p: &RemotePath) -> Result<(), BackendError> {
        let dev = p.route.oif;
        self.nl
            .add_neighbour(dev, p.gateway, p.mac)
            .map_err(nl_err(format!("neighbour {} -> {}", p.gateway, p.mac)))?;
        self.nl
            .replace_fdb_entry(dev, &p.fdb)
            .map_err(nl_err(format!("fdb {} -> {}", p.mac, p.fdb.dst)))?;
        self.nl
            .replace_nexthop_route(&p.route)
            .map_err(nl_err(format!("route to {}", p.route.dst)))
    }

    fn unprogram(&mut self, p: &RemotePath) -> Result<(), BackendError> {
        let dev = p.route.oif;
        gone_is_fine(self.nl.delete_nexthop_route(&p.route))
            .map_err(nl_err(format!("delete route to {}", p.route.dst)))?;
        gone_is_fine(self.nl.delete_fdb_entry(dev, &p.fdb))
            .map_err(nl_err(format!("delete fdb {}", p.mac)))?;
        gone_is_fine(self.nl.delete_neighbour(dev, p.gateway))
            .map_err(nl_err(format!("delete neighbour {}", p.gateway)))
    }

    /// Makes one device's routes, FDB and neighbour entries match `wanted` (its paths).
    fn resync_device(
        &mut self,
        dev: Device,
        wanted: &[RemotePath],
        repairs: &mut Repairs,
    ) -> Result<(), BackendError> {
        let mut routes: HashSet<NextHopRoute> = HashSet::new();
        for ipv6 in [false, true] {
            routes.extend(
                self.nl
                    .nexthop_routes(ipv6, RTPROT_RCNI)
                    .map_err(nl_err("list routes"))?
                    .into_iter()
                    .filter(|r| r.oif == dev.index),
            );
        }
        let fdb: HashSet<FdbEntry> = self
            .nl
            .fdb_entries(dev.index)
            .map_err(nl_err("list fdb"))?
            .into_iter()
            .collect();
        let neigh: HashSet<(IpAddr, MacAddr)> = self
            .nl
            .neighbours(dev.index)
            .map_err(nl_err("list neighbours"))?
            .into_iter()
            .filter(|n| n.permanent)
            .filter_map(|n| Some((n.ip, n.mac?)))
            .collect();

        // What the paths want, as sets: the comparisons stay linear in the remote nodes.
        let wanted_routes: HashSet<&NextHopRoute> = wanted.iter().map(|p| &p.route).collect();
        let wanted_fdb: HashSet<&FdbEntry> = wanted.iter().map(|p| &p.fdb).collect();
        let wanted_neigh: HashSet<(IpAddr, MacAddr)> =
            wanted.iter().map(|p| (p.gateway, p.mac)).collect();
        // Stale objects first (reverse order: route, fdb, neighbour).
        for r in routes.iter().filter(|r| !wanted_routes.contains(r)) {
            gone_is_fine(self.nl.delete_nexthop_route(r))
                .map_err(nl_err(format!("delete stale route to {}", r.dst)))?;
            repairs.removed += 1;
        }
        for f in fdb.iter().filter(|f| !wanted_fdb.contains(f)) {
            gone_is_fine(self.nl.delete_fdb_entry(dev.index, f))
                .map_err(nl_err(format!("delete stale fdb {}", f.mac)))?;
            repairs.removed += 1;
        }
        for (ip, mac) in neigh.iter().filter(|n| !wanted_neigh.contains(n)) {
            log::debug!("removing stale neighbour {ip} -> {mac}");
            gone_is_fine(self.nl.delete_neighbour(dev.index, *ip))
                .map_err(nl_err(format!("delete stale neighbour {ip}")))?;
            repairs.removed += 1;
        }
        for p in wanted {
            let complete = routes.contains(&p.route)
                && fdb.contains(&p.fdb)
                && neigh.contains(&(p.gateway, p.mac));
            if !complete {
                self.program(p)?;
                repairs.restored += 1;
            }
        }
        Ok(())
    }
}

impl Backend for Vxlan {
    fn backend_data(&self) -> Option<BackendData> {
        self.v4.map(|d| BackendData {
            vni: Some(self.vni),
            vtep_mac: Some(d.mac.to_string()),
            ..BackendData::default()
        })
    }

    fn backend_v6_data(&self) -> Option<BackendData> {
        self.v6.map(|d| BackendData {
            vni: Some(self.vni),
            vtep_mac: Some(d.mac.to_string()),
            ..BackendData::default()
        })
    }

    fn configure_local(&mut self, subnet: Subnets) -> Result<(), BackendError> {
        if let (Some(dev), Some(net)) = (self.v4, subnet.v4) {
            let want = IpNet::new(IpAddr::V4(net.network()), 32).expect("/32");
            set_device_address(&mut self.nl, dev.index, want)?;
        }
        if let (Some(dev), Some(net)) = (self.v6, subnet.v6) {
            let want = IpNet::new(IpAddr::V6(net.network()), 128).expect("/128");
            set_device_address(&mut self.nl, dev.index, want)?;
        }
        Ok(())
    }

    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        for p in self.paths_for(lease) {
            self.program(&p)?;
        }
        Ok(())
    }

    fn update_remote(&mut self, old: &Lease, new: &Lease) -> Result<(), BackendError> {
        let fresh = self.paths_for(new);
        for p in &fresh {
            self.program(p)?;
        }
        for p in self.paths_for(old) {
            let dev = p.route.oif;
            if !fresh.iter().any(|n| n.route.dst == p.route.dst) {
                gone_is_fine(self.nl.delete_nexthop_route(&p.route))
                    .map_err(nl_err(format!("delete route to {}", p.route.dst)))?;
            }
            if !fresh.iter().any(|n| n.fdb == p.fdb && n.route.oif == dev) {
                gone_is_fine(self.nl.delete_fdb_entry(dev, &p.fdb))
                    .map_err(nl_err(format!("delete fdb {}", p.mac)))?;
            }
            if !fresh
                .iter()
                .any(|n| n.gateway == p.gateway && n.route.oif == dev)
            {
                gone_is_fine(self.nl.delete_neighbour(dev, p.gateway))
                    .map_err(nl_err(format!("delete neighbour {}", p.gateway)))?;
            }
        }
        Ok(())
    }

    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        for p in self.paths_for(lease) {
            self.unprogram(&p)?;
        }
        Ok(())
    }

    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError> {
        let per_node: Vec<Vec<RemotePath>> = remotes.iter().map(|l| self.paths_for(l)).collect();
        let mut repairs = Repairs {
            programmed: per_node.iter().filter(|p| !p.is_empty()).count(),
            ..Repairs::default()
        };
        let wanted: Vec<RemotePath> = per_node.into_iter().flatten().collect();
        for dev in [self.v4, self.v6].into_iter().flatten() {
            let mine: Vec<RemotePath> = wanted
                .iter()
                .filter(|p| p.route.oif == dev.index)
                .copied()
                .collect();
            self.resync_device(dev, &mine, &mut repairs)?;
        }
        Ok(repairs)
    }
}
