//! The command line: verbs, global flags and their cnitool-compatible environment variables.

pub mod flows;
pub mod pod;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use flows::FlowsArgs;

/// Plugin directories used when neither `--bin-dir` nor `CNI_PATH` is given.
pub const DEFAULT_BIN_DIRS: [&str; 2] = ["/opt/cni/bin", "/usr/lib/cni"];
/// `--conf-dir` when neither it nor `NETCONFPATH` is given.
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";
/// `--cache-dir` when it is not given.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";
/// `--ifname` when neither it nor `CNI_IFNAME` is given.
pub const DEFAULT_IFNAME: &str = "eth0";

#[derive(Debug, Parser)]
#[command(
    name = "rcni",
    version,
    about = "Run CNI network configurations against network namespaces (cnitool-compatible)",
    long_about = "Run CNI network configurations against network namespaces.\n\n\
        Compatible with cnitool's environment: NETCONFPATH, CNI_PATH, CNI_IFNAME, CNI_ARGS and \
        CAP_ARGS are read when the matching flag is not given. The container ID defaults to \
        cnitool's: \"cnitool-\" plus the first 10 bytes of SHA-512 of the absolute netns path, \
        in hex.\n\n\
        Exit status: 0 success, 1 the operation failed (the CNI error code is printed), 2 usage."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Directory with network configurations (.conf, .conflist, .json).
    #[arg(
        long,
        env = "NETCONFPATH",
        default_value = DEFAULT_CONF_DIR,
        global = true
    )]
    pub conf_dir: PathBuf,

    /// Plugin directory; repeat the flag or give a colon-separated list.
    /// [default: /opt/cni/bin:/usr/lib/cni]
    #[arg(
        long = "bin-dir",
        env = "CNI_PATH",
        value_delimiter = ':',
        global = true
    )]
    pub bin_dirs: Vec<PathBuf>,

    /// Directory of the result cache (shared with Go libcni).
    #[arg(long, default_value = DEFAULT_CACHE_DIR, global = true)]
    pub cache_dir: PathBuf,

    /// Interface name inside the namespace.
    #[arg(long, env = "CNI_IFNAME", default_value = DEFAULT_IFNAME, global = true)]
    pub ifname: String,

    /// CNI_ARGS, as `KEY=VALUE;KEY=VALUE`.
    #[arg(long, env = "CNI_ARGS", global = true)]
    pub args: Option<String>,

    /// Capability arguments as a JSON object, e.g. '{"portMappings":[...]}'.
    #[arg(long = "capability-args", env = "CAP_ARGS", global = true)]
    pub capability_args: Option<String>,

    /// Container ID (default: derived from the netns path like cnitool).
    #[arg(long, global = true)]
    pub container_id: Option<String>,

    /// Deadline in seconds for the whole chain of one operation, any verb (default 60 for
    /// ADD/DEL/CHECK); a plugin still running at it is killed with its process group.
    #[arg(long, value_name = "SECONDS", global = true)]
    pub timeout: Option<u64>,

    /// Do not DEL the chain when ADD fails (libcni's behaviour).
    #[arg(long, global = true)]
    pub no_rollback: bool,

    /// Machine-readable output; errors become a CNI error object on stdout.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Verbs. New verbs (`lab`, `doctor`, pod-sandbox verbs) are added as variants here and
/// dispatched in `commands::run`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// ADD: attach the namespace to the network and print the result.
    Add(AttachArgs),
    /// DEL: detach the namespace from the network (idempotent). CNI_ARGS and capability
    /// args not given are taken from the cached ADD.
    Del(AttachArgs),
    /// CHECK: verify the attachment against the cached ADD result (missing CNI_ARGS and
    /// capability args are taken from the cached ADD, as for DEL).
    Check(AttachArgs),
    /// STATUS: ask every plugin whether it can serve ADD (spec 1.1.0 networks).
    Status(NetworkArgs),
    /// GC: DEL cached attachments not listed with --valid, then GC every plugin.
    Gc(GcArgs),
    /// VERSION: show which spec versions each plugin of the network supports.
    Version(NetworkArgs),
    /// Check that every plugin exists and supports the network's version.
    Validate(NetworkArgs),
    /// List the networks in the config directory, and files that could not be loaded.
    List,
    /// Manage named network namespaces in /run/netns (for tests and demos).
    #[command(subcommand)]
    Netns(NetnsCommand),
    /// Prove a pod attachment end to end in throwaway namespaces: the plugin result, the
    /// kernel objects, the IPAM leases and a real HTTP request between two pods; then delete
    /// everything and prove nothing is left. Exit status 1 if any check fails.
    Lab(LabArgs),
    /// Check any plugin directory (--bin-dir) against CNI 1.1.0, black-box, in throwaway
    /// namespaces: a table plugin × check. Exit status 1 if any check fails.
    Conformance(ConformanceArgs),
    /// Diagnose CNI problems. Without a subcommand: inspect this node read-only (configs,
    /// plugins, and leaked leases, veths, nft rules, tuning backups and cache entries).
    /// Exit status 1 if anything is found.
    Doctor(Box<DoctorArgs>),
    /// Pod-sandbox network lifecycle, as a CRI runtime runs it for kubelet: run, status, stop,
    /// rm, ls, ready, update-cidr, gc (records in --state-dir).
    Pod(Box<pod::PodArgs>),
    /// Put back the nf_tables rules rcni's plugins made for the cached attachments (port
    /// mappings, ipMasq, firewall, macspoofchk) after a firewall flush or reload removed
    /// them. Adds only what is missing; never touches links, addresses, routes, leases or
    /// other software's rules; Go plugins are left alone. Exit status 1 if a plugin failed.
    Repair(RepairArgs),
    /// The node's NetworkPolicy verdicts as flows, from the local node agent: each denied
    /// connection attempt (and, with `rcni-node --flow-log all`, each allowed one) with its
    /// pods, the policies isolating the pod or the rule that allowed it, and how often.
    Flows(FlowsArgs),
    /// Kubernetes NetworkPolicies kept in rcni-node's etcd: apply, get, list, delete, and
    /// explain what applies to a pod (--etcd-endpoints or RCNI_ETCD_ENDPOINTS, as rcni-node).
    #[command(subcommand)]
    Policy(Box<crate::policy::PolicyCommand>),
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// Only the attachments of this network (default: every cached attachment).
    #[arg(long, value_name = "NAME")]
    pub network: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// Test only this plugin (repeatable); default: every reference plugin in the directory.
    #[arg(long = "plugin", value_name = "NAME")]
    pub plugins: Vec<String>,
}

