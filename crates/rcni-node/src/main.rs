//! `rcni-node`: the node agent. See the crate documentation of `rcni_node`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cni_etcd::{Access, EtcdOptions};
use log::{LevelFilter, Log, Metadata, Record};
use rcni_node::backend::wireguard::options::{RotateKey, WireguardOptions};
use rcni_node::node::{self, Options};

/// The node agent of rcni's multi-node pod network (flannel's model: etcd leases, host-gw,
/// VXLAN or WireGuard). `rcni-node rotate-wireguard-key --help`: a new WireGuard key.
#[derive(Parser, Debug)]
#[command(name = "rcni-node", version)]
struct Cli {
    #[command(flatten)]
    etcd: EtcdOptions,
    /// This node's name (in logs, in its lease as `rcniNodeName`, in the subnet file as
    /// `RCNI_NODE_NAME` and in /metrics).
    #[arg(long)]
    node_name: String,
    /// This node's underlay IPv4 address (published as PublicIP; the VXLAN local VTEP); needed
    /// when the network has IPv4.
    #[arg(long)]
    public_ip: Option<Ipv4Addr>,
    /// This node's underlay IPv6 address (published as PublicIPv6; the IPv6 VXLAN VTEP); needed
    /// when the network has IPv6 (`EnableIPv6`).
    #[arg(long)]
    public_ipv6: Option<Ipv6Addr>,
    /// The underlay device (default: the one holding --public-ip).
    #[arg(long)]
    iface: Option<String>,
    /// The etcd key prefix.
    #[arg(long, default_value = cni_etcd::DEFAULT_PREFIX)]
    prefix: String,
    /// Where the conflist goes.
    #[arg(long, default_value = "/etc/cni/net.d")]
    cni_conf_dir: PathBuf,
    /// The plugin directory (checked for the plugins the conflist names).
    #[arg(long, default_value = "/opt/cni/bin")]
    cni_bin_dir: PathBuf,
    /// flannel's subnet file.
    #[arg(long, default_value = "/run/rcni/subnet.env")]
    subnet_file: PathBuf,
    /// Where the agent keeps its status file and the pods' host-local leases (`ipam/`).
    #[arg(long, default_value = "/run/rcni")]
    state_dir: PathBuf,
    /// Serve /healthz and /metrics here (e.g. 127.0.0.1:9477).
    #[arg(long)]
    health_addr: Option<SocketAddr>,
    /// TTL of the subnet lease in seconds.
    #[arg(long, default_value_t = 24 * 3600)]
    lease_ttl: u64,
    /// Revoke the lease on a graceful stop (SIGTERM/SIGINT).
    #[arg(long)]
    release_on_exit: bool,
    /// Seconds the datastore may be unreachable before STATUS reports the node unhealthy.
    #[arg(long, default_value_t = 10)]
    status_grace: u64,
    /// Seconds between kernel resyncs.
    #[arg(long, default_value_t = 10)]
    resync_interval: u64,
    /// Pin the conflist to this one CNI version (no `cniVersions` list); refused at start when
    /// a plugin in --cni-bin-dir does not support it. Default: `cniVersion` 1.0.0 (what
    /// runtimes with libcni 1.1, containerd 1.6/1.7, can read) and `cniVersions` up to the
    /// highest version every plugin supports (picked by libcni 1.2 and later).
    #[arg(long, value_name = "VERSION")]
    cni_version: Option<String>,
    /// The node's CRI runtime socket (e.g. /run/containerd/containerd.sock, or kubelet's
    /// unix:///run/containerd/containerd.sock form): asked every
    /// --gc-interval which pod sandboxes exist; the attachments of the others are reclaimed.
    /// Without it the agent reclaims nothing.
    #[arg(long)]
    cri_socket: Option<PathBuf>,
    /// Seconds between rounds of reclaiming the attachments of sandboxes the runtime forgot.
    #[arg(long, default_value_t = 60)]
    gc_interval: u64,
    /// Seconds an attachment must have existed (its libcni cache entry's age) before it can be
    /// reclaimed.
    #[arg(long, default_value_t = 300)]
    gc_grace: u64,
    /// The container runtime's libcni cache directory (`results/<network>-<id>-<ifname>`).
    #[arg(long, default_value = cni_runtime::DEFAULT_CACHE_DIR)]
    cni_cache_dir: PathBuf,
    /// Enforce Kubernetes NetworkPolicy on this node's pods (on by default; needs the
    /// br_netfilter module): the policies and namespaces under <prefix>/policies/ and
    /// <prefix>/namespaces/, the pods every node publishes under <prefix>/pods/.
    /// `--network-policy=false` turns it off (and removes the program an earlier run left).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    network_policy: bool,
    /// The `rcni pod` sandbox records this node's pods are read from (labels, addresses),
    /// when no --cri-socket is given; with --cri-socket the runtime's ready sandboxes are.
    #[arg(long, default_value = cni_sandbox::DEFAULT_STATE_DIR)]
    pod_state_dir: PathBuf,
    #[command(flatten)]
    wireguard: WireguardOptions,
}

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record) {
        // Ours and the cni-* crates'; the gRPC stack's own records are left out.
        let ours = r.target().starts_with("rcni") || r.target().starts_with("cni");
        if self.enabled(r.metadata()) && ours {
            eprintln!(
                "rcni-node: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("rotate-wireguard-key") {
        let rotate = RotateKey::parse_from(std::env::args().skip(1));
        return match rotate.run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rcni-node rotate-wireguard-key: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    let level = std::env::var("RCNI_LOG")
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::Info);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
    let etcd = match Access::new(&cli.etcd) {
        Ok(access) => access,
        Err(e) => {
            eprintln!("rcni-node: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = Options {
        etcd,
        node_name: cli.node_name,
        public_ip: cli.public_ip,
        public_ipv6: cli.public_ipv6,
        iface: cli.iface,
        prefix: cli.prefix,
        cni_conf_dir: cli.cni_conf_dir,
        cni_bin_dir: cli.cni_bin_dir,
        subnet_file: cli.subnet_file,
        state_dir: cli.state_dir,
        health_addr: cli.health_addr,
        lease_ttl: Duration::from_secs(cli.lease_ttl.max(1)),
        release_on_exit: cli.release_on_exit,
        status_grace: Duration::from_secs(cli.status_grace),
        resync_interval: Duration::from_secs(cli.resync_interval.max(1)),
        cni_version: cli.cni_version,
        cri_socket: cli.cri_socket,
        gc_interval: Duration::from_secs(cli.gc_interval.max(1)),
        gc_grace: Duration::from_secs(cli.gc_grace),
        cni_cache_dir: cli.cni_cache_dir,
        network_policy: cli.network_policy,
        pod_state_dir: cli.pod_state_dir,
        wireguard: cli.wireguard,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rcni-node: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let result = runtime.block_on(async move {
        let run = node::run(options, shutdown);
        tokio::pin!(run);
        tokio::select! {
            result = &mut run => result,
            () = node::wait_for_signal() => {
                let _ = stop.send(true);
                stop_within_grace(run).await
            }
        }
    });
    // Dropping the runtime would wait for every blocking task (a kernel call, a plugin the GC
    // runs): whatever is still running is abandoned with the process instead.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rcni-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How long the graceful stop (the lease released with `--release-on-exit`, the last status
/// written) may take after SIGTERM or SIGINT, and how long blocking work still running then
/// is waited for: together the bound on the agent's exit, 2 s (docs/architecture.md).
const STOP_GRACE: Duration = Duration::from_millis(1500);
const BLOCKING_GRACE: Duration = Duration::from_millis(500);

/// Lets the agent stop by itself for [`STOP_GRACE`], then gives up on it.
async fn stop_within_grace(
    run: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    match tokio::time::timeout(STOP_GRACE, run).await {
        Ok(result) => result,
        Err(_) => {
            log::warn!("not stopped {STOP_GRACE:?} after the signal: exiting anyway");
            Ok(())
        }
    }
}
