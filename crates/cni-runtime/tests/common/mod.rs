//! Fake plugins for runtime tests: shell scripts that record their stdin and
//! CNI_* environment and print canned output.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_runtime::{Network, Runtime, Timeouts};
use serde_json::Value;

pub struct Fake {
    pub dir: tempfile::TempDir,
}

/// The result a fake plugin prints for ADD unless told otherwise.
pub fn default_result(name: &str) -> String {
    format!(
        r#"{{"cniVersion":"1.0.0","interfaces":[{{"name":"if-{name}"}}],"ips":[{{"address":"198.18.9.1/24","interface":0}}]}}"#
    )
}

impl Fake {
    pub fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["bin", "log", "canned", "cache"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        Fake { dir }
    }

    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }
    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// Installs fake plugins with the given names.
    pub fn plugins(&self, names: &[&str]) -> &Self {
        for name in names {
            let script = format!(
                r#"#!/bin/sh
log='{log}'
canned='{canned}/{name}.'"$CNI_COMMAND"
echo "{name} $CNI_COMMAND" >> "$log/order"
seq=$(wc -l < "$log/order" | tr -d ' ')
cat > "$log/$seq.stdin"
env | grep -E '^(CNI_|TRACEPARENT=|TRACESTATE=|BAGGAGE=)' | sort > "$log/$seq.env"
[ -f "$canned.sleep" ] && sleep "$(cat "$canned.sleep")"
[ -f "$canned.stderr" ] && cat "$canned.stderr" >&2
if [ -f "$canned.out" ]; then cat "$canned.out"
elif [ "$CNI_COMMAND" = ADD ]; then printf '%s' '{result}'
elif [ "$CNI_COMMAND" = VERSION ]; then printf '%s' '{{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}}'
fi
if [ -f "$canned.exit" ]; then exit "$(cat "$canned.exit")"; fi
exit 0
"#,
                log = self.log().display(),
                canned = self.dir.path().join("canned").display(),
                result = default_result(name),
            );
            let path = self.bin().join(name);
            fs::write(&path, script).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        self
    }

    /// Makes `plugin` answer `command` with `out` and exit status `exit`.
    pub fn answer(&self, plugin: &str, command: &str, out: &str, exit: i32) -> &Self {
        let canned = self.dir.path().join("canned");
        fs::write(canned.join(format!("{plugin}.{command}.out")), out).unwrap();
        fs::write(
            canned.join(format!("{plugin}.{command}.exit")),
            exit.to_string(),
        )
        .unwrap();
        self
    }

    pub fn stderr(&self, plugin: &str, command: &str, text: &str) -> &Self {
        let p = self
            .dir
            .path()
            .join("canned")
            .join(format!("{plugin}.{command}.stderr"));
        fs::write(p, text).unwrap();
        self
    }

    pub fn sleep(&self, plugin: &str, command: &str, secs: u32) -> &Self {
        let p = self
            .dir
            .path()
            .join("canned")
            .join(format!("{plugin}.{command}.sleep"));
        fs::write(p, secs.to_string()).unwrap();
        self
    }

    pub fn runtime(&self) -> Runtime {
        let mut rt = Runtime::new(vec![self.bin()], self.cache());
        rt.timeouts = Timeouts::uniform(Some(Duration::from_secs(20)));
        rt.exec.forward_stderr = false;
        rt
    }

    /// `(plugin, command)` of every call so far, in order.
    pub fn calls(&self) -> Vec<(String, String)> {
        fs::read_to_string(self.log().join("order"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (a, b) = l.split_once(' ').unwrap();
                (a.to_string(), b.to_string())
            })
            .collect()
    }

    pub fn calls_str(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .map(|(p, c)| format!("{p} {c}"))
            .collect()
    }

    /// The stdin of call number `seq` (1-based), parsed.
    pub fn stdin(&self, seq: usize) -> Value {
        let raw = fs::read(self.log().join(format!("{seq}.stdin"))).unwrap();
        serde_json::from_slice(&raw).unwrap()
    }

    pub fn stdin_raw(&self, seq: usize) -> String {
        fs::read_to_string(self.log().join(format!("{seq}.stdin"))).unwrap()
    }

    /// The CNI_* variables of call number `seq`.
    pub fn env(&self, seq: usize) -> BTreeMap<String, String> {
        fs::read_to_string(self.log().join(format!("{seq}.env")))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn clear_log(&self) {
        let _ = fs::remove_dir_all(self.log());
        fs::create_dir(self.log()).unwrap();
    }

    pub fn cache_file(&self, net: &str, cid: &str, ifname: &str) -> PathBuf {
        self.cache()
            .join("results")
            .join(format!("{net}-{cid}-{ifname}"))
    }
}

pub fn network(json: &str) -> Network {
    Network::from_list_bytes(json.as_bytes()).unwrap()
}

pub fn chain(version: &str, extra: &str) -> Network {
    network(&format!(
        r#"{{"cniVersion":"{version}","name":"net"{extra},"plugins":[{{"type":"A","capabilities":{{"portMappings":true,"mac":false}},"big":12345678901234567890123}},{{"type":"B"}},{{"type":"C"}}]}}"#
    ))
}

pub fn file_exists(p: &Path) -> bool {
    p.exists()
}
