//! Pods from the node's CRI runtime (`--cri-socket`): the sandboxes in state READY, named by
//! their metadata (kubelet's `io.kubernetes.pod.namespace` and `io.kubernetes.pod.name`
//! labels when it has none), labelled with the pod's labels (kubelet copies them onto the
//! sandbox, next to its own `io.kubernetes.*` ones, which are left out), addressed by
//! `PodSandboxStatus` (`network.ip` and `network.additional_ips`).

use std::collections::HashMap;
use std::future::Future;

use cni_policy::Pod;
use k8s_cri::v1::{PodSandbox, PodSandboxStatus};

use super::{addresses, settled, Labelled, PodSource, PodSourceError, SourcePod};
use crate::cri::{CriClient, CriError};

/// The labels kubelet puts on every sandbox for itself.
const KUBELET_LABELS: &str = "io.kubernetes.";
const NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
const NAME_LABEL: &str = "io.kubernetes.pod.name";

/// The two CRI calls a pod scan makes (the runtime; a fake in unit tests).
pub trait SandboxInspector {
    /// The sandboxes in state READY.
    fn ready_sandboxes(&mut self)
        -> impl Future<Output = Result<Vec<PodSandbox>, CriError>> + Send;
    /// The status of sandbox `id`; `None` once it is gone.
    fn sandbox_status(
        &mut self,
        id: &str,
    ) -> impl Future<Output = Result<Option<PodSandboxStatus>, CriError>> + Send;
}

impl SandboxInspector for CriClient {
    async fn ready_sandboxes(&mut self) -> Result<Vec<PodSandbox>, CriError> {
        CriClient::ready_sandboxes(self).await
    }
    async fn sandbox_status(&mut self, id: &str) -> Result<Option<PodSandboxStatus>, CriError> {
        CriClient::sandbox_status(self, id).await
    }
}

/// The pods of a CRI runtime.
#[derive(Debug, Clone)]
pub struct CriPods<C> {
    runtime: C,
}

impl<C: SandboxInspector + Send> CriPods<C> {
    /// The pods `runtime` knows.
    pub fn new(runtime: C) -> CriPods<C> {
        CriPods { runtime }
    }
}

/// The namespace and name of `sandbox`: its metadata, else kubelet's labels.
fn identity(sandbox: &PodSandbox) -> Option<(String, String)> {
    if let Some(m) = sandbox.metadata.as_ref().filter(|m| !m.name.is_empty()) {
        return Some((m.namespace.clone(), m.name.clone()));
    }
    let ns = sandbox.labels.get(NAMESPACE_LABEL)?;
    let name = sandbox.labels.get(NAME_LABEL)?;
    Some((ns.clone(), name.clone()))
}

