//! A pod sandbox attached to several networks (the go-cni layer; containerd's
//! `setupPodNetwork`): interface names `eth0`, `net1`, `net2`, ..., an optional built-in
//! loopback network on `lo`, serial or parallel setup, teardown of everything, and results
//! merged per interface. A failed setup tears down the networks already attached.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use cni_types::{CniResult, Dns, IpConfig, Route};

use crate::attachment::Attachment;
use crate::error::RuntimeError;
use crate::network::Network;
use crate::runtime::Runtime;

/// One network of the sandbox and the interface it gets.
#[derive(Debug, Clone)]
pub struct Member {
    pub network: Network,
    pub ifname: String,
}

/// The networks a sandbox is attached to, in attach order.
#[derive(Debug, Clone, Default)]
pub struct SandboxNetworks {
    members: Vec<Member>,
}

/// How [`SandboxNetworks::setup`] runs the networks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetupMode {
    #[default]
    Serial,
    /// One thread per network (different networks never share plugin state by contract).
    Parallel,
}

/// The per-sandbox attachment parameters shared by all networks.
#[derive(Debug, Clone, Default)]
pub struct SandboxRequest {
    pub container_id: String,
    pub netns: PathBuf,
    pub args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
}

impl SandboxRequest {
    fn attachment(&self, ifname: &str) -> Attachment {
        Attachment {
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: ifname.to_string(),
            args: self.args.clone(),
            capability_args: self.capability_args.clone(),
        }
    }
}

/// What one interface of the sandbox got (go-cni's per-interface `Config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceConfig {
    pub ip_configs: Vec<IpConfig>,
    pub mac: String,
    pub sandbox: String,
    pub pci_id: String,
    pub socket_path: String,
}

/// One network's result.
#[derive(Debug, Clone)]
pub struct NetworkResult {
    pub network: String,
    pub ifname: String,
    pub result: CniResult,
}

/// All results of a sandbox, merged per interface name.
#[derive(Debug, Clone, Default)]
pub struct SandboxResult {
    pub interfaces: BTreeMap<String, InterfaceConfig>,
    pub dns: Vec<Dns>,
    pub routes: Vec<Route>,
    pub results: Vec<NetworkResult>,
}

impl SandboxResult {
    fn merge(results: Vec<NetworkResult>) -> SandboxResult {
        let mut merged = SandboxResult::default();
        for nr in &results {
            let r = &nr.result;
            for iface in &r.interfaces {
                let entry = merged.interfaces.entry(iface.name.clone()).or_default();
                entry.mac = iface.mac.clone();
                entry.sandbox = iface.sandbox.clone();
                entry.pci_id = iface.pci_id.clone();
                entry.socket_path = iface.socket_path.clone();
            }
            for ip in &r.ips {
                let owner = ip
                    .interface
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| r.interfaces.get(i))
                    .map(|i| i.name.clone())
                    // An IP without a valid interface index belongs to the attachment's ifname.
                    .unwrap_or_else(|| nr.ifname.clone());
                merged
                    .interfaces
                    .entry(owner)
                    .or_default()
                    .ip_configs
                    .push(ip.clone());
            }
            merged.routes.extend(r.routes.iter().cloned());
            if !r.dns.is_empty() {
                merged.dns.push(r.dns.clone());
            }
        }
        merged.results = results;
        merged
    }

    /// The container-side addresses of interface `ifname`.
    pub fn ips_of(&self, ifname: &str) -> Vec<&IpConfig> {
        self.interfaces
            .get(ifname)
            .map(|c| c.ip_configs.iter().collect())
            .unwrap_or_default()
    }
}

/// The interface name of the `index`-th non-loopback network: `eth0`, `net1`, `net2`, ...
pub fn default_ifname(index: usize) -> String {
    if index == 0 {
        "eth0".to_string()
    } else {
        format!("net{index}")
    }
}

impl SandboxNetworks {
    /// `networks` on `eth0`, `net1`, ...; with `loopback`, the built-in `cni-loopback` network
    /// on `lo` comes first.
    pub fn new(networks: Vec<Network>, loopback: bool) -> Self {
        let mut members = Vec::new();
        if loopback {
            members.push(Member {
                network: Network::loopback(),
                ifname: "lo".into(),
            });
        }
        members.extend(networks.into_iter().enumerate().map(|(i, network)| Member {
            network,
            ifname: default_ifname(i),
        }));
        SandboxNetworks { members }
    }

