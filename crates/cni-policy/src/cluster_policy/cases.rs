//! The ClusterNetworkPolicy conformance cases as data (`testdata/cluster-network-policy/`):
//! the upstream suite's cases (kubernetes-sigs/network-policy-api `conformance/tests/*.go` and
//! the manifests of `conformance/base/`) and rcni's own, each a list of steps that change the
//! objects and probe connections with an expected outcome. The same data drives the reference
//! evaluator here and the multi-node dataplane tests, which assign their own addresses.
//!
//! The files (their format is in the directory's README.md): `model.yaml` (nodes, namespaces,
//! pods, the ports they serve), `manifests/*.yaml` (the objects a case starts from) and
//! `cases/*.yaml`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::cluster::{Cluster, Pod, Protocol};
use crate::effective::Endpoint;
use crate::objects::{parse_documents, Document};
use crate::selector::Labels;

use super::evaluate::Evaluator;
use super::nodes::{nodes, LeasedNode, Node};

/// Where the data is.
pub const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/cluster-network-policy"
);

/// Why a case cannot be read or run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CaseError(String);

fn fail(message: impl Into<String>) -> CaseError {
    CaseError(message.into())
}

/// The nodes, namespaces and pods every case starts with.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    pub nodes: Vec<ModelNode>,
    pub namespaces: Vec<ModelNamespace>,
    pub pods: Vec<ModelPod>,
    /// The container port names of every pod outside the host network.
    pub named_ports: BTreeMap<String, ModelPort>,
    /// The ports host-network pods serve.
    pub host_network_ports: Vec<u16>,
    /// Addresses outside the cluster that probes reach (a server on no node).
    #[serde(default)]
    pub externals: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelNode {
    pub name: String,
    #[serde(default)]
    pub labels: Labels,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelNamespace {
    pub name: String,
    #[serde(default)]
    pub labels: Labels,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelPod {
    pub name: String,
    pub namespace: String,
    #[serde(default)]
    pub labels: Labels,
    pub node: String,
    /// In its node's network namespace: its address is the node's.
    #[serde(default)]
    pub host_network: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPort {
    #[serde(deserialize_with = "protocol")]
    pub protocol: Protocol,
    pub port: u16,
}

/// The upstream suite's optional features a case needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Feature {
    /// `destinationNamedPort` (upstream `ClusterNetworkPolicyNamedPorts`).
    NamedPorts,
    /// `nodes` peers (upstream `ClusterNetworkPolicyEgressNodePeers`).
    EgressNodePeers,
}

/// One case: objects to start from, then steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The upstream `ShortName`, or rcni's name for its own cases.
    pub name: String,
    /// The upstream test file this case ports, if any.
    #[serde(default)]
    pub upstream: Option<String>,
    #[serde(default)]
    pub features: Vec<Feature>,
    /// Files of `manifests/` applied first.
    #[serde(default)]
    pub manifests: Vec<String>,
    /// More objects applied after them.
    #[serde(default)]
    pub objects: Vec<Value>,
    pub steps: Vec<Step>,
    /// The file it was read from.
    #[serde(skip)]
    pub file: PathBuf,
}

/// Changes, then probes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    #[serde(default)]
    pub changes: Vec<Change>,
    pub probes: Vec<Probe>,
}

/// A change between steps, as the upstream tests make them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Change {
    /// Exchange two items of a list of a ClusterNetworkPolicy (reordering its rules).
    Swap {
        policy: String,
        list: String,
        items: [usize; 2],
    },
    /// Set a field of a ClusterNetworkPolicy (`spec.priority`, `spec.ingress.0.action`).
    Set {
        policy: String,
        path: String,
        value: Value,
    },
    /// Insert an item into a list of a ClusterNetworkPolicy.
    Insert {
        policy: String,
        list: String,
        at: usize,
        value: Value,
    },
    /// Delete an object.
    Delete {
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        name: String,
    },
    /// Replace a namespace's labels (its name label stays, as Kubernetes keeps it).
    LabelNamespace { name: String, labels: Labels },
    /// Create or replace objects.
    Apply(Vec<Value>),
    /// Start a pod.
    AddPod(ModelPod),
}

/// A connection and whether it must connect (`connect`) or be dropped (`drop`: the upstream
/// suite fails a refused connection where it expects a drop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// A pod, node or external name.
    pub from: String,
    pub to: String,
    pub protocol: Protocol,
    pub port: u16,
    pub connect: bool,
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = if self.connect { "connect" } else { "drop" };
        write!(
            f,
            "{} -> {} {}/{} {outcome}",
            self.from, self.to, self.protocol, self.port
        )
    }
}

impl std::str::FromStr for Probe {
    type Err = CaseError;

