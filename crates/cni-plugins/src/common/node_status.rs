//! Daemon-backed STATUS: a plugin whose config names a node agent's status file
//! (`"rcniNodeStatus": "/run/rcni/node-status.json"`, written by `rcni-node`) answers STATUS with
//! code 50 while that agent is not healthy: the file is missing or unreadable, says
//! `"healthy": false`, or has expired (`"until"`, unix seconds, is in the past: a killed agent
//! stops refreshing it).

use std::time::{SystemTime, UNIX_EPOCH};

use cni_types::{code, CniError, RawObject};
use serde::Deserialize;

use super::conf::field;

/// The config key naming the status file.
pub const KEY: &str = "rcniNodeStatus";

#[derive(Deserialize)]
struct Status {
    healthy: bool,
    #[serde(default)]
    reason: Option<String>,
    until: u64,
}

/// `Ok` when the config names no status file or the agent it names is healthy now.
pub fn check(raw: &RawObject) -> Result<(), CniError> {
    let Some(path) = field::<String>(raw, KEY)? else {
        return Ok(());
    };
    let unavailable = |why: String| CniError::new(code::PLUGIN_NOT_AVAILABLE, why);
    let text =
        std::fs::read(&path).map_err(|e| unavailable(format!("node agent status {path}: {e}")))?;
    let status: Status = serde_json::from_slice(&text)
        .map_err(|e| unavailable(format!("node agent status {path} is malformed: {e}")))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if !status.healthy {
        let reason = status.reason.unwrap_or_else(|| "unhealthy".into());
        return Err(unavailable(format!("node agent not ready: {reason}")));
    }
    if status.until < now {
        return Err(unavailable(format!(
            "node agent status {path} expired {} s ago (agent not running?)",
            now - status.until
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(path: &std::path::Path) -> RawObject {
        let json = serde_json::json!({ KEY: path }).to_string();
        serde_json::from_str(&json).unwrap()
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn healthy_fresh_status_passes_and_anything_else_is_code_50() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        assert_eq!(check(&raw(&path)).unwrap_err().code, 50, "missing file");
        let write = |v: serde_json::Value| std::fs::write(&path, v.to_string()).unwrap();
        write(serde_json::json!({"healthy": true, "until": now() + 10}));
        check(&raw(&path)).unwrap();
        write(serde_json::json!({"healthy": false, "reason": "no lease", "until": now() + 10}));
        let err = check(&raw(&path)).unwrap_err();
        assert_eq!(err.code, 50);
        assert!(err.msg.contains("no lease"));
        write(serde_json::json!({"healthy": true, "until": now() - 5}));
        assert!(check(&raw(&path)).unwrap_err().msg.contains("expired"));
        std::fs::write(&path, "{").unwrap();
        assert_eq!(check(&raw(&path)).unwrap_err().code, 50);
        // No key: nothing to check.
        check(&serde_json::from_str::<RawObject>("{}").unwrap()).unwrap();
    }
}
