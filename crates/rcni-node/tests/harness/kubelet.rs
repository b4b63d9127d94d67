//! Pods made the way kubelet makes them: a containerd per node ([`super::containerd`]) whose
//! CRI plugin runs the node's CNI plugins with the conflist the node's agent wrote, and CRI
//! calls ([`super::cri`]) for each sandbox.

use std::net::Ipv4Addr;
use std::time::Duration;

use cni_testkit::{bin_path, Netns};

use super::containerd::{build_pause_image, CniDirs, Containerd};
use super::cri::{sandbox_ipv4, CriClient, PodSpec};
use super::{wait_for, Cluster};

/// A pod sandbox made through CRI.
pub struct CriPod {
    /// The node it runs on (index into `Cluster::nodes`).
    pub node: usize,
    /// The sandbox ID containerd gave it.
    pub id: String,
    pub ip: Ipv4Addr,
    /// Its network namespace, named for the test's helpers (`ip netns attach` to the sandbox
    /// process; the name goes with the cluster's sandbox).
    pub ns: Netns,
    /// The sandbox (pause) process.
    pub pid: u32,
}

impl Cluster {
    /// A cluster of one host-gw node made by [`Cluster::add_cri_node`]; `None` (said) where
    /// containerd or its tools are missing.
    pub fn one_cri_node() -> Option<Cluster> {
        if super::containerd::skip_without_containerd() {
            return None;
        }
        let mut c = Cluster::new(serde_json::json!({"Type": "host-gw"}));
        c.add_cri_node(&[]);
        Some(c)
    }

    /// Adds a node whose agent lists its pods from a real containerd (`--cri-socket`, through
    /// a link: containerd's socket path is known once it runs), with its own libcni cache and
    /// `extra` flags besides; returns when the agent is healthy and CRI reports NetworkReady.
    /// The agent is healthy only once it has listed the runtime's pods, so containerd comes up
    /// between the agent's start and that wait.
    pub fn add_cri_node(&mut self, extra: &[&str]) -> usize {
        let i = self.add_node();
        let link = self.nodes[i].dir.join("cri.sock");
        let cache = self.nodes[i].dir.join("var-lib/cni");
        self.nodes[i].extra = vec![
            "--cri-socket".into(),
            link.display().to_string(),
            "--cni-cache-dir".into(),
            cache.display().to_string(),
        ];
        self.nodes[i]
            .extra
            .extend(extra.iter().map(|a| a.to_string()));
        let published = self.begin_agent(i);
        self.start_containerd(i);
        let containerd = self.nodes[i].containerd.as_ref().unwrap();
        std::os::unix::fs::symlink(containerd.socket(), &link).unwrap();
        self.wait_agent_started(i, published);
        let mut cri = self.cri(i);
        let ready = wait_for(Duration::from_secs(30), || {
            cri.network_ready().is_ok_and(|(ready, _)| ready)
        });
        assert!(
            ready.is_some(),
            "NetworkReady:\n{}",
            self.nodes[i].agent_log()
        );
        i
    }

    /// Starts a containerd on node `i` that runs the plugins of [`Cluster::plugins`] (plus
    /// `loopback`, which containerd attaches to every pod) with the conflists of the node's
    /// conf dir.
    pub fn start_containerd(&mut self, i: usize) {
        if self.plugins.join("loopback").symlink_metadata().is_err() {
            let binary = bin_path("rcni-plugins").expect("cargo build -p cni-plugins first");
            let linked = self.sb.link_plugins(binary, &["loopback"]).unwrap();
            assert_eq!(
                linked,
                self.plugins,
                "no loopback in {}",
                self.plugins.display()
            );
        }
        let pause = match &self.pause_image {
            Some(path) => path.clone(),
            None => {
                let path = build_pause_image(self.sb.dir());
                self.pause_image = Some(path.clone());
                path
            }
        };
        let node = &self.nodes[i];
        let conf_dir = node.conf_dir();
        std::fs::create_dir_all(&conf_dir).unwrap();
        let cni = CniDirs {
            bin_dir: &self.plugins,
            conf_dir: &conf_dir,
        };
        let containerd = Containerd::start(&node.ns.name, &node.dir, cni, &pause);
        self.nodes[i].containerd = Some(containerd);
    }

    /// A CRI client on node `i`'s containerd.
    pub fn cri(&self, i: usize) -> CriClient {
        let node = &self.nodes[i];
        let containerd = node.containerd.as_ref().expect("the node runs containerd");
        CriClient::connect(&containerd.socket(), &node.dir.join("pod-logs"))
            .unwrap_or_else(|e| panic!("CRI connect on node{}: {e:#}", node.index))
    }