/// The pod's own labels among a sandbox's.
fn pod_labels(labels: &HashMap<String, String>) -> cni_policy::selector::Labels {
    labels
        .iter()
        .filter(|(k, _)| !k.starts_with(KUBELET_LABELS))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl<C: SandboxInspector + Send + Clone> PodSource for CriPods<C> {
    /// containerd 1.6 lists a sandbox only once RunPodSandbox is done.
    const KNOWS_DURING_ADD: bool = false;

    async fn labels(&mut self, ids: &[String]) -> Result<Vec<Labelled>, PodSourceError> {
        let mut out = Vec::new();
        for sandbox in self.runtime.ready_sandboxes().await? {
            if !ids.contains(&sandbox.id) {
                continue;
            }
            let Some((namespace, name)) = identity(&sandbox) else {
                continue;
            };
            out.push(Labelled {
                labels: pod_labels(&sandbox.labels),
                id: sandbox.id,
                namespace,
                name,
            });
        }
        Ok(out)
    }

    async fn pods(&mut self) -> Result<Vec<SourcePod>, PodSourceError> {
        let mut pods = Vec::new();
        for sandbox in self.runtime.ready_sandboxes().await? {
            let Some((namespace, name)) = identity(&sandbox) else {
                log::debug!("sandbox {} has no pod name; skipped", sandbox.id);
                continue;
            };
            let Some(status) = self.runtime.sandbox_status(&sandbox.id).await? else {
                continue;
            };
            let network = status.network.unwrap_or_default();
            let texts = std::iter::once(network.ip.as_str())
                .chain(network.additional_ips.iter().map(|p| p.ip.as_str()));
            let ips = addresses(&format!("{namespace}/{name}"), texts);
            let pod = Pod {
                namespace,
                name,
                labels: pod_labels(&sandbox.labels),
                ips,
                named_ports: Default::default(),
            };
            pods.push(SourcePod {
                id: sandbox.id.clone(),
                pod,
                created: sandbox.created_at,
            });
        }
        Ok(settled(pods))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_cri::v1::{PodIp, PodSandboxMetadata, PodSandboxNetworkStatus};

    /// A runtime answering from a fixed list: `(sandbox, its addresses)`.
    #[derive(Clone)]
    struct Fake(Vec<(PodSandbox, Vec<&'static str>)>);

    impl SandboxInspector for Fake {
        async fn ready_sandboxes(&mut self) -> Result<Vec<PodSandbox>, CriError> {
            Ok(self.0.iter().map(|(s, _)| s.clone()).collect())
        }
        async fn sandbox_status(&mut self, id: &str) -> Result<Option<PodSandboxStatus>, CriError> {
            let Some((_, ips)) = self.0.iter().find(|(s, _)| s.id == id) else {
                return Ok(None);
            };
            let network = PodSandboxNetworkStatus {
                ip: ips.first().copied().unwrap_or_default().to_string(),
                additional_ips: ips
                    .iter()
                    .skip(1)
                    .map(|ip| PodIp { ip: ip.to_string() })
                    .collect(),
            };
            Ok(Some(PodSandboxStatus {
                id: id.to_string(),
                network: Some(network),
                ..PodSandboxStatus::default()
            }))
        }
    }

    fn sandbox(id: &str, metadata: Option<(&str, &str)>, labels: &[(&str, &str)]) -> PodSandbox {
        PodSandbox {
            id: id.into(),
            metadata: metadata.map(|(ns, name)| PodSandboxMetadata {
                name: name.into(),
                namespace: ns.into(),
                uid: id.into(),
                attempt: 0,
            }),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..PodSandbox::default()
        }
    }

    #[tokio::test]
    async fn ready_sandboxes_become_pods_without_kubelets_labels() {
        let runtime = Fake(vec![
            (
                sandbox(
                    "s1",
                    Some(("y", "web")),
                    &[("app", "web"), ("io.kubernetes.pod.uid", "u1")],
                ),
                vec!["198.18.1.2", "2001:2::2"],
            ),
            (
                sandbox(
                    "s2",
                    None,
                    &[
                        ("io.kubernetes.pod.namespace", "x"),
                        ("io.kubernetes.pod.name", "db"),
                        ("tier", "data"),
                    ],
                ),
                vec!["198.18.1.3"],
            ),
            // No name anywhere, or no address: not a pod policies can select.
            (sandbox("s3", None, &[("app", "x")]), vec!["198.18.1.4"]),
            (sandbox("s4", Some(("x", "hostnet")), &[]), vec![]),
        ]);
        let mut source = CriPods::new(runtime);
        let listed = source.pods().await.unwrap();
        assert_eq!(listed[1].id, "s1");
        let pods: Vec<Pod> = listed.into_iter().map(|p| p.pod).collect();
        let keys: Vec<String> = pods.iter().map(Pod::key).collect();
        assert_eq!(keys, ["x/db", "y/web"]);
        assert_eq!(
            pods[0].labels,
            [("tier".to_string(), "data".to_string())].into()
        );
        assert_eq!(
            pods[1].labels,
            [("app".to_string(), "web".to_string())].into()
        );
        assert_eq!(pods[1].ips.len(), 2);
        // The labels of the sandboxes asked for, by ID.
        let known = source.labels(&["s2".into(), "gone".into()]).await.unwrap();
        assert_eq!(known.len(), 1);
        assert_eq!(
            (known[0].namespace.as_str(), known[0].name.as_str()),
            ("x", "db")
        );
        assert_eq!(known[0].labels["tier"], "data");
    }
}
