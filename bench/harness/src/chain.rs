//! Running a config list the way a runtime does, but with nothing between the timer and the
//! plugin processes: ADD in order with `prevResult`, DEL in reverse with the final result.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Map, Value};

use crate::exec::{run, Call};

/// One implementation's plugins: a directory of executables named by plugin type.
#[derive(Clone)]
pub struct Impl {
    pub label: &'static str,
    pub dir: PathBuf,
}

impl Impl {
    pub fn plugin(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// An attachment to run a chain for.
pub struct Attachment<'a> {
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ifname: &'a str,
    /// Capability args (`portMappings`, ...), given to plugins that declare the capability.
    pub capability_args: &'a Map<String, Value>,
}

/// The request a plugin sees: its own object plus name, version, prevResult, runtimeConfig.
pub fn request(list: &Value, plugin: &Value, prev: Option<&Value>, att: &Attachment) -> Vec<u8> {
    let mut obj = plugin.as_object().cloned().unwrap_or_default();
    obj.insert("name".into(), list["name"].clone());
    obj.insert("cniVersion".into(), list["cniVersion"].clone());
    if let Some(p) = prev {
        obj.insert("prevResult".into(), p.clone());
    }
    let mut rc = Map::new();
    if let Some(caps) = plugin.get("capabilities").and_then(Value::as_object) {
        for (cap, on) in caps {
            if on.as_bool() == Some(true) {
                if let Some(v) = att.capability_args.get(cap) {
                    rc.insert(cap.clone(), v.clone());
                }
            }
        }
    }
    if !rc.is_empty() {
        obj.insert("runtimeConfig".into(), Value::Object(rc));
    }
    serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
}

fn plugins(list: &Value) -> &[Value] {
    list["plugins"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Runs one plugin of the chain and returns its time and stdout.
fn step(
    imp: &Impl,
    command: &str,
    list: &Value,
    plugin: &Value,
    prev: Option<&Value>,
    att: &Attachment,
) -> Result<(Duration, Vec<u8>)> {
    let ty = plugin["type"].as_str().unwrap_or_default();
    let stdin = request(list, plugin, prev, att);
    let out = run(&Call {
        bin: &imp.plugin(ty),
        command,
        container_id: att.container_id,
        netns: att.netns,
        ifname: att.ifname,
        path: &imp.dir.display().to_string(),
        stdin: &stdin,
    })?;
    if !out.ok {
        bail!("{} {ty} {command} failed: {}", imp.label, out.describe());
    }
    Ok((out.elapsed, out.stdout))
}

/// Runs ADD over the chain; returns the summed plugin time and the final result.
pub fn add(imp: &Impl, list: &Value, att: &Attachment) -> Result<(Duration, Value)> {
    let mut total = Duration::ZERO;
    let mut prev: Option<Value> = None;
    for p in plugins(list) {
        let (t, out) = step(imp, "ADD", list, p, prev.as_ref(), att)?;
        total += t;
        prev = Some(serde_json::from_slice(&out)?);
    }
    Ok((total, prev.unwrap_or(json!({}))))
}

/// Runs DEL over the chain in reverse with the final ADD result.
pub fn del(imp: &Impl, list: &Value, att: &Attachment, result: &Value) -> Result<Duration> {
    let mut total = Duration::ZERO;
    for p in plugins(list).iter().rev() {
        total += step(imp, "DEL", list, p, Some(result), att)?.0;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_injects_runtime_config_only_for_declared_capabilities() {
        let list = json!({"cniVersion": "1.0.0", "name": "n", "plugins": []});
        let caps: Map<String, Value> =
            serde_json::from_value(json!({"portMappings": [1], "mac": "x"})).unwrap();
        let att = Attachment {
            container_id: "c",
            netns: Path::new("/x"),
            ifname: "eth0",
            capability_args: &caps,
        };
        let p = json!({"type": "portmap", "capabilities": {"portMappings": true, "mac": false}});
        let req: Value =
            serde_json::from_slice(&request(&list, &p, Some(&json!({"a": 1})), &att)).unwrap();
        assert_eq!(req["runtimeConfig"], json!({"portMappings": [1]}));
        assert_eq!(req["prevResult"], json!({"a": 1}));
        assert_eq!(req["name"], "n");
    }
}
