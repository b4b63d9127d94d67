//! Wiring: from the command line's options to a running agent, in flannel's order: underlay
//! device, datastore, network config, backend device, lease, local backend config, forwarding
//! and masquerade, files, then the reconcile loop; on a graceful stop the lease is kept unless
//! `--release-on-exit`. The conflist's versions are settled first (a `--cni-version` a plugin
//! does not support stops the agent before it changes anything), and the status file is kept
//! by its own task from the start to the end (unhealthy until the first list of leases is
//! programmed, and with the reason once the agent stops).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use cni_linux::Handle;
use tokio::sync::watch;

use crate::agent::{self, AgentConfig, Held, Kernel, Reconciler};
use crate::backend::host_gw::HostGw;
use crate::backend::vxlan::{Vxlan, VxlanSetup};
use crate::backend::wireguard::options::WireguardOptions;
use crate::backend::wireguard::{Wireguard, WireguardSetup};
use crate::backend::Backend;
use crate::cni_conf::NodeFiles;
use crate::cni_version::ConfVersions;
use crate::cri::CriClient;
use crate::gc::{self, GcConfig};
use crate::health::{self, lock, HealthState, SharedHealth, StatusWriter};
use crate::lease::{LeaseAttrs, Subnets};
use crate::network::{BackendKind, NetworkConfig};
use crate::policy::{self, PolicyConfig};
use crate::store::etcd::{Access, EtcdStore};
use crate::store::Store;
use crate::{cni_conf, cni_version, masq, rule_repair};

/// The agent's options (the command line's flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// How to reach etcd (endpoints, TLS files, credentials).
    pub etcd: Access,
    /// The node's name (logs, lease, subnet file, metrics).
    pub node_name: String,
    /// The node's underlay IPv4 address (PublicIP, VXLAN local VTEP); needed on an IPv4 network.
    pub public_ip: Option<Ipv4Addr>,
    /// The node's underlay IPv6 address (PublicIPv6, IPv6 VTEP); needed on an IPv6 network.
    pub public_ipv6: Option<Ipv6Addr>,
    /// The underlay device; the holder of `public_ip` when `None`.
    pub iface: Option<String>,
    /// The etcd key prefix.
    pub prefix: String,
    /// Where the conflist goes.
    pub cni_conf_dir: PathBuf,
    /// Where the plugins are (checked at start).
    pub cni_bin_dir: PathBuf,
    /// flannel's subnet file.
    pub subnet_file: PathBuf,
    /// The status file and the pods' host-local leases.
    pub state_dir: PathBuf,
    /// Where `/healthz` and `/metrics` are served.
    pub health_addr: Option<SocketAddr>,
    /// TTL of the subnet lease.
    pub lease_ttl: Duration,
    /// Revoke the lease on a graceful stop.
    pub release_on_exit: bool,
    /// How long the datastore may fail before the node is unhealthy.
    pub status_grace: Duration,
    /// Period of the kernel resync.
    pub resync_interval: Duration,
    /// `--cni-version`: the one version the conflist carries (default: offer every version
    /// the plugins share, see [`crate::cni_version`]).
    pub cni_version: Option<String>,
    /// The CRI runtime asked which sandboxes exist; no GC without it.
    pub cri_socket: Option<PathBuf>,
    /// Period of the GC of forgotten sandboxes.
    pub gc_interval: Duration,
    /// Age below which an attachment is never reclaimed.
    pub gc_grace: Duration,
    /// The runtime's libcni cache directory.
    pub cni_cache_dir: PathBuf,
    /// Enforce NetworkPolicy on the node's pods (see [`crate::policy`]).
    pub network_policy: bool,
    /// The `rcni pod` records the node's pods are read from (without `cri_socket`).
    pub pod_state_dir: PathBuf,
    /// The `wireguard` backend's flags.
    pub wireguard: WireguardOptions,
}

/// The plugins the conflist chains.
const PLUGINS: [&str; 4] = ["bridge", "host-local", "portmap", "tuning"];

/// Waits for SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        log::error!("cannot install signal handlers; stop the agent with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The underlay device: `--iface`, else the link holding the public IP (or IPv6).
fn underlay(nl: &mut Handle, opts: &Options) -> anyhow::Result<Underlay> {
    if let Some(name) = &opts.iface {
        let link = nl
            .link_by_name(name)
            .with_context(|| format!("underlay device {name}"))?;
        return Ok(Underlay {
            index: link.index,
            mtu: link.mtu,
        });
    }
    let addrs = nl.addresses(None).context("list addresses")?;
    let public: Vec<IpAddr> = opts
        .public_ip
        .map(IpAddr::V4)
        .into_iter()
        .chain(opts.public_ipv6.map(IpAddr::V6))
        .collect();
    let holder = addrs
        .iter()
        .find(|a| public.contains(&a.addr.addr()))
        .ok_or_else(|| anyhow!("no device holds the public address {public:?}; give --iface"))?;
    let link = nl.link_by_index(holder.index).context("underlay device")?;
    Ok(Underlay {
        index: link.index,
        mtu: link.mtu,
    })
}

