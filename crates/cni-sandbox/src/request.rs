//! What `run` is asked for, and how it becomes the `CNI_ARGS` and capability arguments
//! containerd's CRI plugin sends (as observed with containerd 1.6).

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::SandboxError;
use crate::record::PodMeta;

/// A port mapping (`portMappings` capability), in the CNI conventions' key spelling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: String,
    /// Empty means every host address (containerd sends `""` for unset).
    #[serde(rename = "hostIP", skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

impl PortMapping {
    /// `HOST:CONTAINER[/PROTO]`, protocol `tcp` by default (`tcp`, `udp` or `sctp`).
    pub fn parse(s: &str) -> Result<PortMapping, SandboxError> {
        let bad = |why: &str| SandboxError::Invalid(format!("port mapping {s:?}: {why}"));
        let (ports, protocol) = match s.split_once('/') {
            Some((p, proto)) => (p, proto.to_ascii_lowercase()),
            None => (s, "tcp".to_string()),
        };
        if !["tcp", "udp", "sctp"].contains(&protocol.as_str()) {
            return Err(bad("protocol must be tcp, udp or sctp"));
        }
        let (host, container) = ports
            .split_once(':')
            .ok_or_else(|| bad("expected HOST:CONTAINER[/PROTO]"))?;
        let port = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad("ports are numbers from 1 to 65535")),
        };
        Ok(PortMapping {
            host_port: port(host)?,
            container_port: port(container)?,
            protocol,
            host_ip: String::new(),
        })
    }
}

/// A RunPodSandbox request.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The sandbox id; a random one when `None`.
    pub id: Option<String>,
    pub pod: PodMeta,
    /// A netns to use; `None` creates one under `/run/netns` named after the sandbox.
    pub netns: Option<PathBuf>,
    /// Network names: the first on `eth0`, then `net1`, ...; empty means the default
    /// network (the first config file of the conf dir).
    pub networks: Vec<String>,
    pub port_mappings: Vec<PortMapping>,
    /// Further capability arguments (`bandwidth`, `ips`, `mac`, `dns`, ...).
    pub capability_args: Map<String, Value>,
    /// `CNI_ARGS` pairs appended after containerd's.
    pub extra_args: Vec<(String, String)>,
}

/// containerd's `CNI_ARGS` for a pod, then `extra`. Values with `;` or `=` would be split
/// differently by every plugin, so they are refused.
pub fn cni_args(
    pod: &PodMeta,
    id: &str,
    extra: &[(String, String)],
) -> Result<Vec<(String, String)>, SandboxError> {
    let pairs = [
        ("IgnoreUnknown", "1"),
        ("K8S_POD_NAMESPACE", pod.namespace.as_str()),
        ("K8S_POD_NAME", pod.name.as_str()),
        ("K8S_POD_INFRA_CONTAINER_ID", id),
        ("K8S_POD_UID", pod.uid.as_str()),
    ];
    pairs
        .iter()
        .map(|(k, v)| (*k, *v))
        .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|(k, v)| {
            if v.is_empty() || v.contains([';', '=']) || v.chars().any(char::is_control) {
                Err(SandboxError::Invalid(format!(
                    "{k} {v:?} must be non-empty, without ';', '=' or control characters"
                )))
            } else {
                Ok((k.to_string(), v.to_string()))
            }
        })
        .collect()
}

/// The capability arguments: `portMappings` from the port list, then the others.
pub fn capability_args(req: &RunRequest) -> Result<Map<String, Value>, SandboxError> {
    let mut caps = req.capability_args.clone();
    if !req.port_mappings.is_empty() {
        if caps.contains_key("portMappings") {
            return Err(SandboxError::Invalid(
                "portMappings given both as ports and as a capability argument".into(),
            ));
        }
        let ports = serde_json::to_value(&req.port_mappings)
            .map_err(|e| SandboxError::Invalid(e.to_string()))?;
        caps.insert("portMappings".into(), ports);
    }
    Ok(caps)
}

/// A fresh sandbox id: 32 hex digits from the kernel's random source.
pub fn new_id() -> Result<String, SandboxError> {
    let mut buf = [0u8; 16];
    let path = std::path::Path::new("/dev/urandom");
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .map_err(|e| SandboxError::io("cannot read", path, e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mappings_parse_and_render_with_conventions_keys() {
        let p = PortMapping::parse("18080:8080").unwrap();
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"hostPort":18080,"containerPort":8080,"protocol":"tcp"})
        );
        assert_eq!(PortMapping::parse("53:53/UDP").unwrap().protocol, "udp");
        for bad in ["80", "0:80", "80:70000", "a:b", "80:80/icmp", ""] {
            assert!(PortMapping::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cni_args_are_containerds_and_refuse_separators() {
        let pod = PodMeta {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u-1".into(),
            ..PodMeta::default()
        };
        let args = cni_args(&pod, "abc", &[("X".into(), "y".into())]).unwrap();
        assert_eq!(args[5], ("X".to_string(), "y".to_string()));
        let keys: Vec<&str> = args.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "IgnoreUnknown",
                "K8S_POD_NAMESPACE",
                "K8S_POD_NAME",
                "K8S_POD_INFRA_CONTAINER_ID",
                "K8S_POD_UID",
                "X"
            ]
        );
        assert_eq!(args[3].1, "abc");
        let bad = PodMeta {
            name: "a;b".into(),
            ..pod
        };
        assert!(cni_args(&bad, "abc", &[]).is_err());
    }

    #[test]
    fn ports_become_the_port_mappings_capability() {
        let mut req = RunRequest {
            port_mappings: vec![PortMapping::parse("1:2").unwrap()],
            ..Default::default()
        };
        req.capability_args
            .insert("mac".into(), Value::from("c2:11:22:33:44:55"));
        let caps = capability_args(&req).unwrap();
        assert_eq!(caps["portMappings"][0]["hostPort"], 1);
        assert_eq!(caps["mac"], "c2:11:22:33:44:55");
        req.capability_args
            .insert("portMappings".into(), Value::Array(vec![]));
        assert!(capability_args(&req).is_err());
        assert_eq!(new_id().unwrap().len(), 32);
    }
}