    /// `FROM -> TO PROTOCOL/PORT connect|drop`.
    fn from_str(s: &str) -> Result<Probe, CaseError> {
        let bad = || fail(format!("{s:?}: not FROM -> TO PROTOCOL/PORT connect|drop"));
        let words: Vec<&str> = s.split_whitespace().collect();
        let [from, "->", to, traffic, outcome] = words.as_slice() else {
            return Err(bad());
        };
        let (protocol, port) = traffic.split_once('/').ok_or_else(bad)?;
        Ok(Probe {
            from: from.to_string(),
            to: to.to_string(),
            protocol: Protocol::parse(protocol).ok_or_else(bad)?,
            port: port.parse().map_err(|_| bad())?,
            connect: match *outcome {
                "connect" => true,
                "drop" => false,
                _ => return Err(bad()),
            },
        })
    }
}

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Probe, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn protocol<'de, D: Deserializer<'de>>(d: D) -> Result<Protocol, D::Error> {
    let s = String::deserialize(d)?;
    Protocol::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("{s:?}: not a protocol")))
}

fn read_yaml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, CaseError> {
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("{path:?}: {e}")))?;
    from_yaml(&text).map_err(|e| fail(format!("{path:?}: {e}")))
}

/// `text` read as YAML into `T`; through JSON's data model, where an enum is a map of one key
/// (`swap: {...}`) rather than a YAML tag.
pub fn from_yaml<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, CaseError> {
    let value: Value = serde_norway::from_str(text).map_err(|e| fail(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| fail(e.to_string()))
}

/// The model of `DIR/model.yaml`.
pub fn model() -> Result<Model, CaseError> {
    read_yaml(&Path::new(DIR).join("model.yaml"))
}

/// Every case of `DIR/cases/`, by file name.
pub fn cases() -> Result<Vec<Case>, CaseError> {
    let dir = Path::new(DIR).join("cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| fail(format!("{dir:?}: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let mut case: Case = read_yaml(&file)?;
            case.file = file;
            Ok(case)
        })
        .collect()
}

/// The addresses of a run: every pod outside the host network, node and external by name (a
/// host-network pod's is its node's).
#[derive(Debug, Clone, Default)]
pub struct Addresses(pub BTreeMap<String, IpAddr>);

impl Addresses {
    /// The evaluator's plan: nodes 198.19.0.N, externals 198.19.200.N, pods 198.18.N.M by
    /// namespace and order.
    pub fn reference(model: &Model, pods: &[ModelPod]) -> Addresses {
        let mut out = BTreeMap::new();
        for (i, node) in model.nodes.iter().enumerate() {
            out.insert(node.name.clone(), v4(198, 19, 0, i + 1));
        }
        for (i, name) in model.externals.iter().enumerate() {
            out.insert(name.clone(), v4(198, 19, 200, i + 1));
        }
        let mut per_namespace: BTreeMap<&str, usize> = BTreeMap::new();
        for pod in pods.iter().filter(|p| !p.host_network) {
            let ns_index = model
                .namespaces
                .iter()
                .position(|n| n.name == pod.namespace)
                .unwrap_or(model.namespaces.len());
            let n = per_namespace.entry(&pod.namespace).or_default();
            *n += 1;
            out.insert(pod.name.clone(), v4(198, 18, ns_index, *n + 9));
        }
        Addresses(out)
    }

    /// The address of `name` (a host-network pod has its node's).
    pub fn of(&self, state: &State, name: &str) -> Option<IpAddr> {
        match state.pods.iter().find(|p| p.name == name) {
            Some(p) if p.host_network => self.0.get(&p.node).copied(),
            _ => self.0.get(name).copied(),
        }
    }
}

fn v4(a: u8, b: u8, c: usize, d: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c as u8, d as u8))
}

/// The objects, namespace labels and pods of a case at one step.
#[derive(Debug, Clone)]
pub struct State {
    /// Every object, as written (placeholders `{{cidr NAME}}` not yet replaced).
    pub objects: Vec<Value>,
    pub namespaces: BTreeMap<String, Labels>,
    pub pods: Vec<ModelPod>,
}

impl State {
    /// The start of `case`: the model's namespaces and pods, the case's manifests and objects.
    pub fn new(model: &Model, case: &Case) -> Result<State, CaseError> {
        let mut objects = Vec::new();
        for file in &case.manifests {
            let path = Path::new(DIR).join("manifests").join(file);
            let text =
                std::fs::read_to_string(&path).map_err(|e| fail(format!("{path:?}: {e}")))?;
            for doc in serde_norway::Deserializer::from_str(&text) {
                let value = Value::deserialize(doc).map_err(|e| fail(format!("{path:?}: {e}")))?;
                objects.push(value);
            }
        }
        let mut state = State {
            objects: Vec::new(),
            namespaces: model
                .namespaces
                .iter()
                .map(|n| (n.name.clone(), n.labels.clone()))
                .collect(),
            pods: model.pods.clone(),
        };
        state.put(objects.into_iter().chain(case.objects.iter().cloned()));
        Ok(state)
    }

