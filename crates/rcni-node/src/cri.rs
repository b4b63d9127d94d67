//! A client of the node's CRI runtime (the CRI v1 `RuntimeService` over its unix socket, as
//! kubelet talks to containerd or CRI-O): the agent asks it which pod sandboxes exist.

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ListPodSandboxRequest, PodSandbox, PodSandboxFilter, PodSandboxState, PodSandboxStateValue,
    PodSandboxStatus, PodSandboxStatusRequest,
};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one CRI call (connecting included) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("CRI runtime at {socket}: {call} failed: {status}", status = .source.message())]
    Call {
        socket: PathBuf,
        call: &'static str,
        #[source]
        source: Box<tonic::Status>,
    },
}

/// Who can tell which pod sandboxes exist (the CRI runtime; a fake in unit tests).
pub trait SandboxLister {
    /// The IDs of every sandbox the runtime knows, in any state (ready or not).
    fn sandbox_ids(&mut self) -> impl Future<Output = Result<HashSet<String>, CriError>> + Send;
}

/// A CRI `RuntimeService` client on a unix socket. It connects on first use and reconnects
/// after failures, so the runtime may start after the agent or restart under it.
#[derive(Debug, Clone)]
pub struct CriClient {
    socket: PathBuf,
    client: RuntimeServiceClient<Channel>,
}

impl CriClient {
    /// A client of the runtime listening on `socket`, a path or kubelet's
    /// `unix:///path` endpoint form (nothing is dialled yet).
    pub fn new(socket: &Path) -> CriClient {
        let socket = socket_path(socket);
        let path = socket.clone();
        // The URI is required by the type but never dialled: the connector opens the socket.
        let channel = Endpoint::from_static("http://[::]:0")
            .connect_timeout(CALL_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { UnixStream::connect(path).await.map(TokioIo::new) }
            }));
        CriClient {
            socket,
            client: RuntimeServiceClient::new(channel),
        }
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn failed(&self, call: &'static str, status: tonic::Status) -> CriError {
        CriError::Call {
            socket: self.socket.clone(),
            call,
            source: Box::new(status),
        }
    }

    /// The sandboxes in state READY (their network is set up).
    pub async fn ready_sandboxes(&mut self) -> Result<Vec<PodSandbox>, CriError> {
        let filter = PodSandboxFilter {
            state: Some(PodSandboxStateValue {
                state: PodSandboxState::SandboxReady as i32,
            }),
            ..PodSandboxFilter::default()
        };
        let request = ListPodSandboxRequest {
            filter: Some(filter),
        };
        match self.client.list_pod_sandbox(request).await {
            Ok(answer) => Ok(answer.into_inner().items),
            Err(status) => Err(self.failed("ListPodSandbox", status)),
        }
    }

    /// The status of sandbox `id` (its addresses); `None` when the runtime has none.
    pub async fn sandbox_status(&mut self, id: &str) -> Result<Option<PodSandboxStatus>, CriError> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        match self.client.pod_sandbox_status(request).await {
            Ok(answer) => Ok(answer.into_inner().status),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
            Err(status) => Err(self.failed("PodSandboxStatus", status)),
        }
    }
}

/// The socket path of `endpoint`: a path, or `unix://` followed by one.
fn socket_path(endpoint: &Path) -> PathBuf {
    match endpoint.to_str().and_then(|e| e.strip_prefix("unix://")) {
        Some(path) => PathBuf::from(path),
        None => endpoint.to_path_buf(),
    }
}

impl SandboxLister for CriClient {
    async fn sandbox_ids(&mut self) -> Result<HashSet<String>, CriError> {
        // No filter: every state, NOTREADY sandboxes included (their network may still be set
        // up, and kubelet will stop and remove them itself).
        let request = ListPodSandboxRequest { filter: None };
        let answer = match self.client.list_pod_sandbox(request).await {
            Ok(answer) => answer,
            Err(status) => return Err(self.failed("ListPodSandbox", status)),
        };
        Ok(answer
            .into_inner()
            .items
            .into_iter()
            .map(|s| s.id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_a_path_or_a_unix_endpoint() {
        let plain = Path::new("/run/containerd/containerd.sock");
        assert_eq!(socket_path(plain), plain);
        let endpoint = Path::new("unix:///run/containerd/containerd.sock");
        assert_eq!(socket_path(endpoint), plain);
    }

    // An unreachable runtime is a typed error naming the socket and the call, not a panic.
    #[tokio::test]
    async fn an_absent_runtime_is_a_call_error() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("none.sock");
        let err = CriClient::new(&socket).sandbox_ids().await.unwrap_err();
        let CriError::Call { call, .. } = &err;
        assert_eq!(*call, "ListPodSandbox");
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