/// The etcd flags are optional here (the NetworkPolicy check is skipped without them).
#[derive(Debug, Args)]
#[command(mut_arg("endpoints", |a| a.required(false)))]
pub struct DoctorArgs {
    #[command(subcommand)]
    pub command: Option<DoctorCommand>,
    /// Remove the leaks found, through the plugins' own DEL and GC only.
    #[arg(long)]
    pub fix: bool,
    /// State dir of `rcni pod` whose records are audited (a record without its netns).
    #[arg(long, default_value = cni_sandbox::DEFAULT_STATE_DIR)]
    pub pod_state_dir: std::path::PathBuf,
    /// With the etcd flags: compare this node's NetworkPolicy dataplane with the datastore.
    #[command(flatten)]
    pub etcd: Option<cni_etcd::EtcdOptions>,
    /// The etcd key prefix of the network (`rcni-node --prefix`; default: /rcni.io/network).
    #[arg(long, requires = "endpoints")]
    pub prefix: Option<String>,
    /// The name rcni-node publishes this node's pods under (its `--node-name`; default: the
    /// hostname).
    #[arg(
        long,
        visible_alias = "node",
        value_name = "NAME",
        requires = "endpoints"
    )]
    pub node_name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DoctorCommand {
    /// Place an error message (from kubelet events, containerd or CRI-O logs, or rcni) in its
    /// CNI lifecycle stage, and say what it means and what to look at next. `-` reads the
    /// message from standard input.
    Explain {
        /// The message, quoted.
        message: String,
    },
}

#[derive(Debug, Args)]
pub struct LabArgs {
    /// A conflist to prove instead of the built-in bridge + host-local network. host-local
    /// leases are kept in the lab's scratch directory when the config sets no dataDir.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write the evidence record (every plugin run with its stdin, env, stdout, stderr, exit
    /// status and duration; binaries with path, SHA-256 and VERSION answer) as JSON.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Network name (the `name` in its config file).
    pub network: String,
    /// Network namespace: a path, or a bare name meaning /run/netns/<name>.
    pub netns: PathBuf,
}

#[derive(Debug, Args)]
pub struct NetworkArgs {
    /// Network name (the `name` in its config file).
    pub network: String,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Network name (the `name` in its config file).
    pub network: String,
    /// An attachment that is still valid, as CONTAINER_ID:IFNAME (repeatable). Without any,
    /// every cached attachment of the network is stale (cnitool's behaviour).
    #[arg(long = "valid", value_name = "CONTAINER_ID:IFNAME")]
    pub valid: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum NetnsCommand {
    /// Create /run/netns/<name> (like `ip netns add`).
    Add { name: String },
    /// Remove /run/netns/<name> (like `ip netns delete`).
    Del { name: String },
    /// List the named namespaces.
    List,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn doctor(args: &[&str]) -> Result<DoctorArgs, clap::Error> {
        let argv = ["rcni", "doctor"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Doctor(d) => Ok(*d),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn doctor_checks_policies_only_with_the_etcd_flags() {
        assert!(doctor(&[]).unwrap().etcd.is_none());
        let d = doctor(&["--etcd-endpoints", "http://a:2379", "--node", "n1"]).unwrap();
        let etcd = d.etcd.expect("the etcd flags given");
        assert_eq!(etcd.endpoints, ["http://a:2379"]);
        assert_eq!(d.node_name.as_deref(), Some("n1"));
        assert_eq!(d.prefix, None);
        // Another flag of the check without the endpoints.
        assert!(doctor(&["--node-name", "n1"]).is_err());
    }
}
