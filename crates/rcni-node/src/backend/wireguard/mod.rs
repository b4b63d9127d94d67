//! wireguard: pod traffic between nodes encrypted, as flannel's `wireguard` backend does
//! (`pkg/backend/wireguard`), with the kernel's WireGuard where the module exists and
//! wireguard-go, supervised by the agent, where it does not (`--wireguard-implementation`).
//!
//! - [`settings`]: the network config's keys; [`options`]: the agent's flags;
//! - [`layout`]: the devices (`rcni-wg`, and `rcni-wg-v6` in `separate` mode) and, per remote
//!   lease, its peer (public key and port from its `BackendData`/`BackendV6Data`, endpoint its
//!   public address, allowed IPs its subnets) and its routes;
//! - [`keys`]: the node's key pair in a 0600 file, generated once, rotated by a command;
//! - [`tunnel`] over [`kernel`] and [`userspace`]: one device whichever implementation runs
//!   it, made where missing, kept where running, put back when it went away;
//! - [`diff`]: what must change on a running device (only what differs);
//! - [`status`]: per peer last handshake and bytes, for `/metrics`, a status file and doctor.
//!
//! Per remote node, in order: its peer on the device (the allowed IPs tell WireGuard where
//! the subnet's packets go and which sources it accepts from that key), then the route
//! `<subnet> dev rcni-wg proto 124` (the agent's protocol, as for host-gw and VXLAN). Removal
//! goes in reverse. Every peer on the agent's devices is the agent's: a resync removes those no
//! lease wants. Each device holds the node subnet's first address, the source of the node's
//! own traffic to remote pods (which the peers accept from this node's key).
//!
//! Deliberate differences from flannel: a route per remote subnet (flannel routes the whole
//! cluster network to its device), the devices and peers kept when the agent stops (flannel
//! deletes its devices on exit), and the MTU taken per underlay family (60 bytes over IPv4, 80
//! over IPv6; flannel takes 80).

pub mod diff;
pub mod kernel;
pub mod keys;
pub mod layout;
pub mod options;
pub mod settings;
pub mod status;
pub mod tunnel;
pub mod userspace;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use cni_linux::rtnl::device_route::DeviceRoute;
use cni_linux::wireguard::{DeviceUpdate, PeerChange, PeerConfig, PublicKey, SecretKey};
use cni_linux::Handle;
use ipnet::IpNet;

use self::keys::KeyFile;
use self::layout::{Layout, RemotePeer};
use self::options::{Implementation, WireguardOptions};
use self::settings::WireguardSettings;
use self::status::{DeviceStatus, PeerStatus, ProcessStatus, TunnelStatus};
use self::tunnel::{Engine, Tunnel};
use super::RTPROT_RCNI;
use super::{gone_is_fine, nl_err, set_device_address, Backend, BackendError, Repairs, Upkeep};
use crate::lease::{BackendData, Lease, Subnets};

/// What the backend is set up from.
#[derive(Debug, Clone)]
pub struct WireguardSetup {
    /// The network config's settings.
    pub settings: WireguardSettings,
    /// The agent's flags.
    pub options: WireguardOptions,
    /// The agent's state directory.
    pub agent_state_dir: PathBuf,
    /// The node's public IPv4 address, on a network with IPv4.
    pub local: Option<Ipv4Addr>,
    /// The node's public IPv6 address, on a network with IPv6.
    pub local6: Option<Ipv6Addr>,
    /// The underlay's MTU.
    pub underlay_mtu: u32,
}

/// Where the preshared key comes from.
#[derive(Debug)]
enum Psk {
    None,
    Config(SecretKey),
    File(KeyFile),
}

impl Psk {
    fn key(&self) -> Option<SecretKey> {
        match self {
            Psk::None => None,
            Psk::Config(k) => Some(*k),
            Psk::File(f) => Some(f.key()),
        }
    }
}

/// The WireGuard backend.
pub struct Wireguard {
    nl: Handle,
    engine: Engine,
    layout: Layout,
    tunnels: Vec<Tunnel>,
    key: KeyFile,
    public: PublicKey,
    psk: Psk,
    /// The node's subnets, once known: their first addresses go back on a device made again.
    local_subnets: Option<Subnets>,
    /// Which node published each peer key (for the status).
    nodes: HashMap<PublicKey, String>,
    /// Per tunnel: the device was just made or its process started, so it has no sessions,
    /// and the next resync starts a handshake with every peer ([`Wireguard::start_handshakes`]).
    fresh: Vec<bool>,
    /// The agent's state directory.
    agent_state_dir: PathBuf,
}