    /// Creates or replaces `objects` (by kind, namespace and name).
    fn put(&mut self, objects: impl IntoIterator<Item = Value>) {
        for object in objects {
            let id = identity(&object);
            match self.objects.iter_mut().find(|o| identity(o) == id) {
                Some(old) => *old = object,
                None => self.objects.push(object),
            }
        }
    }

    fn policy(&mut self, name: &str) -> Result<&mut Value, CaseError> {
        self.objects
            .iter_mut()
            .find(|o| o["kind"] == "ClusterNetworkPolicy" && o["metadata"]["name"] == name)
            .ok_or_else(|| fail(format!("no ClusterNetworkPolicy {name:?}")))
    }

    /// Makes `change`.
    pub fn apply(&mut self, change: &Change) -> Result<(), CaseError> {
        match change {
            Change::Swap {
                policy,
                list,
                items,
            } => {
                let array = array_at(self.policy(policy)?, list)?;
                if items.iter().any(|&i| i >= array.len()) {
                    return Err(fail(format!("{list} has no item {items:?}")));
                }
                array.swap(items[0], items[1]);
            }
            Change::Set {
                policy,
                path,
                value,
            } => *value_at(self.policy(policy)?, path)? = value.clone(),
            Change::Insert {
                policy,
                list,
                at,
                value,
            } => {
                let array = array_at(self.policy(policy)?, list)?;
                if *at > array.len() {
                    return Err(fail(format!("{list} has fewer than {at} items")));
                }
                array.insert(*at, value.clone());
            }
            Change::Delete {
                kind,
                namespace,
                name,
            } => {
                let id = (kind.clone(), namespace.clone(), name.clone());
                let before = self.objects.len();
                self.objects.retain(|o| identity(o) != id);
                if self.objects.len() == before {
                    return Err(fail(format!("no {kind} {name:?} to delete")));
                }
            }
            Change::LabelNamespace { name, labels } => {
                self.namespaces.insert(name.clone(), labels.clone());
            }
            Change::Apply(objects) => self.put(objects.iter().cloned()),
            Change::AddPod(pod) => self.pods.push(pod.clone()),
        }
        Ok(())
    }

    /// The objects with their placeholders replaced from `addresses`, read as documents.
    pub fn documents(&self, addresses: &Addresses) -> Result<Vec<Document>, CaseError> {
        let mut out = Vec::new();
        for object in &self.objects {
            let object = substitute(object, &|name| addresses.of(self, name))?;
            let text = serde_json::to_string(&object).map_err(|e| fail(e.to_string()))?;
            out.extend(parse_documents(&text).map_err(|e| fail(e.to_string()))?);
        }
        Ok(out)
    }
}

/// `(kind, namespace, name)` of an object.
fn identity(o: &Value) -> (String, Option<String>, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let ns = o["metadata"]["namespace"].as_str().map(str::to_string);
    (s(&o["kind"]), ns, s(&o["metadata"]["name"]))
}

/// The value at a dotted `path` (`spec.ingress.0.action`; numbers index lists).
fn value_at<'v>(mut v: &'v mut Value, path: &str) -> Result<&'v mut Value, CaseError> {
    for part in path.split('.') {
        v = match (part.parse::<usize>(), v) {
            (Ok(i), Value::Array(items)) => items
                .get_mut(i)
                .ok_or_else(|| fail(format!("{path}: no item {i}")))?,
            (_, Value::Object(fields)) => fields.entry(part).or_insert(Value::Null),
            _ => {
                return Err(fail(format!(
                    "{path}: {part:?} is not in an object or list"
                )))
            }
        };
    }
    Ok(v)
}

fn array_at<'v>(v: &'v mut Value, path: &str) -> Result<&'v mut Vec<Value>, CaseError> {
    value_at(v, path)?
        .as_array_mut()
        .ok_or_else(|| fail(format!("{path} is not a list")))
}

/// `value` with every `{{cidr NAME}}` string replaced by the address of NAME as a host CIDR.
fn substitute(value: &Value, address: &dyn Fn(&str) -> Option<IpAddr>) -> Result<Value, CaseError> {
    Ok(match value {
        Value::String(s) => match s.strip_prefix("{{cidr ").and_then(|r| r.strip_suffix("}}")) {
            Some(name) => {
                let ip = address(name).ok_or_else(|| fail(format!("no address for {name:?}")))?;
                let bits = if ip.is_ipv4() { 32 } else { 128 };
                Value::String(format!("{ip}/{bits}"))
            }
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| substitute(i, address))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), substitute(v, address)?)))
                .collect::<Result<_, CaseError>>()?,
        ),
        other => other.clone(),
    })
}