/// The conflist's versions, from the plugins' answers and `--cni-version` (refused when a
/// plugin does not support it); asked on a blocking thread (it runs the plugins).
async fn conflist_versions(opts: &Options) -> anyhow::Result<ConfVersions> {
    let pin = opts
        .cni_version
        .as_deref()
        .map(cni_version::parse_pin)
        .transpose()?;
    let bin_dir = opts.cni_bin_dir.clone();
    let versions =
        tokio::task::spawn_blocking(move || cni_version::for_plugins(&bin_dir, &PLUGINS, pin))
            .await
            .context("ask the plugins for their versions")??;
    Ok(versions)
}

/// Runs the agent until `shutdown` turns true, keeping the status file meanwhile.
pub async fn run(opts: Options, shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    log::info!(
        "node {} (public IP {:?}, IPv6 {:?}) starting",
        opts.node_name,
        opts.public_ip,
        opts.public_ipv6
    );
    if opts.public_ip.is_none() && opts.public_ipv6.is_none() {
        return Err(anyhow!("give --public-ip, --public-ipv6 or both"));
    }
    warn_missing_plugins(&opts.cni_bin_dir);
    let versions = conflist_versions(&opts).await?;
    let health: SharedHealth = Arc::new(std::sync::Mutex::new(HealthState {
        node_name: opts.node_name.clone(),
        ..HealthState::default()
    }));
    let (stop_status, status_stop) = watch::channel(None);
    let (written, says_healthy) = watch::channel(false);
    let writer = starting_status_file(&opts)?;
    let status = tokio::spawn(health::keep_status_file(
        writer,
        health.clone(),
        opts.status_grace,
        status_stop,
        written,
    ));
    // A local task set: the NetworkPolicy tasks hold etcd requests (`cni_etcd::Connection`)
    // whose futures are not `Send`, so they are spawned on this thread (`spawn_local`).
    let agent = run_agent(opts, versions, health, says_healthy, shutdown);
    let result = tokio::task::LocalSet::new().run_until(agent).await;
    let reason = match &result {
        Ok(()) => "agent stopped".to_string(),
        Err(e) => format!("agent failed: {e:#}"),
    };
    let _ = stop_status.send(Some(reason));
    let _ = status.await;
    result
}

/// Warns about each plugin the conflist chains that `bin_dir` lacks (the agent still starts:
/// the plugins may be installed after it).
fn warn_missing_plugins(bin_dir: &Path) {
    for plugin in PLUGINS {
        if !bin_dir.join(plugin).exists() {
            log::warn!(
                "{} has no {plugin} plugin; pods cannot use the conflist until it is installed",
                bin_dir.display()
            );
        }
    }
}

/// The status file's writer, the file already saying "starting" (unhealthy).
fn starting_status_file(opts: &Options) -> anyhow::Result<StatusWriter> {
    let status_file = health::default_status_file(&opts.state_dir);
    let mut writer = StatusWriter::new(status_file.clone(), opts.node_name.clone());
    writer
        .write(&Err("starting".into()))
        .with_context(|| format!("write {}", status_file.display()))?;
    Ok(writer)
}