/// The implementation the flags ask for: the kernel's when it has WireGuard (`auto`, or
/// refused without it for `kernel`), else wireguard-go, which must be found.
fn choose_engine(
    options: &WireguardOptions,
    state_dir: &std::path::Path,
) -> Result<Engine, BackendError> {
    let userspace = |why: &str| -> Result<Engine, BackendError> {
        let binary = userspace::find_program(&options.wireguard_go).ok_or_else(|| {
            BackendError::Setup(format!(
                "wireguard: {why}, and the userspace implementation {} is not installed \
                 (Debian package wireguard-go; --wireguard-go PATH)",
                options.wireguard_go.display()
            ))
        })?;
        log::info!(
            "wireguard: userspace implementation, {} ({why})",
            binary.display()
        );
        Ok(Engine::Userspace {
            binary,
            log_dir: state_dir.to_path_buf(),
        })
    };
    match (options.wireguard_implementation, kernel::available()) {
        (Implementation::Kernel | Implementation::Auto, Ok(())) => {
            log::info!("wireguard: kernel implementation");
            Ok(Engine::Kernel)
        }
        (Implementation::Kernel, Err(why)) => Err(BackendError::Setup(format!(
            "wireguard: --wireguard-implementation kernel: {why}"
        ))),
        (Implementation::Auto, Err(why)) => userspace(&why),
        (Implementation::Userspace, _) => userspace("--wireguard-implementation userspace"),
    }
}

