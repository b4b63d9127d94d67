//! Wiring: from the command line's options to a running agent, in flannel's order: underlay
//! device, datastore, network config, backend device, lease, local backend config, forwarding
//! and masquerade, files, then the reconcile loop; on a graceful stop the lease is kept unless
//! `--release-on-exit`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use cni_linux::Handle;
use tokio::sync::watch;

use crate::agent::{self, AgentConfig, Reconciler};
use crate::backend::host_gw::HostGw;
use crate::backend::vxlan::{Vxlan, VxlanSetup};
use crate::backend::Backend;
use crate::health::{self, lock, HealthState, SharedHealth};
use crate::lease::LeaseAttrs;
use crate::network::BackendKind;
use crate::store::etcd::EtcdStore;
use crate::store::Store;
use crate::{cni_conf, masq};

/// The agent's options (the command line's flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// etcd client URLs.
    pub etcd_endpoints: Vec<String>,
    /// The node's name (logs).
    pub node_name: String,
    /// The node's underlay address (PublicIP, VXLAN local VTEP).
    pub public_ip: Ipv4Addr,
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

/// The underlay device: `--iface`, else the link holding the public IP.
fn underlay(nl: &mut Handle, opts: &Options) -> anyhow::Result<(u32, u32)> {
    if let Some(name) = &opts.iface {
        let link = nl
            .link_by_name(name)
            .with_context(|| format!("underlay device {name}"))?;
        return Ok((link.index, link.mtu));
    }
    let addrs = nl.addresses(None).context("list addresses")?;
    let holder = addrs
        .iter()
        .find(|a| a.addr.addr() == IpAddr::V4(opts.public_ip))
        .ok_or_else(|| {
            anyhow!(
                "no device holds --public-ip {}; give --iface",
                opts.public_ip
            )
        })?;
    let link = nl.link_by_index(holder.index).context("underlay device")?;
    Ok((link.index, link.mtu))
}

/// Runs the agent until `shutdown` turns true.
pub async fn run(opts: Options, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    log::info!(
        "node {} (public IP {}) starting",
        opts.node_name,
        opts.public_ip
    );
    for plugin in PLUGINS {
        if !opts.cni_bin_dir.join(plugin).exists() {
            log::warn!(
                "{} has no {plugin} plugin; pods cannot use the conflist until it is installed",
                opts.cni_bin_dir.display()
            );
        }
    }
    let mut nl = Handle::new().context("open netlink")?;
    let (underlay_index, underlay_mtu) = underlay(&mut nl, &opts)?;
    let status_file = health::default_status_file(&opts.state_dir);
    let health: SharedHealth = Arc::new(std::sync::Mutex::new(HealthState::default()));
    let cfg = AgentConfig {
        public_ip: opts.public_ip,
        lease_ttl: opts.lease_ttl,
        release_on_exit: opts.release_on_exit,
        status_file: status_file.clone(),
        status_grace: opts.status_grace,
        resync_interval: opts.resync_interval,
    };
    health::write_status_file(
        &status_file,
        &Err("starting".into()),
        Duration::from_secs(3600),
    )
    .with_context(|| format!("write {}", status_file.display()))?;

    if let Some(addr) = opts.health_addr {
        let listener = health::bind(addr)
            .await
            .with_context(|| format!("--health-addr {addr}"))?;
        let (h, rx) = (health.clone(), shutdown.clone());
        let grace = opts.status_grace;
        tokio::spawn(async move {
            if let Err(e) = health::serve(listener, h, grace, rx).await {
                log::error!("health endpoint {addr}: {e}");
            }
        });
    }

    let mut store = loop {
        match EtcdStore::connect(&opts.etcd_endpoints, &opts.prefix).await {
            Ok(s) => break s,
            Err(e) => {
                lock(&health).store_failed();
                log::warn!("{e}; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = agent::stopped(&mut shutdown) => return Ok(()),
        }
    };
    let Some(network) = agent::wait_for_config(&mut store, &health, &mut shutdown).await else {
        return Ok(());
    };
    let network = network?;
    let mtu = underlay_mtu - network.backend.mtu_overhead();

    let backend: Box<dyn Backend> = match network.backend {
        BackendKind::HostGw => Box::new(HostGw::new(nl, underlay_index)),
        BackendKind::Vxlan { vni, port } => Box::new(Vxlan::setup(
            nl,
            VxlanSetup {
                vni,
                port,
                local: opts.public_ip,
                underlay: underlay_index,
                mtu,
            },
        )?),
    };
    let attrs = LeaseAttrs {
        public_ip: opts.public_ip,
        backend_type: network.backend.name().to_string(),
        backend_data: backend.backend_data(),
    };
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
    else {
        return Ok(());
    };
    let held = held?;
    let subnet = held.lease.subnet;
    lock(&health).subnet = Some(subnet);

    let mut reconciler = Reconciler::new(backend, subnet, health.clone());
    reconciler.configure_local()?;
    cni_linux::sysctl::enable_ip_forwarding(true, false).context("enable IPv4 forwarding")?;
    masq::install(network.network).context("install the masquerade rules")?;
    cni_conf::write_all(
        &opts.cni_conf_dir,
        &opts.subnet_file,
        &network,
        subnet,
        mtu,
        &status_file,
        &opts.state_dir.join("ipam"),
    )
    .context("write the conflist and the subnet file")?;
    log::info!(
        "node subnet {subnet}, pod MTU {mtu}, backend {}",
        network.backend.name()
    );

    let held = agent::run(
        &mut store,
        held,
        &mut reconciler,
        &cfg,
        &health,
        &mut shutdown,
    )
    .await;

    let _ = health::write_status_file(
        &status_file,
        &Err("agent stopped".into()),
        Duration::from_secs(3600),
    );
    if cfg.release_on_exit {
        match store.revoke(held.id).await {
            Ok(()) => log::info!("released subnet {}", held.lease.subnet),
            Err(e) => log::warn!("release subnet {}: {e}", held.lease.subnet),
        }
    }
    log::info!("stopped");
    Ok(())
}
