//! Where the agent learns the pods of its node, as NetworkPolicy sees them (namespace, name,
//! labels, addresses):
//!
//! - the bridge plugin of the agent's conflist tells the agent about each pod at its ADD
//!   (sandbox ID, namespace, name, addresses) and DEL ([`crate::policy::socket`]);
//! - [`records`] reads the sandbox records `rcni pod` keeps, [`cri`] asks the node's CRI
//!   runtime: both implement [`PodSource`], which lists the node's pods (the agent rescans
//!   every few seconds, and at once when the source signals a change: the record directory
//!   does, through inotify) and gives the labels of a sandbox the agent was told about;
//! - [`local`] puts both together, by sandbox ID: the table of the node's pods the program
//!   is made for; [`attached`] keeps what the plugins told on disk, for a restarted agent.

pub mod attached;
pub mod cri;
pub mod local;
pub mod records;

use std::future::Future;
use std::net::IpAddr;

use cni_policy::selector::Labels;
use cni_policy::Pod;

/// A pod as its source lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePod {
    /// The sandbox's ID (the container ID of its CNI attachments).
    pub id: String,
    pub pod: Pod,
    /// When the sandbox was made (nanoseconds since the epoch): of two sandboxes of one pod,
    /// the later one is the pod.
    pub created: i64,
}

/// A sandbox's pod as its source knows it during or just after its ADD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
}

/// A source could not be read (this scan is skipped; the last one stays in force).
#[derive(Debug, thiserror::Error)]
pub enum PodSourceError {
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),
    #[error("pod records: {0}")]
    Records(#[from] cni_sandbox::SandboxError),
    #[error("pod records: the reading thread failed: {0}")]
    Thread(String),
}

/// Who knows which pods run on this node.
pub trait PodSource: Clone {
    /// Whether [`PodSource::labels`] may know a sandbox while its ADD runs (`rcni pod` writes
    /// its record before; containerd 1.6 lists a sandbox only once RunPodSandbox is done).
    const KNOWS_DURING_ADD: bool;

    /// Every pod with its network set up, sorted by namespace and name. Pods without an
    /// address are left out (no policy can match them).
    fn pods(&mut self) -> impl Future<Output = Result<Vec<SourcePod>, PodSourceError>> + Send;

    /// The pods of the sandboxes `ids` the source knows now (others are left out).
    fn labels(
        &mut self,
        ids: &[String],
    ) -> impl Future<Output = Result<Vec<Labelled>, PodSourceError>> + Send;

    /// Resolves when the pods may have changed, so that the agent rescans before its next
    /// periodic scan. A source without such a signal never resolves (the periodic scan
    /// finds its changes).
    fn changed(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// The addresses among `texts` (plain addresses, as runtimes report them), others skipped
/// with a warning naming `pod`.
fn addresses<'a>(pod: &str, texts: impl IntoIterator<Item = &'a str>) -> Vec<IpAddr> {
    texts
        .into_iter()
        .filter(|t| !t.is_empty())
        .filter_map(|t| match t.parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                log::warn!("pod {pod}: address {t:?} is not an IP address; ignored");
                None
            }
        })
        .collect()
}

/// Sorts `pods` by namespace and name and drops those without an address.
fn settled(mut pods: Vec<SourcePod>) -> Vec<SourcePod> {
    pods.retain(|p| !p.pod.ips.is_empty());
    pods.sort_by(|a, b| (&a.pod.namespace, &a.pod.name).cmp(&(&b.pod.namespace, &b.pod.name)));
    pods
}