/// Deletes a device of the agent's the layout has no more (IPv6 turned off, another mode).
fn remove_unused(nl: &mut Handle, layout: &Layout) -> Result<(), BackendError> {
    for name in Layout::all_names() {
        if layout.devices.iter().any(|d| d.name == name) {
            continue;
        }
        match nl.link_by_name(name) {
            Ok(link) => {
                log::info!("{name} is not needed by the network config: deleting it");
                gone_is_fine(nl.delete_link(link.index))
                    .map_err(nl_err(format!("delete {name}")))?;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(nl_err(format!("look up {name}"))(e)),
        }
    }
    Ok(())
}

impl Wireguard {
    /// Chooses the implementation, loads (or makes) the key, and opens every device: made
    /// where missing, kept where running (a restarted agent changes nothing on a device that
    /// already has its key and port).
    pub fn setup(mut nl: Handle, setup: WireguardSetup) -> Result<Self, BackendError> {
        let state_dir = options::state_dir(&setup.agent_state_dir);
        cni_persist::ensure_dir(&state_dir, cni_persist::DirRule::PRIVATE)
            .map_err(|e| BackendError::Setup(format!("wireguard: {e}")))?;
        let psk = match (setup.settings.psk, &setup.options.wireguard_psk_file) {
            (Some(_), Some(_)) => {
                return Err(BackendError::Setup(
                    "wireguard: the network config has a PSK and --wireguard-psk-file gives \
                     another: choose one"
                        .into(),
                ))
            }
            (Some(k), None) => Psk::Config(k),
            (None, Some(path)) => Psk::File(KeyFile::load(path).map_err(setup_error)?),
            (None, None) => Psk::None,
        };
        let key = KeyFile::load_or_create(&setup.options.key_file(&setup.agent_state_dir))
            .map_err(setup_error)?;
        let public = keys::public_of(&key.key());
        let engine = choose_engine(&setup.options, &state_dir)?;
        let layout = Layout::new(
            setup.settings,
            setup.local,
            setup.local6,
            setup.underlay_mtu,
        );
        remove_unused(&mut nl, &layout)?;
        let mut tunnels = Vec::new();
        let mut fresh = Vec::new();
        for spec in layout.devices.clone() {
            let (tunnel, new) = engine.open(&mut nl, spec)?;
            tunnels.push(tunnel);
            fresh.push(new);
        }
        let mut backend = Wireguard {
            nl,
            engine,
            layout,
            tunnels,
            key,
            public,
            psk,
            local_subnets: None,
            nodes: HashMap::new(),
            fresh,
            agent_state_dir: setup.agent_state_dir,
        };
        for i in 0..backend.tunnels.len() {
            backend.configure_device(i)?;
        }
        log::info!(
            "wireguard: devices {}, public key {public}",
            backend
                .tunnels
                .iter()
                .map(|t| format!(
                    "{} (port {}, MTU {})",
                    t.spec.name, t.spec.listen_port, t.spec.mtu
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(backend)
    }

    /// The implementation in use: `kernel` or `userspace`.
    pub fn implementation(&self) -> &'static str {
        self.engine.name()
    }

    /// Gives device `i` the node's key and its port where it has others (peers untouched).
    fn configure_device(&mut self, i: usize) -> Result<(), BackendError> {
        let t = &mut self.tunnels[i];
        let actual = t.control.read().map_err(wg_error(t.spec.name))?;
        let update = diff::diff(&actual, self.key.key(), t.spec.listen_port, None);
        t.control.apply(&update).map_err(wg_error(t.spec.name))
    }

    /// The peers `lease` needs, with this node's preshared key.
    fn peers_for(&self, lease: &Lease) -> Vec<RemotePeer> {
        self.layout.peers_for(lease, self.psk.key())
    }

    fn apply(&mut self, device: usize, peers: Vec<PeerChange>) -> Result<(), BackendError> {
        let t = &mut self.tunnels[device];
        let update = DeviceUpdate {
            peers,
            ..DeviceUpdate::default()
        };
        t.control.apply(&update).map_err(wg_error(t.spec.name))
    }

    fn route(&self, device: usize, dst: IpNet) -> DeviceRoute {
        DeviceRoute {
            dst,
            oif: self.tunnels[device].index,
            protocol: RTPROT_RCNI,
        }
    }

    fn program(&mut self, peer: &RemotePeer) -> Result<(), BackendError> {
        self.apply(peer.device, vec![PeerChange::Set(peer.config.clone())])?;
        for dst in peer.routes() {
            let route = self.route(peer.device, *dst);
            self.nl
                .replace_device_route(&route)
                .map_err(nl_err(format!("route to {dst}")))?;
        }
        Ok(())
    }

    fn remember(&mut self, lease: &Lease, peers: &[RemotePeer]) {
        if let Some(node) = &lease.attrs.node_name {
            for p in peers {
                self.nodes.insert(p.config.public_key, node.clone());
            }
        }
    }

    /// Puts each device's first address of the node subnet back.
    fn set_addresses(&mut self) -> Result<(), BackendError> {
        let Some(subnet) = self.local_subnets else {
            return Ok(());
        };
        for t in &self.tunnels {
            if let (true, Some(net)) = (t.spec.ipv4, subnet.v4) {
                let want = IpNet::new(IpAddr::V4(net.network()), 32).expect("/32");
                set_device_address(&mut self.nl, t.index, want)?;
            }
            if let (true, Some(net)) = (t.spec.ipv6, subnet.v6) {
                let want = IpNet::new(IpAddr::V6(net.network()), 128).expect("/128");
                set_device_address(&mut self.nl, t.index, want)?;
            }
        }
        Ok(())
    }

    /// Makes device `i`'s peers exactly `wanted`; returns (set, removed).
    fn resync_peers(
        &mut self,
        i: usize,
        wanted: &[PeerConfig],
    ) -> Result<(usize, usize), BackendError> {
        let key = self.key.key();
        let t = &mut self.tunnels[i];
        let actual = t.control.read().map_err(wg_error(t.spec.name))?;
        let update = diff::diff(&actual, key, t.spec.listen_port, Some(wanted));
        let removed = update
            .peers
            .iter()
            .filter(|c| matches!(c, PeerChange::Remove(_)))
            .count();
        let set = update.peers.len() - removed;
        t.control.apply(&update).map_err(wg_error(t.spec.name))?;
        Ok((set, removed))
    }

    /// Makes device `i`'s routes exactly `wanted`; returns (added, removed).
    fn resync_routes(
        &mut self,
        i: usize,
        wanted: &BTreeSet<DeviceRoute>,
    ) -> Result<(usize, usize), BackendError> {
        let (index, spec) = (self.tunnels[i].index, self.tunnels[i].spec.clone());
        let mut actual = BTreeSet::new();
        for (carried, ipv6) in [(spec.ipv4, false), (spec.ipv6, true)] {
            if carried {
                actual.extend(
                    self.nl
                        .device_routes(ipv6, RTPROT_RCNI)
                        .map_err(nl_err("list routes"))?
                        .into_iter()
                        .filter(|r| r.oif == index),
                );
            }
        }
        let mut counts = (0, 0);
        for stale in actual.difference(wanted) {
            gone_is_fine(self.nl.delete_device_route(stale))
                .map_err(nl_err(format!("delete stale route to {}", stale.dst)))?;
            counts.1 += 1;
        }
        for route in wanted.difference(&actual) {
            self.nl
                .replace_device_route(route)
                .map_err(nl_err(format!("route to {}", route.dst)))?;
            counts.0 += 1;
        }
        Ok(counts)
    }

    /// Starts a handshake with every peer of device `i` now, rather than when the peer's own
    /// timers give up on its old session: a peer that only sends to this node keeps using a
    /// session the new process does not know for up to 15 s (WireGuard's keepalive and rekey
    /// timeouts) before it shakes hands again. A peer whose persistent keepalive is turned on
    /// sends a keepalive at once, which needs a session, hence a handshake; so each peer
    /// without one gets it on (1 s) and back off.
    fn start_handshakes(&mut self, i: usize, peers: &[PeerConfig]) -> Result<(), BackendError> {
        let quiet: Vec<&PeerConfig> = peers
            .iter()
            .filter(|p| p.persistent_keepalive == 0)
            .collect();
        let on = quiet
            .iter()
            .map(|p| {
                PeerChange::Set(PeerConfig {
                    persistent_keepalive: 1,
                    ..(*p).clone()
                })
            })
            .collect();
        let off = quiet
            .iter()
            .map(|p| PeerChange::Set((*p).clone()))
            .collect();
        self.apply(i, on)?;
        self.apply(i, off)?;
        log::info!(
            "{}: handshakes started with {} peers",
            self.tunnels[i].spec.name,
            peers.len()
        );
        Ok(())
    }

    /// Follows the key files: a rotated private key goes on every device (`true`: publish it),
    /// a changed preshared key makes the next resync set every peer again.
    fn follow_keys(&mut self, upkeep: &mut Upkeep) -> Result<(), BackendError> {
        if let Psk::File(f) = &mut self.psk {
            if f.changed().map_err(setup_error)?.is_some() {
                log::info!(
                    "wireguard: the preshared key in {} changed",
                    f.path().display()
                );
                upkeep.resync = true;
            }
        }
        let Some(key) = self.key.changed().map_err(setup_error)? else {
            return Ok(());
        };
        self.public = keys::public_of(&key);
        for t in &mut self.tunnels {
            let update = DeviceUpdate {
                private_key: Some(key),
                ..DeviceUpdate::default()
            };
            t.control.apply(&update).map_err(wg_error(t.spec.name))?;
        }
        log::info!(
            "wireguard: private key rotated, new public key {}",
            self.public
        );
        upkeep.republish = true;
        Ok(())
    }
}

fn setup_error(e: keys::KeyError) -> BackendError {
    BackendError::Setup(format!("wireguard: {e}"))
}

fn wg_error(device: &'static str) -> impl FnOnce(cni_linux::wireguard::Error) -> BackendError {
    move |e| BackendError::Setup(format!("{device}: {e}"))
}

impl Backend for Wireguard {
    fn backend_data(&self) -> Option<BackendData> {
        self.layout.published(&self.public).0
    }

    fn backend_v6_data(&self) -> Option<BackendData> {
        self.layout.published(&self.public).1
    }

    fn configure_local(&mut self, subnet: Subnets) -> Result<(), BackendError> {
        self.local_subnets = Some(subnet);
        self.set_addresses()
    }

    fn add_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        let peers = self.peers_for(lease);
        self.remember(lease, &peers);
        for peer in &peers {
            self.program(peer)?;
        }
        Ok(())
    }

    /// Every new node's peer in one update per device (one `set` over the socket, or a few
    /// generic netlink messages), then their routes.
    fn add_remotes(&mut self, leases: &[Lease]) -> Result<(), BackendError> {
        let mut changes: Vec<Vec<PeerChange>> = vec![Vec::new(); self.tunnels.len()];
        let mut routes = Vec::new();
        for lease in leases {
            let peers = self.peers_for(lease);
            self.remember(lease, &peers);
            for p in peers {
                routes.extend(p.routes().iter().map(|dst| self.route(p.device, *dst)));
                changes[p.device].push(PeerChange::Set(p.config));
            }
        }
        for (i, peers) in changes.into_iter().enumerate() {
            if !peers.is_empty() {
                self.apply(i, peers)?;
            }
        }
        for route in routes {
            self.nl
                .replace_device_route(&route)
                .map_err(nl_err(format!("route to {}", route.dst)))?;
        }
        Ok(())
    }

    fn update_remote(&mut self, old: &Lease, new: &Lease) -> Result<(), BackendError> {
        let fresh = self.peers_for(new);
        self.remember(new, &fresh);
        for peer in &fresh {
            self.program(peer)?;
        }
        for gone in self.peers_for(old) {
            let kept = |p: &&RemotePeer| p.device == gone.device;
            let same_key = fresh
                .iter()
                .filter(kept)
                .any(|p| p.config.public_key == gone.config.public_key);
            if !same_key {
                self.apply(
                    gone.device,
                    vec![PeerChange::Remove(gone.config.public_key)],
                )?;
                self.nodes.remove(&gone.config.public_key);
            }
            for dst in gone.routes() {
                if !fresh.iter().filter(kept).any(|p| p.routes().contains(dst)) {
                    let route = self.route(gone.device, *dst);
                    gone_is_fine(self.nl.delete_device_route(&route))
                        .map_err(nl_err(format!("delete route to {dst}")))?;
                }
            }
        }
        Ok(())
    }

    fn remove_remote(&mut self, lease: &Lease) -> Result<(), BackendError> {
        for peer in self.peers_for(lease) {
            for dst in peer.routes() {
                let route = self.route(peer.device, *dst);
                gone_is_fine(self.nl.delete_device_route(&route))
                    .map_err(nl_err(format!("delete route to {dst}")))?;
            }
            self.apply(
                peer.device,
                vec![PeerChange::Remove(peer.config.public_key)],
            )?;
            self.nodes.remove(&peer.config.public_key);
        }
        Ok(())
    }

    fn resync(&mut self, remotes: &[Lease]) -> Result<Repairs, BackendError> {
        let mut wanted: Vec<Vec<_>> = vec![Vec::new(); self.tunnels.len()];
        let mut routes: Vec<BTreeSet<DeviceRoute>> = vec![BTreeSet::new(); self.tunnels.len()];
        let mut repairs = Repairs::default();
        self.nodes.clear();
        for lease in remotes {
            let peers = self.peers_for(lease);
            repairs.programmed += usize::from(!peers.is_empty());
            self.remember(lease, &peers);
            for p in peers {
                for dst in p.routes() {
                    routes[p.device].insert(self.route(p.device, *dst));
                }
                wanted[p.device].push(p.config);
            }
        }
        for i in 0..self.tunnels.len() {
            let (set, removed) = self.resync_peers(i, &wanted[i])?;
            if std::mem::take(&mut self.fresh[i]) {
                self.start_handshakes(i, &wanted[i])?;
            }
            let (added, deleted) = self.resync_routes(i, &routes[i])?;
            repairs.restored += set + added;
            repairs.removed += removed + deleted;
        }
        Ok(repairs)
    }

    fn upkeep(&mut self) -> Result<Upkeep, BackendError> {
        let mut upkeep = Upkeep::default();
        for i in 0..self.tunnels.len() {
            if self.tunnels[i].upkeep(&mut self.nl)? {
                self.configure_device(i)?;
                self.fresh[i] = true;
                upkeep.resync = true;
            }
        }
        if upkeep.resync {
            self.set_addresses()?;
        }
        self.follow_keys(&mut upkeep)?;
        Ok(upkeep)
    }

    fn tunnel_status(&mut self) -> Option<TunnelStatus> {
        let mut status = TunnelStatus {
            implementation: self.engine.name().into(),
            updated_unix: crate::health::unix_now(),
            devices: Vec::new(),
        };
        for t in &mut self.tunnels {
            let device = match t.control.read() {
                Ok(d) => d,
                Err(e) => {
                    log::warn!("{}: read peers: {e}", t.spec.name);
                    continue;
                }
            };
            status.devices.push(DeviceStatus {
                name: t.spec.name.into(),
                public_key: self.public.to_base64(),
                listen_port: device.listen_port,
                process: t.process.as_ref().map(|p| ProcessStatus {
                    pid: p.pid(),
                    restarts: p.restarts,
                }),
                peers: device
                    .peers
                    .iter()
                    .map(|p| PeerStatus::of(p, self.nodes.get(&p.config.public_key).cloned()))
                    .collect(),
            });
        }
        let path = self.agent_state_dir.join(status::STATUS_FILE);
        if let Err(e) = status.write(&path) {
            log::warn!("write {}: {e}", path.display());
        }
        Some(status)
    }
}
