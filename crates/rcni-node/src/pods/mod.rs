//! Where the agent learns the pods of its node, as NetworkPolicy sees them (namespace, name,
//! labels, addresses): [`records`] reads the sandbox records `rcni pod` keeps, [`cri`] asks
//! the node's CRI runtime. Both implement [`PodSource`]; the agent rescans its source every
//! few seconds ([`crate::policy`]), and at once when the source signals a change (the record
//! directory does, through inotify).

pub mod cri;
pub mod records;

use std::future::Future;
use std::net::IpAddr;

use cni_policy::Pod;

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
pub trait PodSource {
    /// Every pod with its network set up, sorted by namespace and name. Pods without an
    /// address are left out (no policy can match them).
    fn pods(&mut self) -> impl Future<Output = Result<Vec<Pod>, PodSourceError>> + Send;

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
fn settled(mut pods: Vec<Pod>) -> Vec<Pod> {
    pods.retain(|p| !p.ips.is_empty());
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}
