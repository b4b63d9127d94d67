//! vxlan: one device `rcni.<VNI>` (learning off, local VTEP = the node's public IP, address
//! `<subnet>.0/32`), and per remote node, in flannel's order, a permanent neighbour entry
//! `<remote subnet>.0 -> remote VTEP MAC`, a permanent FDB entry `VTEP MAC -> remote PublicIP`
//! and the route `<remote subnet> via <remote subnet>.0 dev rcni.<VNI> onlink`. Removal goes in
//! the reverse order.
//!
//! The device is the agent's own (its name says so): every permanent neighbour and FDB entry on
//! it belongs to the agent, so a resync may remove the stale ones.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::LinkSpec;
use cni_linux::rtnl::overlay::{FdbEntry, NextHopRoute};
use cni_linux::rtnl::vxlan::VxlanSpec;
use cni_linux::{Handle, MacAddr};
use ipnet::{IpNet, Ipv4Net};

use super::{gone_is_fine, nl_err, Backend, BackendError, Repairs, RTPROT_RCNI};
use crate::lease::{BackendData, Lease};

/// The settings of the node's VXLAN device.
#[derive(Debug, Clone, Copy)]
pub struct VxlanSetup {
    /// VXLAN network identifier.
    pub vni: u32,
    /// UDP port.
    pub port: u16,
    /// Local VTEP (the node's public IP).
    pub local: Ipv4Addr,
    /// Underlay device index.
    pub underlay: u32,
    /// MTU of the device (underlay MTU minus 50).
    pub mtu: u32,
}

/// The objects one remote node needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RemotePath {
    gateway: Ipv4Addr,
    mac: MacAddr,
    fdb: FdbEntry,
    route: NextHopRoute,
}

/// The VXLAN backend.
pub struct Vxlan {
    nl: Handle,
    index: u32,
    mac: MacAddr,
    vni: u32,
}

/// The device name for a VNI.
pub fn device_name(vni: u32) -> String {
    format!("rcni.{vni}")
}