/// Connects to the datastore, retrying every second through outages; `None` if shut down
/// first. A server refusing this client (its certificate, credentials or permissions) stops
/// the start with the reason: the configuration is wrong, no retry helps.
async fn connect(
    opts: &Options,
    health: &SharedHealth,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<anyhow::Result<EtcdStore>> {
    loop {
        match EtcdStore::connect(&opts.etcd, &opts.prefix).await {
            Ok(s) => return Some(Ok(s)),
            Err(e) if e.refused() => return Some(Err(e.into())),
            Err(e) => {
                log::warn!("{e}; retrying");
                lock(health).store_failed(&e);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = agent::stopped(shutdown) => return None,
        }
    }
}

/// The node's underlay device.
#[derive(Debug, Clone, Copy)]
struct Underlay {
    index: u32,
    mtu: u32,
}

/// Sets up the backend `kind` over `underlay`, its VTEPs on the public addresses of `cfg` (on
/// a blocking thread: the VXLAN and WireGuard devices are made over netlink).
async fn backend_for(
    kind: BackendKind,
    nl: Handle,
    underlay: Underlay,
    cfg: &AgentConfig,
    opts: &Options,
) -> anyhow::Result<Box<dyn Backend>> {
    let (local, local6) = (cfg.public_ip, cfg.public_ipv6);
    let (wireguard, agent_state_dir) = (opts.wireguard.clone(), opts.state_dir.clone());
    tokio::task::spawn_blocking(move || -> anyhow::Result<Box<dyn Backend>> {
        Ok(match kind {
            BackendKind::HostGw => Box::new(HostGw::new(nl, underlay.index)),
            BackendKind::Vxlan { vni, port } => Box::new(Vxlan::setup(
                nl,
                VxlanSetup {
                    vni,
                    port,
                    local,
                    local6,
                    underlay: underlay.index,
                    underlay_mtu: underlay.mtu,
                },
            )?),
            BackendKind::Wireguard(settings) => Box::new(Wireguard::setup(
                nl,
                WireguardSetup {
                    settings,
                    options: wireguard,
                    agent_state_dir,
                    local,
                    local6,
                    underlay_mtu: underlay.mtu,
                },
            )?),
        })
    })
    .await
    .context("set up the backend")?
}

/// Writes the conflist and the subnet file (on a blocking thread: the writes fsync).
async fn write_files(files: &NodeFiles, opts: &Options) -> anyhow::Result<()> {
    let (written, conf_dir, subnet_file) = (
        files.clone(),
        opts.cni_conf_dir.clone(),
        opts.subnet_file.clone(),
    );
    tokio::task::spawn_blocking(move || written.write_all(&conf_dir, &subnet_file))
        .await
        .context("write the conflist and the subnet file")?
        .context("write the conflist and the subnet file")?;
    log::info!(
        "node subnet {}, pod MTU {}, backend {}, cniVersion {}, cniVersions {:?}",
        files.subnet,
        files.mtu,
        files.network.backend.name(),
        files.versions.cni_version,
        files.versions.cni_versions
    );
    Ok(())
}

/// Writes the conflist and the subnet file once the status file says healthy (never, if the
/// agent stops first).
async fn publish_when_healthy(
    mut says_healthy: watch::Receiver<bool>,
    files: &NodeFiles,
    opts: &Options,
) -> anyhow::Result<()> {
    if says_healthy.wait_for(|healthy| *healthy).await.is_err() {
        return std::future::pending().await;
    }
    write_files(files, opts).await
}

/// Everything the agent does between its start and its stop, in order: the health endpoint,
/// the datastore, the network config, the backend, the lease, the node's kernel setup, rule
/// repair, NetworkPolicy enforcement, the GC, then the reconcile loop (the conflist is
/// published once healthy) until `shutdown`; the lease is released on the way out if asked.
/// A shutdown during any wait stops it cleanly. `says_healthy` follows what the status file says.
async fn run_agent(
    opts: Options,
    versions: ConfVersions,
    health: SharedHealth,
    says_healthy: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut nl = Handle::new().context("open netlink")?;
    let underlay = underlay(&mut nl, &opts)?;
    if let Some(addr) = opts.health_addr {
        spawn_health_endpoint(addr, &opts, &health, &shutdown).await?;
    }
    let Some(mut store) = connect(&opts, &health, &mut shutdown).await.transpose()? else {
        return Ok(());
    };
    let Some(network) = agent::wait_for_config(&mut store, &health, &mut shutdown)
        .await
        .transpose()?
    else {
        return Ok(());
    };
    let cfg = agent_config(&opts, &network)?;
    let backend = backend_for(network.backend, nl, underlay, &cfg, &opts).await?;
    let attrs = lease_attrs(&opts, &network, &cfg, backend.as_ref());
    let remembered = cni_conf::read_subnet_file(&opts.subnet_file);
    let Some(held) = agent::acquire(
        &mut store,
        &network,
        &attrs,
        remembered,
        &cfg,
        &health,
        &mut shutdown,
    )
    .await
    .transpose()?
    else {
        return Ok(());
    };
    let subnet = held.lease.subnet;
    lock(&health).subnet = Some(subnet);
    let kernel = Kernel::new(Reconciler::new(backend, subnet, health.clone()));
    configure_node(&kernel, &network, opts.network_policy).await?;
    spawn_rule_repair(&opts, &network, &health, &shutdown)?;
    // One pod MTU for both families: the larger overhead wins.
    let mtu = underlay.mtu - network.backend.mtu_overhead(network.ipv6.is_some());
    let hold = opts.network_policy && bridge_tells_pods(&opts).await;
    let files = node_files(&opts, network, subnet, mtu, versions, hold);
    if opts.network_policy {
        spawn_policy(&opts, &files, hold, &health, &shutdown);
    }
    if let Some(socket) = &opts.cri_socket {
        spawn_gc(socket, &opts, &files, &health, &shutdown);
    }
    let publish = publish_when_healthy(says_healthy, &files, &opts);
    let run = agent::run(&mut store, held, &kernel, &cfg, &health, &mut shutdown);
    let held = run_publishing(run, publish).await?;
    if cfg.release_on_exit {
        release(&mut store, &held).await;
    }
    log::info!("stopped");
    Ok(())
}

/// Serves `/healthz` and `/metrics` on `addr` until `shutdown`; a port that cannot be bound
/// stops the start.
async fn spawn_health_endpoint(
    addr: SocketAddr,
    opts: &Options,
    health: &SharedHealth,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener = health::bind(addr)
        .await
        .with_context(|| format!("--health-addr {addr}"))?;
    let (health, shutdown, grace) = (health.clone(), shutdown.clone(), opts.status_grace);
    tokio::spawn(async move {
        if let Err(e) = health::serve(listener, health, grace, shutdown).await {
            log::error!("health endpoint {addr}: {e}");
        }
    });
    Ok(())
}

/// The loop's configuration for `network`: the public address of each family the network
/// has (required), and only those (a node's other address is not published).
fn agent_config(opts: &Options, network: &NetworkConfig) -> anyhow::Result<AgentConfig> {
    if network.ipv4.is_some() && opts.public_ip.is_none() {
        return Err(anyhow!("the network has IPv4: --public-ip is required"));
    }
    if network.ipv6.is_some() && opts.public_ipv6.is_none() {
        return Err(anyhow!("the network has IPv6: --public-ipv6 is required"));
    }
    Ok(AgentConfig {
        public_ip: opts.public_ip.filter(|_| network.ipv4.is_some()),
        public_ipv6: opts.public_ipv6.filter(|_| network.ipv6.is_some()),
        lease_ttl: opts.lease_ttl,
        release_on_exit: opts.release_on_exit,
        resync_interval: opts.resync_interval,
    })
}

/// What the node's lease tells the other nodes: its addresses and how its backend reaches it.
fn lease_attrs(
    opts: &Options,
    network: &NetworkConfig,
    cfg: &AgentConfig,
    backend: &dyn Backend,
) -> LeaseAttrs {
    LeaseAttrs {
        public_ip: cfg.public_ip.unwrap_or(Ipv4Addr::UNSPECIFIED),
        public_ipv6: cfg.public_ipv6,
        backend_type: network.backend.name().to_string(),
        backend_data: backend.backend_data(),
        backend_v6_data: backend.backend_v6_data(),
        node_name: Some(opts.node_name.clone()),
    }
}

/// The node's own kernel setup once its subnet is known: the backend's local part,
/// forwarding for the network's families, the bridge netfilter switches NetworkPolicy needs
/// (or, with it off, the removal of an earlier run's policy program), and the masquerade rules.
async fn configure_node(
    kernel: &Kernel,
    network: &NetworkConfig,
    network_policy: bool,
) -> anyhow::Result<()> {
    let networks = network.networks();
    let (v4, v6) = (network.ipv4.is_some(), network.ipv6.is_some());
    kernel
        .run(move |r| -> anyhow::Result<()> {
            r.configure_local()?;
            cni_linux::sysctl::enable_ip_forwarding(v4, v6).context("enable forwarding")?;
            if network_policy {
                policy::enable_bridge_netfilter()?;
            } else {
                policy::remove_program().context("remove the NetworkPolicy program")?;
            }
            if !masq::install(&networks).context("install the masquerade rules")? {
                log::info!("masquerade rules already in place");
            }
            Ok(())
        })
        .await
}

/// Starts the thread that puts back the node's and its pods' nf_tables rules when another
/// firewall removes them (see [`rule_repair`]).
fn spawn_rule_repair(
    opts: &Options,
    network: &NetworkConfig,
    health: &SharedHealth,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let config = rule_repair::RuleRepairConfig {
        networks: network.networks(),
        cache_dir: opts.cni_cache_dir.clone(),
        bin_dir: opts.cni_bin_dir.clone(),
    };
    rule_repair::spawn(config, health.clone(), shutdown.clone())
        .context("start the rule repair thread")?;
    Ok(())
}

/// Whether the bridge plugin in `--cni-bin-dir` tells the agent about pods at ADD (rcni's
/// does), which NetworkPolicy's hold needs; said aloud when it does not.
async fn bridge_tells_pods(opts: &Options) -> bool {
    let bin_dir = opts.cni_bin_dir.clone();
    let tells = tokio::task::spawn_blocking(move || crate::bridge_kind::tells_pods(&bin_dir))
        .await
        .unwrap_or(false);
    if !tells {
        log::warn!(
            "the bridge plugin in {} is not rcni's: it cannot tell the agent about new pods, so \
             NetworkPolicy holds no pod until its policies are programmed (a new pod is open \
             until a scan of its runtime finds it)",
            opts.cni_bin_dir.display()
        );
    }
    tells
}

/// The files the node publishes for the pods' plugins (conflist, subnet file); `hold`: the
/// bridge tells the agent about pods (its pod socket is named).
fn node_files(
    opts: &Options,
    network: NetworkConfig,
    subnet: Subnets,
    mtu: u32,
    versions: ConfVersions,
    hold: bool,
) -> NodeFiles {
    NodeFiles {
        network,
        subnet,
        mtu,
        status_file: health::default_status_file(&opts.state_dir),
        ipam_dir: opts.state_dir.join("ipam"),
        tuning_dir: opts.state_dir.join("tuning"),
        versions,
        node_name: opts.node_name.clone(),
        pod_socket: hold.then(|| policy_socket(&opts.state_dir)),
    }
}

/// The pod socket of the agent with state dir `state_dir` (NetworkPolicy on).
fn policy_socket(state_dir: &Path) -> PathBuf {
    state_dir.join("pods.sock")
}

/// Starts NetworkPolicy enforcement on the node's pods (see [`policy`]), until `shutdown`;
/// with `hold`, the node's pod subnets are held where not programmed.
fn spawn_policy(
    opts: &Options,
    files: &NodeFiles,
    hold: bool,
    health: &SharedHealth,
    shutdown: &watch::Receiver<bool>,
) {
    let subnet = files.subnet;
    let nets = subnet
        .v4
        .map(ipnet::IpNet::V4)
        .into_iter()
        .chain(subnet.v6.map(ipnet::IpNet::V6));
    let hold = nets.filter(|_| hold).collect();
    let cfg = PolicyConfig {
        access: opts.etcd.clone(),
        prefix: opts.prefix.clone(),
        node: opts.node_name.clone(),
        subnet_key: crate::lease::subnet_key(&opts.prefix, subnet),
        cri_socket: opts.cri_socket.clone(),
        pod_state_dir: opts.pod_state_dir.clone(),
        hold,
        socket: policy_socket(&opts.state_dir),
        attached_dir: opts.state_dir.join("attached"),
        ipam_dir: files.ipam_dir.clone(),
    };
    policy::spawn(cfg, health.clone(), shutdown.clone());
}

/// Starts the GC of the attachments of sandboxes the CRI runtime at `socket` no longer has,
/// until `shutdown`.
fn spawn_gc(
    socket: &Path,
    opts: &Options,
    files: &NodeFiles,
    health: &SharedHealth,
    shutdown: &watch::Receiver<bool>,
) {
    let gc = GcConfig {
        cache_dir: opts.cni_cache_dir.clone(),
        conflist: opts.cni_conf_dir.join(cni_conf::CONFLIST_NAME),
        bin_dir: opts.cni_bin_dir.clone(),
        ipam_dir: files.ipam_dir.clone(),
        interval: opts.gc_interval,
        grace: opts.gc_grace,
    };
    let client = CriClient::new(socket);
    tokio::spawn(gc::run(gc, client, health.clone(), shutdown.clone()));
}

/// Runs the reconcile loop `run` to its end, publishing the conflist alongside (`publish`).
/// The conflist is what makes the runtime report the network ready (containerd's
/// NetworkReady): it is published only once the status file says healthy, so that no ADD the
/// runtime sends after seeing it is refused as "agent not ready". A failed publish stops the
/// agent at once.
async fn run_publishing(
    run: impl Future<Output = Held>,
    publish: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Held> {
    tokio::pin!(run);
    tokio::select! {
        held = &mut run => Ok(held),
        published = publish => {
            published?;
            Ok(run.await)
        }
    }
}

/// Revokes the node's lease (`--release-on-exit`); a failure is logged, the stop goes on.
async fn release(store: &mut EtcdStore, held: &Held) {
    match store.revoke(held.id).await {
        Ok(()) => log::info!("released subnet {}", held.lease.subnet),
        Err(e) => log::warn!("release subnet {}: {e}", held.lease.subnet),
    }
}
