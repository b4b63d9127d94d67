//! The node agent's health, as a plugin of the agent's conflist and `rcni doctor` see it: the config names the
//! status file `rcni-node` keeps (`"rcniNodeStatus": "/run/rcni/node-status.json"`) and the node
//! (`"rcniNodeName"`). The agent is down when the file is missing or unreadable, says
//! `"healthy": false`, or has expired (`"until"`, unix seconds, exclusive, is not in the future:
//! a killed agent stops renewing it, and it is valid for a few seconds only).
//!
//! While the agent is down, STATUS answers code 50 ([`check`]) and ADD is refused with code 11,
//! "try again later" (CNI SPEC.md, Section 6: Error codes; [`check_add`]): a runtime that never
//! calls STATUS (libcni before 1.2) would otherwise attach a pod to a subnet no other node
//! routes to, and kubelet retries a failed sandbox, so the pod starts once the agent is back.
//! DEL, CHECK and GC never look at the agent. The message names `rcni-node`, the node and how
//! long the agent has been gone or unhealthy.
//!
//! Where the agent enforces NetworkPolicy, the config also names its pod socket
//! (`"rcniNodeSocket": "/run/rcni/pods.sock"`, [`SOCKET_KEY`]): the bridge plugin tells the
//! agent about each pod at ADD, once its addresses are allocated and before its interface is
//! configured, and waits for the answer; at DEL, before the addresses are released. The
//! messages are one JSON line each way over a unix stream: a [`PodMessage`] from the
//! plugin, a [`PodAnswer`] from the agent. The agent answers an ADD once no other pod's
//! policy program holds those addresses any more (nothing is inherited through address
//! reuse); the pod's own traffic is held in the kernel until the agent has programmed what
//! its policies say. An ADD the agent refuses or cannot be told about fails with the
//! answer's code (11, try again later, when it cannot be reached or is not ready).

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{code, CniError, RawObject};

/// A string key of the config; a value of another type is a config error.
fn field(raw: &RawObject, key: &str) -> Result<Option<String>, CniError> {
    raw.decode::<String>(key)
        .map_err(|e| CniError::invalid_config(format!("failed to load netconf: {key}: {e}")))
}

/// The config key naming the status file.
pub const KEY: &str = "rcniNodeStatus";
/// The config key naming the node (used when the status file cannot be read).
pub const NODE_KEY: &str = "rcniNodeName";
/// The config key naming the agent's pod socket.
pub const SOCKET_KEY: &str = "rcniNodeSocket";

/// What the plugin tells the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum PodMessage {
    /// ADD: these addresses of the node belong to this attachment from now on.
    Add(PodAdded),
    /// DEL: the attachment's addresses are about to be released.
    #[serde(rename_all = "camelCase")]
    Del {
        container_id: String,
        ifname: String,
    },
}

/// An attachment made by an ADD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAdded {
    /// `CNI_CONTAINERID` (the pod sandbox's ID under a CRI runtime or `rcni pod`).
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// `K8S_POD_NAMESPACE` and `K8S_POD_NAME` of `CNI_ARGS`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub ips: Vec<IpAddr>,
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodAnswer {
    pub ok: bool,
    /// On refusal: the CNI error code for the plugin to answer with, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
}

impl PodAnswer {
    /// Done.
    pub fn ok() -> Self {
        PodAnswer {
            ok: true,
            code: None,
            msg: None,
        }
    }

    /// Refused with `code` because of `msg`.
    pub fn refused(code: u32, msg: impl Into<String>) -> Self {
        PodAnswer {
            ok: false,
            code: Some(code),
            msg: Some(msg.into()),
        }
    }
}

/// The agent's pod socket the config names, if any.
pub fn socket(raw: &RawObject) -> Result<Option<String>, CniError> {
    field(raw, SOCKET_KEY)
}

/// The node the config names, for messages.
pub fn node_name(raw: &RawObject) -> Result<Option<String>, CniError> {
    field(raw, NODE_KEY)
}

#[derive(Deserialize)]
struct Status {
    healthy: bool,
    #[serde(default)]
    reason: Option<String>,
    until: u64,
    #[serde(default)]
    node: Option<String>,
    #[serde(default, rename = "unhealthySince")]
    unhealthy_since: Option<u64>,
}

/// STATUS: `Ok` when the config names no status file or the agent it names is healthy now,
/// else code 50.
pub fn check(raw: &RawObject) -> Result<(), CniError> {
    match agent_down(raw, unix_now())? {
        None => Ok(()),
        Some(why) => Err(CniError::new(code::PLUGIN_NOT_AVAILABLE, why)),
    }
}