impl Vxlan {
    /// Creates the device, or reuses an existing one of that name with the same settings (a
    /// restarted agent); one with other settings is replaced (the name is the agent's).
    pub fn setup(mut nl: Handle, setup: VxlanSetup) -> Result<Self, BackendError> {
        let name = device_name(setup.vni);
        let spec = VxlanSpec {
            link: LinkSpec {
                name: name.clone(),
                mtu: Some(setup.mtu),
                mac: None,
            },
            vni: setup.vni,
            local: Some(IpAddr::V4(setup.local)),
            port: Some(setup.port),
            learning: false,
            underlay: Some(setup.underlay),
        };
        let existing = match nl.link_by_name(&name) {
            Ok(link) => Some(link),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(nl_err(format!("look up {name}"))(e)),
        };
        if let Some(link) = existing {
            let same = nl
                .vxlan_details(link.index)
                .map_err(nl_err(format!("read {name}")))?
                .is_some_and(|d| d.matches(&spec));
            if !same {
                log::info!("{name} exists with other settings: recreating it");
                nl.delete_link(link.index)
                    .map_err(nl_err(format!("delete {name}")))?;
            } else if link.mtu != setup.mtu {
                nl.set_link_mtu(link.index, setup.mtu)
                    .map_err(nl_err(format!("set MTU of {name}")))?;
            }
        }
        if nl.link_by_name(&name).is_err() {
            nl.create_vxlan(&spec).map_err(|e| {
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
            .link_by_name(&name)
            .map_err(nl_err(format!("look up {name}")))?;
        nl.set_link_up(link.index)
            .map_err(nl_err(format!("set {name} up")))?;
        let mac = link
            .mac
            .ok_or_else(|| BackendError::Setup(format!("{name} has no MAC address")))?;
        Ok(Vxlan {
            nl,
            index: link.index,
            mac,
            vni: setup.vni,
        })
    }

    fn path_for(&self, lease: &Lease) -> Option<RemotePath> {
        let mac = lease
            .attrs
            .backend_data
            .as_ref()
            .and_then(BackendData::vtep_mac);
        let vni = lease.attrs.backend_data.as_ref().and_then(|d| d.vni);
        let (true, Some(mac)) = (lease.attrs.backend_type == "vxlan", mac) else {
            log::warn!(
                "lease {} ({} backend) has no VXLAN VtepMAC: skipped",
                lease.subnet,
                lease.attrs.backend_type
            );
            return None;
        };
        if vni.is_some_and(|v| v != self.vni) {
            log::warn!(
                "lease {} uses VNI {vni:?}, not {}: skipped",
                lease.subnet,
                self.vni
            );
            return None;
        }
        let gateway = lease.subnet.network();
        Some(RemotePath {
            gateway,
            mac,
            fdb: FdbEntry {
                mac,
                dst: IpAddr::V4(lease.attrs.public_ip),
            },
            route: NextHopRoute {
                dst: IpNet::V4(lease.subnet),
                via: IpAddr::V4(gateway),
                oif: self.index,
                onlink: true,
                protocol: RTPROT_RCNI,
            },
        })
    }

    fn program(&mut self, p: &RemotePath) -> Result<(), BackendError> {
        self.nl
            .add_neighbour(self.index, IpAddr::V4(p.gateway), p.mac)
            .map_err(nl_err(format!("neighbour {} -> {}", p.gateway, p.mac)))?;
        self.nl
            .replace_fdb_entry(self.index, &p.fdb)
            .map_err(nl_err(format!("fdb {} -> {}", p.mac, p.fdb.dst)))?;
        self.nl
            .replace_nexthop_route(&p.route)
            .map_err(nl_err(format!("route to {}", p.route.dst)))
    }

    fn unprogram(&mut self, p: &RemotePath) -> Result<(), BackendError> {
        gone_is_fine(self.nl.delete_nexthop_route(&p.route))
            .map_err(nl_err(format!("delete route to {}", p.route.dst)))?;
        gone_is_fine(self.nl.delete_fdb_entry(self.index, &p.fdb))
            .map_err(nl_err(format!("delete fdb {}", p.mac)))?;
        gone_is_fine(self.nl.delete_neighbour(self.index, IpAddr::V4(p.gateway)))
            .map_err(nl_err(format!("delete neighbour {}", p.gateway)))
    }
}

impl Backend for Vxlan {
    fn backend_data(&self) -> Option<BackendData> {
        Some(BackendData {
            vni: Some(self.vni),
            vtep_mac: Some(self.mac.to_string()),
        })
    }

    fn configure_local(&mut self, subnet: Ipv4Net) -> Result<(), BackendError> {
        let want = IpNet::V4(Ipv4Net::new(subnet.network(), 32).expect("/32"));
        let current = self
            .nl
            .addresses(Some(self.index))
            .map_err(nl_err("list VXLAN device addresses"))?;
        for addr in current
            .iter()
            .filter(|a| a.addr != want && a.addr.addr().is_ipv4())
        {
            gone_is_fine(self.nl.delete_address(self.index, addr.addr))
                .map_err(nl_err(format!("delete old address {}", addr.addr)))?;
        }
        if !current.iter().any(|a| a.addr == want) {
            self.nl
                .add_address(self.index, want, AddAddressOptions::default())
                .map_err(nl_err(format!("address {want}")))?;
        }
        Ok(())
    }

    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        match self.path_for(lease) {
            Some(p) => self.program(&p),
            None => Ok(()),
        }
    }

    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        match self.path_for(lease) {
            Some(p) => self.unprogram(&p),
            None => Ok(()),
        }
    }

    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError> {
        let wanted: Vec<RemotePath> = remotes.iter().filter_map(|l| self.path_for(l)).collect();
        let routes: HashSet<NextHopRoute> = self
            .nl
            .nexthop_routes(false, RTPROT_RCNI)
            .map_err(nl_err("list routes"))?
            .into_iter()
            .filter(|r| r.oif == self.index)
            .collect();
        let fdb: HashSet<FdbEntry> = self
            .nl
            .fdb_entries(self.index)
            .map_err(nl_err("list fdb"))?
            .into_iter()
            .collect();
        let neigh: HashSet<(IpAddr, MacAddr)> = self
            .nl
            .neighbours(self.index)
            .map_err(nl_err("list neighbours"))?
            .into_iter()
            .filter(|n| n.permanent)
            .filter_map(|n| Some((n.ip, n.mac?)))
            .collect();
        let mut repairs = Repairs {
            programmed: wanted.len(),
            ..Repairs::default()
        };

        // Stale objects first (reverse order: route, fdb, neighbour).
        for r in routes
            .iter()
            .filter(|r| !wanted.iter().any(|p| p.route == **r))
        {
            gone_is_fine(self.nl.delete_nexthop_route(r))
                .map_err(nl_err(format!("delete stale route to {}", r.dst)))?;
            repairs.removed += 1;
        }
        for f in fdb.iter().filter(|f| !wanted.iter().any(|p| p.fdb == **f)) {
            gone_is_fine(self.nl.delete_fdb_entry(self.index, f))
                .map_err(nl_err(format!("delete stale fdb {}", f.mac)))?;
            repairs.removed += 1;
        }
        for (ip, mac) in neigh.iter().filter(|(ip, mac)| {
            !wanted
                .iter()
                .any(|p| IpAddr::V4(p.gateway) == *ip && p.mac == *mac)
        }) {
            log::debug!("removing stale neighbour {ip} -> {mac}");
            gone_is_fine(self.nl.delete_neighbour(self.index, *ip))
                .map_err(nl_err(format!("delete stale neighbour {ip}")))?;
            repairs.removed += 1;
        }
        for p in &wanted {
            let complete = routes.contains(&p.route)
                && fdb.contains(&p.fdb)
                && neigh.contains(&(IpAddr::V4(p.gateway), p.mac));
            if !complete {
                self.program(p)?;
                repairs.restored += 1;
            }
        }
        Ok(repairs)
    }
}
