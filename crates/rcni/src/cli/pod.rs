//! The flags of `rcni pod` and its verbs.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use cni_sandbox::DEFAULT_STATE_DIR;

use crate::boot_gc;

#[derive(Debug, Args)]
pub struct PodArgs {
    /// Directory of the sandbox records.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Directory (tmpfs, cleared at boot) of the marker saying GC ran since the node started;
    /// without the marker, the first run/stop/rm/ls runs `gc` first.
    #[arg(long, default_value = boot_gc::DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// conflist template for update-cidr (containerd's conf_template: {{.PodCIDR}},
    /// {{.PodCIDRRanges}}, {{.Routes}}).
    #[arg(long, value_name = "FILE")]
    pub conf_template: Option<PathBuf>,
    /// Attach a sandbox's networks one after the other (default: in parallel, as containerd).
    #[arg(long)]
    pub serial: bool,
    #[command(subcommand)]
    pub verb: PodVerb,
}

#[derive(Debug, Subcommand)]
pub enum PodVerb {
    /// RunPodSandbox: create the sandbox's netns (unless --netns) and attach loopback, the
    /// default network (or each --network) on eth0, net1, ...; prints the sandbox id.
    Run(Box<RunArgs>),
    /// PodSandboxStatus: state and addresses (never fails; unknown ids are empty).
    Status { id: String },
    /// StopPodSandbox: DEL every network in reverse, continuing past failures (idempotent).
    Stop { id: String },
    /// RemovePodSandbox: finish the teardown, remove the netns it created and the record.
    Rm { id: String },
    /// List the sandboxes with a record.
    Ls,
    /// NetworkReady: exit 0 when ready, 1 with the reason otherwise.
    Ready,
    /// UpdateRuntimeConfig: render --conf-template with the pod CIDR(s) (comma-separated)
    /// into the conf dir, unless a network config exists already.
    UpdateCidr { cidr: String },
    /// Undo or finish what killed runs left, then GC every network with the recorded
    /// sandboxes as the valid attachments.
    Gc,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Pod name (K8S_POD_NAME).
    pub name: String,
    /// Pod namespace (K8S_POD_NAMESPACE).
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Pod UID (K8S_POD_UID; default: the sandbox id).
    #[arg(long)]
    pub uid: Option<String>,
    /// Sandbox id (default: --container-id, else random). Running a ready id again prints
    /// its status without a new ADD.
    #[arg(long)]
    pub id: Option<String>,
    /// Use this network namespace instead of creating /run/netns/rcni-<id>.
    #[arg(long)]
    pub netns: Option<PathBuf>,
    /// Port mapping HOST:CONTAINER[/PROTO] (portMappings capability; repeatable).
    #[arg(long = "port", value_name = "HOST:CONTAINER[/PROTO]")]
    pub ports: Vec<String>,
    /// Network by name (repeatable): the first on eth0, then net1, ...; default: the first
    /// config file of the conf dir.
    #[arg(long = "network", value_name = "NET")]
    pub networks: Vec<String>,
    /// Static IP for the pod (ips capability; repeatable).
    #[arg(long = "ip", value_name = "IP")]
    pub ips: Vec<String>,
    /// MAC address for the pod (mac capability).
    #[arg(long)]
    pub mac: Option<String>,
    /// Pod label KEY=VALUE (repeatable): recorded with the sandbox for NetworkPolicy
    /// selectors (rcni-node reads them); never passed to plugins.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
}
