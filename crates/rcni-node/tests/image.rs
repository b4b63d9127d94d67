//! Root-only: the image `scripts/build-image` makes, and `deploy/rcni-node.yaml` run from it.
//!
//! - The archive is reproducible (the same bytes twice), holds the three static binaries owned
//!   by root, and both a real containerd (`ctr images import`) and podman (`podman load`)
//!   accept it with its name, entrypoint and user.
//! - The DaemonSet, run as kubelet would run it on each of 3 simulated nodes (see
//!   `harness/mod.rs`), on both backends: the image imported into the node's containerd, a
//!   host-network privileged sandbox, the init container and then the agent container with
//!   exactly the manifest's image, command, args, env and hostPath mounts
//!   (`harness/manifest.rs`). Then pods made through CRI get addresses in their node's subnet,
//!   ping and HTTP work between every pair of nodes, and their teardown leaves nothing behind.
//!
//! The image is built once per test binary (cargo rebuilds nothing when the sources did not
//! change). Skipped, saying why, where containerd or crun is missing; the podman check is
//! skipped where podman is missing.

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cni_testkit::Sandbox;
use harness::containerd::{build_pause_image, missing_tools, on_path, CniDirs, Containerd};
use harness::cri::{CriClient, PodSpec};
use harness::etcd::Ca;
use harness::manifest::{DaemonSetPod, Manifest, NodeFields};
use harness::*;
use k8s_cri::v1::ContainerState;
use serde_json::{json, Value};

/// Where the nodes' containerd takes plugins and configs: the paths of a Kubernetes node, the
/// ones the manifest mounts (inside containerd's private mount namespace, see
/// `harness/containerd.rs`).
const NODE_BIN_DIR: &str = "/opt/cni/bin";
const NODE_CONF_DIR: &str = "/etc/cni/net.d";
const BINARIES: [&str; 3] = ["rcni-node", "rcni-plugins", "rcni"];

fn skip() -> bool {
    if skip_unless_root() {
        return true;
    }
    if let Some(why) = missing_tools() {
        eprintln!("skipping: the image tests need containerd, ctr and crun ({why})");
        return true;
    }
    false
}

/// The archive and reference `scripts/build-image` printed.
struct Image {
    archive: PathBuf,
    reference: String,
}

fn build_image() -> Image {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-image");
    let out = Command::new(&script)
        .output()
        .expect("run scripts/build-image");
    assert!(
        out.status.success(),
        "scripts/build-image failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let [.., archive, reference] = lines[..] else {
        panic!("scripts/build-image printed {stdout:?}, not the archive and the reference");
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    Image {
        archive: root.join(archive),
        reference: reference.to_string(),
    }
}

/// Built once for this test binary.
fn image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(build_image)
}

fn sha256(path: &Path) -> String {
    sh(&["sha256sum", path.to_str().unwrap()])
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `tar -tv` of an archive, or of `-` with `stdin_from` piped in: (mode, owner, date, name).
fn tar_listing(args: &str) -> Vec<(String, String, String, String)> {
    let out = sh(&[
        "sh",
        "-c",
        &format!("{args} | tar -tv --numeric-owner --full-time -f -"),
    ]);
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let date = format!("{} {}", f[3], f[4]);
            (f[0].into(), f[1].into(), date, f[5..].join(" "))
        })
        .collect()
}

