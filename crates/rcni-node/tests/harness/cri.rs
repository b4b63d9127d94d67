//! The kubelet stand-in: a CRI v1 client (`k8s-cri`'s generated RuntimeService over tonic)
//! on a node's containerd socket, making the calls kubelet makes for a pod sandbox.
//! Blocking: each call runs on the client's own single-threaded tokio runtime.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatusRequest,
    CreateContainerRequest, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    ListPodSandboxRequest, Mount, NamespaceMode, NamespaceOption, PodSandbox, PodSandboxConfig,
    PodSandboxMetadata, PodSandboxStatus, PodSandboxStatusRequest, PortMapping, Protocol,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StatusRequest,
    StopPodSandboxRequest,
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
    /// `hostNetwork: true`: the sandbox shares the node's network namespace (no CNI call).
    pub host_network: bool,
    /// The sandbox may run privileged containers.
    pub privileged: bool,
}

/// A container as kubelet describes it to the runtime.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// The image's entrypoint replaced (a pod's `command`).
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// Environment, with every value already resolved.
    pub env: Vec<(String, String)>,
    /// `(host path, container path, read-only)`.
    pub mounts: Vec<(String, String, bool)>,
    pub privileged: bool,
}

/// The namespaces of a pod's sandbox and its containers.
fn namespace_options(host_network: bool) -> NamespaceOption {
    NamespaceOption {
        network: if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        } as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
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
            host_network: false,
            privileged: false,
        }
    }

    /// A pod named `name` in `namespace` labelled `app=<app>`; its UID names all three, so a
    /// pod replaced by one of the same name and other labels is another pod.
    pub fn in_namespace(namespace: &str, name: &str, app: &str) -> PodSpec {
        PodSpec {
            namespace: namespace.to_string(),
            uid: format!("uid-{namespace}-{name}-{app}"),
            labels: HashMap::from([("app".to_string(), app.to_string())]),
            ..PodSpec::named(name)
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
            // kubelet leaves a hostNetwork pod's hostname to the node (no UTS namespace).
            hostname: if self.host_network {
                String::new()
            } else {
                self.name.clone()
            },
            log_directory: log_directory.join(&self.uid).display().to_string(),
            port_mappings,
            labels: self.labels.clone(),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    // Its own network namespace unless hostNetwork, like kubelet.
                    namespace_options: Some(namespace_options(self.host_network)),
                    privileged: self.privileged,
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

    /// `CreateContainer` in sandbox `sandbox_id` of `pod`: the container's ID. Its output goes
    /// to `<log root>/<pod uid>/<name>.log` ([`CriClient::container_log`]).
    pub fn create_container(
        &mut self,
        sandbox_id: &str,
        pod: &PodSpec,
        container: &ContainerSpec,
    ) -> Result<String, tonic::Status> {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: container.name.clone(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: container.image.clone(),
                ..Default::default()
            }),
            command: container.command.clone(),
            args: container.args.clone(),
            envs: container
                .env
                .iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            mounts: container
                .mounts
                .iter()
                .map(|(host, inside, readonly)| Mount {
                    host_path: host.clone(),
                    container_path: inside.clone(),
                    readonly: *readonly,
                    ..Default::default()
                })
                .collect(),
            log_path: format!("{}.log", container.name),
            linux: Some(LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    privileged: container.privileged,
                    namespace_options: Some(namespace_options(pod.host_network)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(pod.sandbox_config(&self.log_root)),
        };
        let reply = self
            .runtime
            .block_on(self.client.create_container(request))?;
        Ok(reply.into_inner().container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = StartContainerRequest {
            container_id: id.to_string(),
        };
        self.runtime
            .block_on(self.client.start_container(request))?;
        Ok(())
    }

    /// `ContainerStatus`: its state and, once exited, its exit code.
    pub fn container_state(&mut self, id: &str) -> Result<(ContainerState, i32), tonic::Status> {
        let request = ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let status = self
            .runtime
            .block_on(self.client.container_status(request))?
            .into_inner()
            .status
            .ok_or_else(|| tonic::Status::internal("ContainerStatus without a status"))?;
        Ok((status.state(), status.exit_code))
    }

    /// What container `name` of `pod` wrote so far (the CRI log file).
    pub fn container_log(&self, pod: &PodSpec, name: &str) -> String {
        std::fs::read_to_string(self.log_root.join(&pod.uid).join(format!("{name}.log")))
            .unwrap_or_default()
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
