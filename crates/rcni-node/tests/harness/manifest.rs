//! `deploy/rcni-node.yaml` read the way kubelet turns a DaemonSet's pod template into CRI
//! calls: the containers' image, command, args and env (ConfigMap keys and downward-API fields
//! resolved, then `$(VAR)` references expanded) and their hostPath and Secret mounts (a Secret
//! is a directory of files the test gives). Only what the
//! manifest uses is supported; anything else panics naming it, so a change to the manifest
//! that the test cannot run as written fails loudly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::cri::ContainerSpec;

/// The manifest in the repository.
pub fn path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rcni-node.yaml")
}

/// What the downward API gives a pod on one node.
pub struct NodeFields {
    pub node_name: String,
    pub host_ip: String,
}

/// A hostPath volume: the path on the node and kubelet's check or creation of it.
#[derive(Debug, Clone)]
pub struct HostPath {
    pub path: String,
    /// `DirectoryOrCreate`, `Socket`, ... (empty: no check).
    pub kind: String,
}

/// The DaemonSet's pod as one node runs it.
pub struct DaemonSetPod {
    pub name: String,
    pub namespace: String,
    pub host_network: bool,
    pub init_containers: Vec<ContainerSpec>,
    pub containers: Vec<ContainerSpec>,
    /// Every hostPath volume the pod mounts.
    pub host_paths: Vec<HostPath>,
}

/// The manifest's documents (ConfigMap and DaemonSet), and the directories standing for the
/// Secrets its volumes name (kubelet writes a Secret's keys as files in a directory).
pub struct Manifest {
    docs: Vec<Value>,
    secrets: BTreeMap<String, PathBuf>,
}

impl Manifest {
    pub fn load() -> Manifest {
        let text = std::fs::read_to_string(path()).expect("read deploy/rcni-node.yaml");
        let docs = serde_norway::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).expect("deploy/rcni-node.yaml is valid YAML"))
            .filter(|doc| !doc.is_null())
            .collect();
        Manifest {
            docs,
            secrets: BTreeMap::new(),
        }
    }

    /// The Secret `name` holds the files of `dir` (as the operator created it).
    pub fn set_secret(&mut self, name: &str, dir: &Path) {
        self.secrets.insert(name.to_string(), dir.to_path_buf());
    }

    fn kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.docs.iter().filter(move |d| d["kind"] == kind)
    }

    /// Sets key `key` of ConfigMap `name`, as an operator edits it before applying.
    pub fn set_config(&mut self, name: &str, key: &str, value: &str) {
        let map = self
            .docs
            .iter_mut()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no ConfigMap {name} in the manifest"));
        assert!(
            map["data"].get(key).is_some(),
            "ConfigMap {name} has no key {key}"
        );
        map["data"][key] = Value::String(value.to_string());
    }

    fn config_value(&self, name: &str, key: &str) -> String {
        self.kind("ConfigMap")
            .find(|d| d["metadata"]["name"] == name)
            .and_then(|d| d["data"][key].as_str())
            .unwrap_or_else(|| panic!("ConfigMap {name} has no key {key}"))
            .to_string()
    }

    /// The pod of the (only) DaemonSet on the node described by `node`.
    pub fn daemonset_pod(&self, node: &NodeFields) -> DaemonSetPod {
        let mut sets = self.kind("DaemonSet");
        let set = sets.next().expect("a DaemonSet in the manifest");
        assert!(sets.next().is_none(), "one DaemonSet in the manifest");
        let spec = &set["spec"]["template"]["spec"];
        let volumes = self.volumes(spec);
        let containers = |field: &str| -> Vec<ContainerSpec> {
            let list = spec[field].as_array().cloned().unwrap_or_default();
            list.iter()
                .map(|c| self.container(c, node, &volumes))
                .collect()
        };
        DaemonSetPod {
            name: text(&set["metadata"]["name"]),
            namespace: text(&set["metadata"]["namespace"]),
            host_network: spec["hostNetwork"] == true,
            init_containers: containers("initContainers"),
            containers: containers("containers"),
            host_paths: volumes.into_values().collect(),
        }
    }

    fn container(
        &self,
        c: &Value,
        node: &NodeFields,
        volumes: &BTreeMap<String, HostPath>,
    ) -> ContainerSpec {
        let env = self.env(c, node);
        let expand_all = |field: &str| -> Vec<String> {
            let list = c[field].as_array().cloned().unwrap_or_default();
            list.iter().map(|w| expand(&text(w), &env)).collect()
        };
        let mounts = c["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let name = text(&m["name"]);
                let volume = volumes
                    .get(&name)
                    .unwrap_or_else(|| panic!("no volume {name}"));
                let readonly = m["readOnly"] == true;
                (volume.path.clone(), text(&m["mountPath"]), readonly)
            })
            .collect();
        ContainerSpec {
            name: text(&c["name"]),
            image: text(&c["image"]),
            command: expand_all("command"),
            args: expand_all("args"),
            env,
            mounts,
            privileged: c["securityContext"]["privileged"] == true,
        }
    }

    /// The container's environment in order, each value resolved as kubelet does.
    fn env(&self, c: &Value, node: &NodeFields) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        for var in c["env"].as_array().cloned().unwrap_or_default() {
            let name = text(&var["name"]);
            let from = &var["valueFrom"];
            let value = if let Some(value) = var["value"].as_str() {
                expand(value, &env)
            } else if !from["configMapKeyRef"].is_null() {
                let map = &from["configMapKeyRef"];
                self.config_value(&text(&map["name"]), &text(&map["key"]))
            } else {
                match from["fieldRef"]["fieldPath"].as_str() {
                    Some("spec.nodeName") => node.node_name.clone(),
                    // A hostNetwork pod's IP is its node's.
                    Some("status.hostIP" | "status.podIP") => node.host_ip.clone(),
                    other => panic!("env {name}: unsupported source {other:?} ({var})"),
                }
            };
            env.push((name, value));
        }
        env
    }
}

impl Manifest {
    /// The volumes of a pod spec as host paths, by name: hostPath volumes as written, Secret
    /// volumes as the directory given for the Secret (kind `Secret`).
    fn volumes(&self, spec: &Value) -> BTreeMap<String, HostPath> {
        let mut volumes = BTreeMap::new();
        for v in spec["volumes"].as_array().cloned().unwrap_or_default() {
            let name = text(&v["name"]);
            let (host, secret) = (&v["hostPath"], &v["secret"]);
            let volume = if !host.is_null() {
                HostPath {
                    path: text(&host["path"]),
                    kind: host["type"].as_str().unwrap_or_default().to_string(),
                }
            } else if !secret.is_null() {
                let secret_name = text(&secret["secretName"]);
                let dir = self.secrets.get(&secret_name).unwrap_or_else(|| {
                    panic!("volume {name}: the test gave no files for Secret {secret_name}")
                });
                HostPath {
                    path: dir.display().to_string(),
                    kind: "Secret".into(),
                }
            } else {
                panic!("volume {name} is neither hostPath nor secret");
            };
            volumes.insert(name, volume);
        }
        volumes
    }
}

fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
        .to_string()
}

/// Kubernetes' expansion of `$(VAR)` in command, args and env values: a defined variable is
/// replaced, an undefined reference stays as written, `$$` is a literal `$`.
pub fn expand(input: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(reference) = after
            .strip_prefix('(')
            .and_then(|r| Some((r, r.find(')')?)))
        {
            let (body, close) = reference;
            let name = &body[..close];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, value)) => out.push_str(value),
                None => out.push_str(&rest[at..at + 3 + close]),
            }
            rest = &body[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