/// The archive is the same bytes when built again; its entries are sorted, owned by 0/0 with
/// a zero mtime; its layer holds the three binaries, executable, owned by root.
fn check_archive(image: &Image) {
    let first = sha256(&image.archive);
    let again = build_image();
    assert_eq!(again.archive, image.archive);
    assert_eq!(
        sha256(&image.archive),
        first,
        "a rebuild changed the archive"
    );
    let archive = image.archive.to_str().unwrap();
    let outer = tar_listing(&format!("cat {archive}"));
    let names: Vec<&String> = outer.iter().map(|e| &e.3).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "archive entries not sorted");
    for (_, owner, date, name) in &outer {
        assert_eq!(owner, "0/0", "{name}");
        assert_eq!(date, "1970-01-01 00:00:00", "{name}");
    }
    let docker: Value =
        serde_json::from_str(&sh(&["tar", "-xOf", archive, "./manifest.json"])).unwrap();
    assert_eq!(docker[0]["RepoTags"], json!([image.reference]));
    let layer = docker[0]["Layers"][0].as_str().unwrap();
    let files = tar_listing(&format!("tar -xOf {archive} ./{layer} | gzip -dc"));
    for bin in BINARIES {
        let path = format!("./usr/local/bin/{bin}");
        let entry = files
            .iter()
            .find(|e| e.3 == path)
            .unwrap_or_else(|| panic!("{path} not in the layer: {files:?}"));
        assert_eq!(entry.0, "-rwxr-xr-x", "{path}");
        assert_eq!(entry.1, "0/0", "{path}");
    }
}

/// A blob of containerd's content store, as JSON.
fn content(containerd: &Containerd, digest: &str) -> Value {
    serde_json::from_str(&containerd.ctr(&["content", "get", digest])).unwrap()
}

/// The image's config as containerd stored it after the import.
fn imported_config(containerd: &Containerd, reference: &str) -> Value {
    let list = containerd.ctr(&["images", "ls"]);
    let line = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(reference))
        .unwrap_or_else(|| panic!("{reference} not in `ctr images ls`:\n{list}"));
    let digest = line
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap();
    let manifest = content(containerd, digest);
    content(containerd, manifest["config"]["digest"].as_str().unwrap())
}

/// `podman load` and `podman image inspect` in a private mount namespace (fresh `/run`,
/// `/var/lib` and `/etc/cni`, so nothing of podman's state lands on the machine), inside the
/// throwaway namespace `netns`.
fn podman_inspect(netns: &str, image: &Image) -> Value {
    let script = r#"set -e
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/lib
mkdir -p /etc/cni && mount -t tmpfs tmpfs /etc/cni
podman --storage-driver vfs load -i "$1" >&2
podman --storage-driver vfs image inspect "$2"
"#;
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        netns,
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "podman-load",
        image.archive.to_str().unwrap(),
        &image.reference,
    ]);
    serde_json::from_str(&out).unwrap()
}

