//! The kubelet stand-in: a CRI v1 client (`k8s-cri`'s generated RuntimeService over tonic)
//! on a node's containerd socket, making the calls kubelet makes for a pod sandbox.
//! Blocking: each call runs on the client's own single-threaded tokio runtime.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListPodSandboxRequest, NamespaceMode,
    NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatus,
    PodSandboxStatusRequest, PortMapping, Protocol, RemovePodSandboxRequest, RunPodSandboxRequest,
    StatusRequest, StopPodSandboxRequest,
};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A pod as kubelet describes it to the runtime (the parts the network depends on).
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: HashMap<String, String>,
    /// `(host port, container port)` TCP mappings (a container's `hostPort`).
    pub host_ports: Vec<(u16, u16)>,
}

impl PodSpec {
    /// A pod named `name` in namespace `default` with a uid derived from the name.
    pub fn named(name: &str) -> PodSpec {
        PodSpec {
            name: name.to_string(),
            namespace: "default".to_string(),
            uid: format!("uid-{name}"),
            labels: HashMap::from([("app".to_string(), name.to_string())]),
            host_ports: Vec::new(),
        }
    }

    fn sandbox_config(&self, log_directory: &Path) -> PodSandboxConfig {
        let port_mappings = self
            .host_ports
            .iter()
            .map(|&(host, container)| PortMapping {
                protocol: Protocol::Tcp as i32,
                container_port: i32::from(container),
                host_port: i32::from(host),
                host_ip: String::new(),
            })
            .collect();
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            hostname: self.name.clone(),
            log_directory: log_directory.join(&self.uid).display().to_string(),
            port_mappings,
            labels: self.labels.clone(),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    // Its own network namespace (not hostNetwork), like kubelet's default.
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Pod as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A blocking CRI RuntimeService client.
pub struct CriClient {
    runtime: tokio::runtime::Runtime,
    client: RuntimeServiceClient<Channel>,
    /// Where the sandboxes' log directories go (kubelet's `/var/log/pods`).
    log_root: PathBuf,
}

impl CriClient {
    /// Connects to the CRI socket `socket` (a unix socket path).
    pub fn connect(socket: &Path, log_root: &Path) -> anyhow::Result<CriClient> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let socket = socket.to_path_buf();
        let channel = runtime.block_on(async move {
            // The URI is required by tonic but unused: every connection goes to the socket.
            Endpoint::try_from("http://[::]:0")?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?))
                    }
                }))
                .await
        })?;
        Ok(CriClient {
            runtime,
            client: RuntimeServiceClient::new(channel),
            log_root: log_root.to_path_buf(),
        })
    }

    /// `RunPodSandbox`: the sandbox's ID, or the runtime's error (with the CNI failure).
    pub fn run_pod_sandbox(&mut self, pod: &PodSpec) -> Result<String, tonic::Status> {
        let request = RunPodSandboxRequest {
            config: Some(pod.sandbox_config(&self.log_root)),
            runtime_handler: String::new(),
        };
        let reply = self
            .runtime
            .block_on(self.client.run_pod_sandbox(request))?;
        Ok(reply.into_inner().pod_sandbox_id)
    }

    /// `PodSandboxStatus` (verbose): the status and containerd's `info` JSON (with the PID
    /// of the sandbox process).
    pub fn pod_sandbox_status(
        &mut self,
        id: &str,
    ) -> Result<(PodSandboxStatus, serde_json::Value), tonic::Status> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        };
        let reply = self
            .runtime
            .block_on(self.client.pod_sandbox_status(request))?
            .into_inner();
        let info = reply
            .info
            .get("info")
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let status = reply
            .status
            .ok_or_else(|| tonic::Status::internal("PodSandboxStatus without a status"))?;
        Ok((status, info))
    }

    /// `StopPodSandbox`: the runtime tears the sandbox's network down (CNI DEL).
    pub fn stop_pod_sandbox(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.runtime
            .block_on(self.client.stop_pod_sandbox(request))?;
        Ok(())
    }

    /// `RemovePodSandbox`.
    pub fn remove_pod_sandbox(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.runtime
            .block_on(self.client.remove_pod_sandbox(request))?;
        Ok(())
    }

    /// `ListPodSandbox` without a filter: every sandbox, in any state.
    pub fn list_pod_sandbox(&mut self) -> Result<Vec<PodSandbox>, tonic::Status> {
        let reply = self.runtime.block_on(
            self.client
                .list_pod_sandbox(ListPodSandboxRequest { filter: None }),
        )?;
        Ok(reply.into_inner().items)
    }

    /// `Status`: the `NetworkReady` condition as `(status, message)`.
    pub fn network_ready(&mut self) -> Result<(bool, String), tonic::Status> {
        let reply = self
            .runtime
            .block_on(self.client.status(StatusRequest { verbose: false }))?
            .into_inner();
        let condition = reply
            .status
            .into_iter()
            .flat_map(|s| s.conditions)
            .find(|c| c.r#type == "NetworkReady")
            .ok_or_else(|| tonic::Status::internal("Status without a NetworkReady condition"))?;
        Ok((condition.status, condition.message))
    }
}

/// The pod's IPv4 address in a sandbox status.
pub fn sandbox_ipv4(status: &PodSandboxStatus) -> Option<Ipv4Addr> {
    let network = status.network.as_ref()?;
    std::iter::once(network.ip.as_str())
        .chain(network.additional_ips.iter().map(|ip| ip.ip.as_str()))
        .find_map(|ip| ip.parse().ok())
}
