//! `rcni policy`: Kubernetes NetworkPolicies and Namespaces, ClusterNetworkPolicies and Nodes
//! kept in the etcd `rcni-node` uses, under the layout of `cni_policy::stored`
//! (`<prefix>/policies/<ns>/<name>`, `<prefix>/namespaces/<name>`,
//! `<prefix>/clusterpolicies/<name>`, `<prefix>/nodes/<name>`), read back with the pods the
//! node agents publish and the nodes' leases.
//!
//! The verbs speak as `kubectl` does (`networkpolicy.networking.k8s.io/x created`,
//! `Error from server (NotFound): ...`, `The NetworkPolicy "x" is invalid: ...`); failures
//! are one line on stderr and exit status 1 (with `--json`, a CNI error object on stdout).

mod apply;
mod cluster;
mod explain;
mod object;
mod printer;
mod show;
pub(crate) mod store;

use std::io::Read;

use clap::{Args, Subcommand, ValueEnum};
use cni_types::code;

use crate::failure::Failure;
use object::Resource;
use store::Datastore;

/// Where the policies are: etcd as `rcni-node` reaches it, and the network's key prefix.
#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(flatten)]
    pub etcd: cni_etcd::EtcdOptions,
    /// The etcd key prefix of the network (`rcni-node --prefix`).
    #[arg(long, default_value = cni_etcd::DEFAULT_PREFIX)]
    pub prefix: String,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Store the NetworkPolicies, Namespaces, ClusterNetworkPolicies and Nodes of a file (YAML
    /// or JSON, one or many documents, `-` for stdin), all or nothing: every object is
    /// validated first.
    Apply {
        #[command(flatten)]
        store: StoreArgs,
        /// The file, or `-` for standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: String,
    },
    /// Show one object (a table row, or the object with -o): a NetworkPolicy by NAME, or
    /// RESOURCE/NAME (`cnp/NAME`, `node/NAME`).
    Get {
        #[command(flatten)]
        store: StoreArgs,
        /// The namespace of a NetworkPolicy.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// NAME, or RESOURCE/NAME.
        name: String,
        #[arg(short, long, value_enum)]
        output: Option<Output>,
    },
    /// List the NetworkPolicies of a namespace, or of all (-A); or every object of RESOURCE
    /// (`clusternetworkpolicies`, `cnp`, `nodes`).
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// networkpolicies (the default), clusternetworkpolicies or nodes.
        resource: Option<String>,
        #[arg(
            short,
            long,
            default_value = "default",
            conflicts_with = "all_namespaces"
        )]
        namespace: String,
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        #[arg(short, long, value_enum)]
        output: Option<Output>,
    },
    /// Delete a NetworkPolicy by NAME, an object by RESOURCE/NAME, or the objects of a file
    /// (-f). Deleting a Namespace or a Node deletes its labels only; its policies, pods and
    /// lease stay.
    Delete {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        name: Option<String>,
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: Option<String>,
    },
    /// Which policies select a pod the nodes published, and what they allow it in each
    /// direction, tier by tier; with --from or --to, which tier and rule decide one
    /// connection.
    Explain {
        #[command(flatten)]
        store: StoreArgs,
        /// The pod, as NAMESPACE/NAME.
        pod: String,
        /// A connection from this pod (NAMESPACE/NAME) or address to the pod.
        #[arg(long, conflicts_with = "to", requires = "port")]
        from: Option<String>,
        /// A connection from the pod to this pod (NAMESPACE/NAME) or address.
        #[arg(long, requires = "port")]
        to: Option<String>,
        /// The connection's protocol: TCP, UDP or SCTP.
        #[arg(long, default_value = "TCP")]
        protocol: String,
        /// The connection's destination port.
        #[arg(long)]
        port: Option<u16>,
        /// With --from or --to: the node agent whose recent flows of the pair are shown.
        #[command(flatten)]
        agent: crate::cli::flows::AgentArgs,
    },
}

