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

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

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
    fn a_wrongly_typed_key_is_a_config_error() {
        let raw: RawObject = serde_json::from_str(&json!({ KEY: 5 }).to_string()).unwrap();
        assert_eq!(check_add(&raw).unwrap_err().code, 7);
    }
}