#[test]
fn built_image_is_reproducible_and_loads_in_containerd_and_podman() {
    if skip() {
        return;
    }
    let image = image();
    let size = std::fs::metadata(&image.archive).unwrap().len();
    eprintln!(
        "{} ({}): {:.1} MiB",
        image.archive.display(),
        image.reference,
        size as f64 / (1 << 20) as f64
    );
    check_archive(image);

    let sb = Sandbox::new().unwrap();
    let node = sb.add_container().unwrap();
    let dir = sb.dir().join("node");
    let (bin, conf) = (dir.join("bin"), dir.join("net.d"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    let pause = build_pause_image(sb.dir());
    let cni = CniDirs {
        bin_dir: &bin,
        conf_dir: &conf,
    };
    let containerd = Containerd::start(&node.name, &dir, cni, &pause);
    containerd.import(&image.archive);
    let config = imported_config(&containerd, &image.reference);
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/usr/local/bin/rcni-node"])
    );
    assert_eq!(config["config"]["User"], "0:0");
    assert_eq!(config["os"], "linux");

    if !on_path("podman") {
        eprintln!("podman check skipped: podman is not installed (apt-get install podman)");
        return;
    }
    let inspect = podman_inspect(&node.name, image);
    let loaded = &inspect[0];
    assert!(
        loaded["RepoTags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == image.reference.as_str()),
        "podman named it {}",
        loaded["RepoTags"]
    );
    assert_eq!(
        loaded["Config"]["Entrypoint"],
        json!(["/usr/local/bin/rcni-node"])
    );
    assert_eq!(loaded["Config"]["User"], "0:0");
}

/// Kubelet's part before the containers: hostPath volumes of type `DirectoryOrCreate` are
/// created and those of type `Socket` must exist, on the node as containerd sees it.
fn prepare_host_paths(containerd: &Containerd, pod: &DaemonSetPod) {
    for volume in &pod.host_paths {
        let on_node = containerd.host_path(&volume.path);
        match volume.kind.as_str() {
            "DirectoryOrCreate" => std::fs::create_dir_all(&on_node).unwrap(),
            "Socket" => assert!(on_node.exists(), "no socket {}", volume.path),
            "Secret" => assert!(on_node.is_dir(), "no Secret files at {}", volume.path),
            other => panic!("hostPath type {other:?} of {} not handled", volume.path),
        }
    }
}

/// The DaemonSet's pod as started on one node.
struct Started {
    spec: PodSpec,
    sandbox: String,
    /// The IDs of its (non-init) containers.
    containers: Vec<String>,
}

/// Runs the DaemonSet's pod on node `i` through CRI as kubelet would: the sandbox, each init
/// container to a successful exit, then the containers.
fn run_daemonset_pod(c: &Cluster, i: usize, pod: &DaemonSetPod) -> Started {
    let node = &c.nodes[i];
    let containerd = node.containerd.as_ref().unwrap();
    prepare_host_paths(containerd, pod);
    let mut spec = PodSpec::named(&format!("{}-node{}", pod.name, node.index));
    spec.namespace = pod.namespace.clone();
    spec.host_network = pod.host_network;
    spec.privileged = pod
        .init_containers
        .iter()
        .chain(&pod.containers)
        .any(|c| c.privileged);
    let mut cri = c.cri(i);
    let sandbox = cri.run_pod_sandbox(&spec).expect("RunPodSandbox");
    for init in &pod.init_containers {
        let id = cri.create_container(&sandbox, &spec, init).unwrap();
        cri.start_container(&id).unwrap();
        let exited = wait_for(Duration::from_secs(60), || {
            matches!(
                cri.container_state(&id),
                Ok((ContainerState::ContainerExited, _))
            )
        });
        let log = cri.container_log(&spec, &init.name);
        assert!(
            exited.is_some(),
            "init container {} did not exit:\n{log}",
            init.name
        );
        let (_, code) = cri.container_state(&id).unwrap();
        assert_eq!(code, 0, "init container {} failed:\n{log}", init.name);
    }
    let mut containers = Vec::new();
    for container in &pod.containers {
        let id = cri.create_container(&sandbox, &spec, container).unwrap();
        cri.start_container(&id).unwrap();
        containers.push(id);
    }
    Started {
        spec,
        sandbox,
        containers,
    }
}

/// The logs of the pod's containers and the end of containerd's log, for a failure message.
fn pod_logs(c: &Cluster, i: usize, spec: &PodSpec, pod: &DaemonSetPod) -> String {
    let cri = c.cri(i);
    let mut text = String::new();
    for container in pod.init_containers.iter().chain(&pod.containers) {
        let log = cri.container_log(spec, &container.name);
        text.push_str(&format!("--- {}:\n{log}\n", container.name));
    }
    text + "--- containerd:\n" + &c.containerd_log_tail(i)
}

/// The node's IPv4 subnet from the subnet file the agent container wrote (a hostPath).
fn agent_subnet(c: &Cluster, i: usize) -> Option<ipnet::Ipv4Net> {
    let containerd = c.nodes[i].containerd.as_ref()?;
    let text = std::fs::read_to_string(containerd.host_path("/run/rcni/subnet.env")).ok()?;
    let net: ipnet::Ipv4Net = text
        .lines()
        .find_map(|l| l.strip_prefix("FLANNEL_SUBNET="))?
        .parse()
        .ok()?;
    Some(net.trunc())
}

/// The host-local lease files of the agent's network on node `i` (the agent's state dir is the
/// hostPath `/run/rcni`).
fn leases(c: &Cluster, i: usize) -> Vec<String> {
    let containerd = c.nodes[i].containerd.as_ref().unwrap();
    std::fs::read_dir(containerd.host_path("/run/rcni/ipam/rcni"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// Adds a node running containerd with the built image imported, and runs the DaemonSet's pod
/// on it; returns once NetworkReady is true, with how long that took after the pod started.
fn add_daemonset_node(c: &mut Cluster, manifest: &Manifest, pause: &Path) -> (Started, Duration) {
    let image = image();
    let i = c.add_node();
    let node = &c.nodes[i];
    let pod = manifest.daemonset_pod(&NodeFields {
        node_name: format!("node{}", node.index),
        host_ip: node.ip.to_string(),
    });
    for container in pod.init_containers.iter().chain(&pod.containers) {
        assert_eq!(container.image, image.reference, "{}", container.name);
    }
    let cni = CniDirs {
        bin_dir: Path::new(NODE_BIN_DIR),
        conf_dir: Path::new(NODE_CONF_DIR),
    };
    let containerd = Containerd::start(&node.ns.name, &node.dir, cni, pause);
    containerd.import(&image.archive);
    c.nodes[i].containerd = Some(containerd);
    let (ready, _) = c.cri(i).network_ready().unwrap();
    assert!(!ready, "NetworkReady before the DaemonSet ran");

    let begun = Instant::now();
    let started = run_daemonset_pod(c, i, &pod);
    // The init container installed every plugin, loopback included, into the node's dir.
    let bin = c.nodes[i]
        .containerd
        .as_ref()
        .unwrap()
        .opt()
        .join("cni/bin");
    for name in ["loopback", "bridge", "host-local", "portmap", "tuning"] {
        assert!(
            bin.join(name).exists(),
            "{name} not installed in {NODE_BIN_DIR}"
        );
    }
    // Until NetworkReady, or until a container exits (kubelet would restart it; here its log
    // is the failure).
    let mut cri: CriClient = c.cri(i);
    let settled = wait_for(Duration::from_secs(60), || {
        let exited = started.containers.iter().any(|id| {
            matches!(
                cri.container_state(id),
                Ok((ContainerState::ContainerExited, _))
            )
        });
        exited || cri.network_ready().is_ok_and(|(ready, _)| ready)
    });
    assert!(
        settled.is_some() && cri.network_ready().unwrap().0,
        "node{}: NetworkReady never true with the agent from the image:\n{}",
        i + 1,
        pod_logs(c, i, &started.spec, &pod)
    );
    (started, begun.elapsed())
}

/// Waits until every node routes to every other node's subnet.
fn wait_converged(c: &Cluster) -> bool {
    let n = c.nodes.len();
    wait_for(Duration::from_secs(60), || {
        (0..n).all(|a| {
            (0..n)
                .filter(|b| *b != a)
                .all(|b| agent_subnet(c, b).is_some_and(|s| c.nodes[a].has_route(&s.to_string())))
        })
    })
    .is_some()
}

/// Three nodes each running the DaemonSet from the manifest and the built image on `backend`;
/// a pod per node through CRI in its node's subnet with a host-local lease; ping and HTTP
/// between every pair; after StopPodSandbox and RemovePodSandbox nothing of the pods is left.
fn daemonset_cluster(backend: Value) {
    let mut manifest = Manifest::load();
    let etcd = format!("https://{UNDERLAY_GW}:2379");
    manifest.set_config("rcni-node", "etcd-endpoints", &etcd);
    manifest.set_config("rcni-node", "prefix", PREFIX);
    // etcd as kubeadm runs it (client certificates required); the Secret holds the CA and
    // a client certificate of it under the manifest's key names.
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "etcd-ca");
    let client = ca.issue("rcni-node", &[]);
    let secret = pki.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::copy(&ca.pair.cert, secret.join("ca.crt")).unwrap();
    std::fs::copy(&client.cert, secret.join("tls.crt")).unwrap();
    std::fs::copy(&client.key, secret.join("tls.key")).unwrap();
    manifest.set_secret("rcni-node-etcd", &secret);
    let config = json!({"Network": CLUSTER_NET, "SubnetLen": 24, "Backend": backend.clone()});
    let mut c = Cluster::with_tls_etcd(&config, &ca, &client);
    let pause = build_pause_image(c.sb.dir());
    let mut agents = Vec::new();
    let mut to_ready = Vec::new();
    for _ in 0..3 {
        let (started, took) = add_daemonset_node(&mut c, &manifest, &pause);
        agents.push(started);
        to_ready.push(took);
    }
    eprintln!("DaemonSet pod start -> NetworkReady ({backend}): {to_ready:?}");
    assert!(wait_converged(&c), "agents did not converge on {backend}");

    let mut pods = Vec::new();
    let mut latencies = Vec::new();
    for i in 0..c.nodes.len() {
        let begun = Instant::now();
        let pod = c.run_pod(i, &PodSpec::named(&format!("web-{}", i + 1)));
        latencies.push(begun.elapsed());
        let subnet = agent_subnet(&c, i).unwrap();
        assert!(subnet.contains(&pod.ip), "{} outside {subnet}", pod.ip);
        assert!(
            leases(&c, i).contains(&pod.ip.to_string()),
            "no lease for {}",
            pod.ip
        );
        pods.push(pod);
    }
    eprintln!("RunPodSandbox with the agent from the image ({backend}): {latencies:?}");
    let talking: Vec<_> = pods.iter().map(|p| (&p.ns, p.ip)).collect();
    every_pair_talks(&talking);

    let ips: Vec<_> = pods.iter().map(|p| p.ip).collect();
    for pod in pods {
        c.remove_pod(pod);
    }
    for (i, agent) in agents.iter().enumerate() {
        let left: Vec<String> = c
            .pod_leftovers(i, &ips, &[])
            .into_iter()
            .chain(leases(&c, i).into_iter().map(|l| format!("lease {l}")))
            .filter(|l| *l != format!("sandbox {}", agent.sandbox))
            .collect();
        assert!(left.is_empty(), "node{} after teardown: {left:?}", i + 1);
    }
}

#[test]
fn daemonset_from_the_manifest_vxlan() {
    if skip() {
        return;
    }
    daemonset_cluster(json!({"Type": "vxlan"}));
}

#[test]
fn daemonset_from_the_manifest_host_gw() {
    if skip() {
        return;
    }
    daemonset_cluster(json!({"Type": "host-gw"}));
}

/// Kubernetes' `$(VAR)` rules as the manifest reader applies them (no root needed).
#[test]
fn manifest_references_expand_as_kubernetes_does() {
    use harness::manifest::expand;
    let env = vec![
        ("A".to_string(), "1".to_string()),
        ("B".to_string(), "x$(A)".to_string()),
    ];
    assert_eq!(expand("--a=$(A)", &env), "--a=1");
    assert_eq!(expand("$(A)$(B)", &env), "1x$(A)");
    assert_eq!(expand("$(UNSET) stays", &env), "$(UNSET) stays");
    assert_eq!(
        expand("$$(A) is escaped, $$ too", &env),
        "$(A) is escaped, $ too"
    );
    assert_eq!(expand("a $ b $(", &env), "a $ b $(");
    // The manifest itself: every container reference resolves on a node.
    let mut manifest = Manifest::load();
    manifest.set_secret("rcni-node-etcd", Path::new("/secret-files"));
    let pod = manifest.daemonset_pod(&NodeFields {
        node_name: "n1".into(),
        host_ip: "198.18.0.11".into(),
    });
    let agent = &pod.containers[0];
    // The etcd client certificate: flags naming the files of the Secret, mounted read-only.
    assert!(agent
        .command
        .contains(&"--etcd-certfile=/etc/rcni/etcd/tls.crt".to_string()));
    assert!(agent.mounts.contains(&(
        "/secret-files".to_string(),
        "/etc/rcni/etcd".to_string(),
        true
    )));
    assert!(agent.command.contains(&"--node-name=n1".to_string()));
    assert!(agent
        .command
        .contains(&"--public-ip=198.18.0.11".to_string()));
    assert!(
        !agent.command.iter().any(|w| w.contains("$(")),
        "{:?}",
        agent.command
    );
}