    /// `RunPodSandbox` on node `i`, then `PodSandboxStatus` for its address and process; panics
    /// with containerd's error and the end of its log when the runtime refuses.
    pub fn run_pod(&self, i: usize, spec: &PodSpec) -> CriPod {
        let mut cri = self.cri(i);
        let id = cri.run_pod_sandbox(spec).unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox {} on node{}: {}\n{}",
                spec.name,
                self.nodes[i].index,
                e.message(),
                self.containerd_log_tail(i)
            )
        });
        self.pod_from_status(i, &mut cri, id)
    }

    /// The [`CriPod`] of sandbox `id` on node `i`, from its status.
    pub fn pod_from_status(&self, i: usize, cri: &mut CriClient, id: String) -> CriPod {
        let (status, info) = cri.pod_sandbox_status(&id).expect("PodSandboxStatus");
        let ip = sandbox_ipv4(&status)
            .unwrap_or_else(|| panic!("sandbox {id} has no IPv4 address: {:?}", status.network));
        let pid = info["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no pid in the sandbox info: {info}"))
            as u32;
        let ns = self.sb.attach_container(pid).unwrap();
        CriPod {
            node: i,
            id,
            ip,
            ns,
            pid,
        }
    }

    /// `StopPodSandbox` then `RemovePodSandbox`, as kubelet deletes a pod; drops the test's
    /// name for the pod's namespace.
    pub fn remove_pod(&self, pod: CriPod) {
        let mut cri = self.cri(pod.node);
        cri.stop_pod_sandbox(&pod.id).expect("StopPodSandbox");
        cri.remove_pod_sandbox(&pod.id).expect("RemovePodSandbox");
        self.sb.remove_container(&pod.ns).unwrap();
    }

    /// After a node reboot, what kubelet does with the sandboxes the runtime recovered: they
    /// must be exactly `expected` (IDs from before the reboot) and all NOTREADY; each is
    /// stopped and removed.
    pub fn remove_notready_sandboxes(&self, i: usize, expected: &[&str]) {
        let mut cri = self.cri(i);
        let listed = cri.list_pod_sandbox().unwrap();
        let mut ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
        let mut expected = expected.to_vec();
        ids.sort();
        expected.sort();
        assert_eq!(
            ids, expected,
            "containerd recovered the sandboxes of before the reboot"
        );
        for sandbox in &listed {
            assert_eq!(
                sandbox.state,
                k8s_cri::v1::PodSandboxState::SandboxNotready as i32,
                "{} after the reboot",
                sandbox.id
            );
            cri.stop_pod_sandbox(&sandbox.id)
                .unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", sandbox.id));
            cri.remove_pod_sandbox(&sandbox.id)
                .unwrap_or_else(|e| panic!("RemovePodSandbox {}: {e}", sandbox.id));
        }
    }

    /// The last 30 lines of node `i`'s containerd log.
    pub fn containerd_log_tail(&self, i: usize) -> String {
        let log = self.nodes[i]
            .containerd
            .as_ref()
            .map(Containerd::log)
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Cluster {
    /// What the pods removed from node `i` left behind there, one line per leftover: veths,
    /// host-local leases, libcni cache entries, nft rules naming one of `pod_ips` or
    /// `host_ports`, pod network namespaces in containerd's `/run/netns`, sandboxes (sorted).
    pub fn pod_leftovers(&self, i: usize, pod_ips: &[Ipv4Addr], host_ports: &[u16]) -> Vec<String> {
        let node = &self.nodes[i];
        let mut left = Vec::new();
        for link in cni_testkit::links(&node.ns.name).unwrap() {
            let is_veth = link["linkinfo"]["info_kind"] == "veth";
            if is_veth && link["ifname"] != "eth0" {
                left.push(format!("veth {}", link["ifname"]));
            }
        }
        for lease in dir_entries(&node.dir.join("state/ipam/rcni")) {
            if lease.parse::<std::net::IpAddr>().is_ok() {
                left.push(format!("host-local lease {lease}"));
            }
        }
        let containerd = node.containerd.as_ref().expect("the node runs containerd");
        for entry in dir_entries(&containerd.cni_cache().join("results")) {
            left.push(format!("libcni cache entry {entry}"));
        }
        let ruleset = super::sh(&[
            "ip",
            "netns",
            "exec",
            &node.ns.name,
            "nft",
            "list",
            "ruleset",
        ]);
        for line in ruleset.lines() {
            let names_ip = pod_ips.iter().any(|ip| mentions(line, &ip.to_string()));
            let names_port = host_ports.iter().any(|p| mentions(line, &p.to_string()));
            if names_ip || names_port {
                left.push(format!("nft rule: {}", line.trim()));
            }
        }
        let run_netns = std::path::Path::new(&format!("/proc/{}/root/run/netns", containerd.pid()))
            .to_path_buf();
        for entry in dir_entries(&run_netns) {
            left.push(format!("network namespace /run/netns/{entry}"));
        }
        for sandbox in self.cri(i).list_pod_sandbox().unwrap() {
            left.push(format!("sandbox {}", sandbox.id));
        }
        left.sort();
        left
    }
}

/// The names in `dir` (none when it does not exist).
fn dir_entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect()
}

/// Whether `text` holds `word` with no digit or dot right before or after it.
fn mentions(text: &str, word: &str) -> bool {
    let boundary = |c: Option<char>| !c.is_some_and(|c| c.is_ascii_digit() || c == '.');
    text.match_indices(word).any(|(at, _)| {
        boundary(text[..at].chars().next_back()) && boundary(text[at + word.len()..].chars().next())
    })
}