    /// Explicit network/interface pairs, in attach order.
    pub fn from_members(members: Vec<Member>) -> Self {
        SandboxNetworks { members }
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// ADD every network. On a failure, the networks already attached are torn down (the
    /// failing one was already rolled back by [`Runtime::add`]) and the error is returned.
    pub fn setup(
        &self,
        rt: &Runtime,
        req: &SandboxRequest,
        mode: SetupMode,
    ) -> Result<SandboxResult, RuntimeError> {
        let outcomes: Vec<Result<CniResult, RuntimeError>> = match mode {
            SetupMode::Serial => {
                let mut out = Vec::new();
                for m in &self.members {
                    let r = rt.add(&m.network, &req.attachment(&m.ifname));
                    let failed = r.is_err();
                    out.push(r);
                    if failed {
                        break;
                    }
                }
                out
            }
            SetupMode::Parallel => std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .members
                    .iter()
                    .map(|m| s.spawn(move || rt.add(&m.network, &req.attachment(&m.ifname))))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(RuntimeError::Internal(
                                "network setup thread panicked".into(),
                            ))
                        })
                    })
                    .collect()
            }),
        };
        let mut attached = Vec::new();
        let mut failures = Vec::new();
        for (m, outcome) in self.members.iter().zip(outcomes) {
            match outcome {
                Ok(result) => attached.push(NetworkResult {
                    network: m.network.name().to_string(),
                    ifname: m.ifname.clone(),
                    result,
                }),
                Err(e) => failures.push(wrap(m, e)),
            }
        }
        if failures.is_empty() {
            return Ok(SandboxResult::merge(attached));
        }
        let mut rollback = Vec::new();
        for done in attached.iter().rev() {
            if let Some(m) = self
                .members
                .iter()
                .find(|m| m.ifname == done.ifname && m.network.name() == done.network)
            {
                if let Err(e) = rt.del(&m.network, &req.attachment(&m.ifname)) {
                    rollback.push(wrap(m, e));
                }
            }
        }
        let original = if failures.len() == 1 {
            failures.remove(0)
        } else {
            RuntimeError::Multiple(failures)
        };
        Err(RuntimeError::RolledBack {
            original: Box::new(original),
            rollback,
        })
    }

    /// DEL every network in reverse order, with the arguments cached at ADD time. Keeps going
    /// after errors and reports them all; DEL is idempotent, so this can be repeated.
    pub fn teardown(&self, rt: &Runtime, req: &SandboxRequest) -> Result<(), RuntimeError> {
        let errors: Vec<RuntimeError> = self
            .members
            .iter()
            .rev()
            .filter_map(|m| {
                rt.del_with_cached_args(&m.network, &req.attachment(&m.ifname))
                    .err()
                    .map(|e| wrap(m, e))
            })
            .collect();
        match errors.len() {
            0 => Ok(()),
            _ => Err(RuntimeError::Multiple(errors)),
        }
    }

    /// CHECK every network in order, stopping at the first failure. Networks whose version has
    /// no CHECK (below 0.4.0, such as the built-in loopback) are skipped.
    pub fn check(&self, rt: &Runtime, req: &SandboxRequest) -> Result<(), RuntimeError> {
        for m in self
            .members
            .iter()
            .filter(|m| m.network.version.allows_check())
        {
            rt.check(&m.network, &req.attachment(&m.ifname))
                .map_err(|e| wrap(m, e))?;
        }
        Ok(())
    }
}

fn wrap(m: &Member, e: RuntimeError) -> RuntimeError {
    RuntimeError::Network {
        network: m.network.name().to_string(),
        ifname: m.ifname.clone(),
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        assert_eq!(default_ifname(0), "eth0");
        assert_eq!(default_ifname(1), "net1");
        assert_eq!(default_ifname(2), "net2");
        let n = Network::from_list_bytes(
            br#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"p"}]}"#,
        )
        .unwrap();
        let s = SandboxNetworks::new(vec![n.clone(), n], true);
        let names: Vec<&str> = s.members().iter().map(|m| m.ifname.as_str()).collect();
        assert_eq!(names, ["lo", "eth0", "net1"]);
        assert_eq!(s.members()[0].network.name(), "cni-loopback");
    }

    #[test]
    fn merge_per_interface() {
        let r = CniResult::from_slice(
            br#"{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:aa:aa:aa:aa:aa"},{"name":"eth0","mac":"bb:bb:bb:bb:bb:bb","sandbox":"/run/netns/x"}],
                "ips":[{"address":"198.18.0.2/24","interface":1},{"address":"198.18.0.3/24"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["198.19.0.53"]}}"#,
            cni_types::SpecVersion::V1_0_0,
        )
        .unwrap();
        let merged = SandboxResult::merge(vec![NetworkResult {
            network: "a".into(),
            ifname: "eth0".into(),
            result: r,
        }]);
        assert_eq!(merged.ips_of("eth0").len(), 2);
        assert_eq!(merged.interfaces["eth0"].sandbox, "/run/netns/x");
        assert_eq!(merged.interfaces["cni0"].ip_configs.len(), 0);
        assert_eq!(merged.routes.len(), 1);
        assert_eq!(merged.dns.len(), 1);
    }
}