/// A probe whose outcome is not the expected one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub step: String,
    pub probe: Probe,
    /// How the evaluator decided, in words.
    pub why: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {:?}: {} ({})", self.step, self.probe, self.why)
    }
}

/// Runs `case` against the reference evaluator: every probe whose verdict differs.
pub fn run_on_evaluator(model: &Model, case: &Case) -> Result<Vec<Mismatch>, CaseError> {
    let mut state = State::new(model, case)?;
    let mut mismatches = Vec::new();
    for step in &case.steps {
        for change in &step.changes {
            state.apply(change)?;
        }
        let addresses = Addresses::reference(model, &state.pods);
        let world = World::build(model, &state, &addresses)?;
        let evaluator = Evaluator::new(&world.cluster, &world.policies, &world.nodes)
            .map_err(|e| fail(e.to_string()))?;
        for probe in &step.probes {
            let src = world.endpoint(&state, &addresses, &probe.from)?;
            let dst = world.endpoint(&state, &addresses, &probe.to)?;
            let verdict = evaluator
                .connection(src, dst, probe.protocol, probe.port)
                .map_err(|e| fail(e.to_string()))?;
            if verdict.allowed != probe.connect {
                let why = [verdict.egress, verdict.ingress]
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        let verb = if d.allowed { "allowed" } else { "denied" };
                        format!("{:?} {verb} by {:?}", d.direction, d.by)
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                mismatches.push(Mismatch {
                    step: step.name.clone(),
                    probe: probe.clone(),
                    why,
                });
            }
        }
    }
    Ok(mismatches)
}

/// What the evaluator is given at one step.
struct World {
    cluster: Cluster,
    policies: Vec<super::ClusterNetworkPolicy>,
    nodes: Vec<Node>,
}

impl World {
    fn build(model: &Model, state: &State, addresses: &Addresses) -> Result<World, CaseError> {
        let named_ports: BTreeMap<String, (Protocol, u16)> = model
            .named_ports
            .iter()
            .map(|(n, p)| (n.clone(), (p.protocol, p.port)))
            .collect();
        let mut cluster = Cluster {
            namespaces: state.namespaces.clone(),
            ..Cluster::default()
        };
        for pod in state.pods.iter().filter(|p| !p.host_network) {
            let ip = addresses
                .of(state, &pod.name)
                .ok_or_else(|| fail(format!("no address for pod {:?}", pod.name)))?;
            cluster.pods.push(Pod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                labels: pod.labels.clone(),
                ips: vec![ip],
                named_ports: named_ports.clone(),
            });
        }
        let mut policies = Vec::new();
        // The model's node labels first: stored Node objects are added over them.
        let mut objects: Vec<NodeObject> = model
            .nodes
            .iter()
            .map(|n| NodeObject {
                metadata: ObjectMeta {
                    name: Some(n.name.clone()),
                    labels: Some(n.labels.clone()),
                    ..ObjectMeta::default()
                },
                ..NodeObject::default()
            })
            .collect();
        for doc in state.documents(addresses)? {
            match doc {
                Document::NetworkPolicy(p) => cluster.policies.push(*p),
                Document::Namespace(n) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let labels = n.metadata.labels.clone().unwrap_or_default();
                    cluster.namespaces.insert(name, labels);
                }
                Document::ClusterNetworkPolicy(p) => policies.push(*p),
                Document::Node(n) => objects.push(*n),
            }
        }
        let leases: Vec<LeasedNode> = model
            .nodes
            .iter()
            .map(|n| LeasedNode {
                name: n.name.clone(),
                addresses: addresses.0.get(&n.name).copied().into_iter().collect(),
            })
            .collect();
        Ok(World {
            cluster,
            policies,
            nodes: nodes(&leases, &objects),
        })
    }

    /// The probe end `name`: a pod of the cluster, or the address of a host-network pod, a
    /// node or an external.
    fn endpoint(
        &self,
        state: &State,
        addresses: &Addresses,
        name: &str,
    ) -> Result<Endpoint<'_>, CaseError> {
        if let Some(pod) = self.cluster.pods.iter().find(|p| p.name == name) {
            return Ok(Endpoint::Pod(pod));
        }
        addresses
            .of(state, name)
            .map(Endpoint::External)
            .ok_or_else(|| fail(format!("{name:?} is no pod, node or external")))
    }
}

#[cfg(test)]
mod tests;