/// The object formats of `get` and `list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Json,
    Yaml,
}

/// Runs a `rcni policy` verb; `json` is rcni's global `--json`.
pub fn run(command: &PolicyCommand, json: bool) -> Result<(), Failure> {
    let verb = match command {
        PolicyCommand::Apply { .. } => "policy apply",
        PolicyCommand::Get { .. } => "policy get",
        PolicyCommand::List { .. } => "policy list",
        PolicyCommand::Delete { .. } => "policy delete",
        PolicyCommand::Explain { .. } => "policy explain",
    };
    dispatch(command, json).map_err(|p| p.report(verb, json))
}

fn dispatch(command: &PolicyCommand, json: bool) -> Result<(), Problem> {
    match command {
        PolicyCommand::Apply { store, file } => {
            read_input(file).and_then(|text| apply::run(store, &text, json))
        }
        PolicyCommand::Get {
            store,
            namespace,
            name,
            output,
        } => show::get(&mut open(store)?, namespace, name, pick(*output, json)),
        PolicyCommand::List {
            store,
            resource,
            namespace,
            all_namespaces,
            output,
        } => {
            let resource = match resource {
                Some(r) => Resource::parse(r).map_err(show::usage)?,
                None => Resource::NetworkPolicy,
            };
            let ns = (!*all_namespaces).then_some(namespace.as_str());
            show::list(&mut open(store)?, resource, ns, pick(*output, json))
        }
        PolicyCommand::Delete {
            store,
            namespace,
            name,
            file,
        } => match (name, file) {
            (Some(name), _) => show::delete(&mut open(store)?, namespace, name, json),
            (None, Some(file)) => read_input(file)
                .and_then(|text| show::delete_documents(&mut open(store)?, &text, json)),
            (None, None) => Err(Problem::new(code::INVALID_ENVIRONMENT, "give NAME or -f")),
        },
        PolicyCommand::Explain {
            store,
            pod,
            from,
            to,
            protocol,
            port,
            agent,
        } => {
            let connection = explain::Connection::of(from, to, protocol, *port)?;
            let agent = agent.agent().map_err(|e| {
                Problem::new(cni_types::code::INVALID_ENVIRONMENT, format!("error: {e}"))
            })?;
            explain::run(
                &mut open(store)?,
                pod,
                connection.as_ref(),
                Some(&agent),
                json,
            )
        }
    }
}

/// `--json` means `-o json` where no -o is given.
fn pick(output: Option<Output>, json: bool) -> Option<Output> {
    output.or(json.then_some(Output::Json))
}

fn open(store: &StoreArgs) -> Result<Datastore, Problem> {
    Datastore::open(&store.etcd, &store.prefix)
}

/// The text of `-f FILE` (`-`: standard input).
fn read_input(file: &str) -> Result<String, Problem> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Problem::new(code::IO_FAILURE, format!("error: reading stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Problem::new(
            code::IO_FAILURE,
            format!("error: the path \"{file}\" does not exist"),
        ),
        _ => Problem::new(code::IO_FAILURE, format!("error: {file}: {e}")),
    })
}

/// Why a verb failed: the text `kubectl` would print (one or more lines) and, for `--json`,
/// a CNI error code.
#[derive(Debug)]
pub struct Problem {
    pub code: u32,
    pub text: String,
}

impl Problem {
    pub fn new(code: u32, text: impl Into<String>) -> Problem {
        Problem {
            code,
            text: text.into(),
        }
    }

    /// The datastore could not be used (unreachable, refused, bad TLS files): one line.
    pub fn store(e: impl std::fmt::Display) -> Problem {
        Problem::new(code::TRY_AGAIN_LATER, format!("error: {e}"))
    }

    /// Prints the text (stderr), or leaves it to rcni's `--json` error object.
    fn report(self, verb: &str, json: bool) -> Failure {
        if json {
            return Failure::other(verb, self.code, self.text);
        }
        eprintln!("{}", self.text);
        Failure::Reported
    }
}