/// ADD: like [`check`], refused with code 11 (try again later).
pub fn check_add(raw: &RawObject) -> Result<(), CniError> {
    match agent_down(raw, unix_now())? {
        None => Ok(()),
        Some(why) => Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!("{why}: try again later"),
        )),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Why the agent named by the config is not serving the node at `now`; `None` when it is (or
/// when the config names no status file).
fn agent_down(raw: &RawObject, now: u64) -> Result<Option<String>, CniError> {
    let Some(path) = field(raw, KEY)? else {
        return Ok(None);
    };
    let configured = field(raw, NODE_KEY)?;
    let on = |node: Option<&str>| {
        let node = node.or(configured.as_deref()).unwrap_or("this node");
        format!("rcni-node on {node}")
    };
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) => {
            return Ok(Some(format!(
                "{} is not running (status file {path}: {e})",
                on(None)
            )))
        }
    };
    let status: Status = match serde_json::from_slice(&text) {
        Ok(status) => status,
        Err(e) => {
            return Ok(Some(format!(
                "{}: status file {path} is malformed: {e}",
                on(None)
            )))
        }
    };
    let agent = on(status.node.as_deref());
    let reason = status.reason.as_deref().unwrap_or("unhealthy");
    if status.until <= now {
        let last = match status.healthy {
            true => String::new(),
            false => format!("; it last said: {reason}"),
        };
        return Ok(Some(format!(
            "{agent} is not running (status expired {} s ago{last})",
            now - status.until
        )));
    }
    if !status.healthy {
        let since = status
            .unhealthy_since
            .map(|s| format!(" for {} s", now.saturating_sub(s)))
            .unwrap_or_default();
        return Ok(Some(format!("{agent} is not ready{since}: {reason}")));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(path: &std::path::Path) -> RawObject {
        let json = json!({ KEY: path, NODE_KEY: "node2" }).to_string();
        serde_json::from_str(&json).unwrap()
    }

    fn now() -> u64 {
        unix_now()
    }

    #[test]
    fn healthy_fresh_status_passes_and_anything_else_is_code_50() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        assert_eq!(check(&raw(&path)).unwrap_err().code, 50, "missing file");
        let write = |v: serde_json::Value| std::fs::write(&path, v.to_string()).unwrap();
        write(json!({"healthy": true, "until": now() + 10}));
        check(&raw(&path)).unwrap();
        check_add(&raw(&path)).unwrap();
        write(json!({"healthy": false, "reason": "no lease", "until": now() + 10}));
        let err = check(&raw(&path)).unwrap_err();
        assert_eq!(err.code, 50);
        assert!(err.msg.contains("no lease"));
        write(json!({"healthy": true, "until": now() - 5}));
        assert!(check(&raw(&path)).unwrap_err().msg.contains("expired"));
        std::fs::write(&path, "{").unwrap();
        assert_eq!(check(&raw(&path)).unwrap_err().code, 50);
        // No key: nothing to check.
        check(&serde_json::from_str::<RawObject>("{}").unwrap()).unwrap();
        check_add(&serde_json::from_str::<RawObject>("{}").unwrap()).unwrap();
    }

    #[test]
    fn add_is_refused_with_code_11_naming_the_agent_the_node_and_how_long() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let write = |v: serde_json::Value| std::fs::write(&path, v.to_string()).unwrap();
        let refusal = || check_add(&raw(&path)).unwrap_err();

        // A killed agent: its last healthy status expired.
        write(json!({"healthy": true, "until": now() - 12, "node": "node2"}));
        let err = refusal();
        assert_eq!(err.code, 11);
        assert_eq!(
            err.msg,
            "rcni-node on node2 is not running (status expired 12 s ago): try again later"
        );
        // `until` is exclusive.
        write(json!({"healthy": true, "until": now(), "node": "node2"}));
        assert!(refusal().msg.contains("status expired 0 s ago"));

        // Alive but unhealthy: since when, and why.
        write(
            json!({"healthy": false, "reason": "datastore unreachable for 9 s",
            "until": now() + 4, "node": "node2", "unhealthySince": now() - 7}),
        );
        let err = refusal();
        assert_eq!(err.code, 11);
        assert_eq!(
            err.msg,
            "rcni-node on node2 is not ready for 7 s: datastore unreachable for 9 s: try again later"
        );
        // Stopped: the last reason is kept after expiry.
        write(
            json!({"healthy": false, "reason": "agent stopped", "until": now() - 3,
            "node": "node2", "unhealthySince": now() - 6}),
        );
        assert_eq!(
            refusal().msg,
            "rcni-node on node2 is not running (status expired 3 s ago; it last said: agent stopped): try again later"
        );

        // No status file (a rebooted node's emptied /run): the node comes from the config.
        std::fs::remove_file(&path).unwrap();
        let err = refusal();
        assert_eq!(err.code, 11);
        assert!(
            err.msg
                .starts_with("rcni-node on node2 is not running (status file "),
            "{}",
            err.msg
        );
        // STATUS says the same with code 50.
        let status = check(&raw(&path)).unwrap_err();
        assert_eq!(status.code, 50);
        assert!(status.msg.starts_with("rcni-node on node2 is not running"));
    }

    #[test]
    fn pod_messages_are_one_json_object_each() {
        let add = PodMessage::Add(PodAdded {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/c1".into(),
            namespace: Some("shop".into()),
            name: Some("web".into()),
            ips: vec!["198.18.1.5".parse().unwrap()],
        });
        let text = serde_json::to_string(&add).unwrap();
        assert_eq!(
            text,
            r#"{"op":"add","containerId":"c1","ifname":"eth0","netns":"/run/netns/c1","namespace":"shop","name":"web","ips":["198.18.1.5"]}"#
        );
        assert_eq!(serde_json::from_str::<PodMessage>(&text).unwrap(), add);
        let del: PodMessage =
            serde_json::from_str(r#"{"op":"del","containerId":"c1","ifname":"eth0"}"#).unwrap();
        assert_eq!(
            del,
            PodMessage::Del {
                container_id: "c1".into(),
                ifname: "eth0".into()
            }
        );
        let refused = PodAnswer::refused(11, "not ready");
        let back: PodAnswer =
            serde_json::from_str(&serde_json::to_string(&refused).unwrap()).unwrap();
        assert_eq!(back, refused);
        let raw: RawObject =
            serde_json::from_str(r#"{"rcniNodeSocket":"/run/rcni/pods.sock"}"#).unwrap();
        assert_eq!(
            socket(&raw).unwrap().as_deref(),
            Some("/run/rcni/pods.sock")
        );
    }

    #[test]
    fn a_wrongly_typed_key_is_a_config_error() {
        let raw: RawObject = serde_json::from_str(&json!({ KEY: 5 }).to_string()).unwrap();
        assert_eq!(check_add(&raw).unwrap_err().code, 7);
    }
}
