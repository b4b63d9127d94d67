//! A CNI_NETNS that is not UTF-8: every plugin of the multi-call binary, for every command
//! that takes a netns, answers with the spec's error object, code 4 (invalid environment
//! variables) naming CNI_NETNS, and a non-zero exit; never a panic, never a lossy copy of the
//! path (which would name another file). Results report the netns as JSON text (an
//! interface's `sandbox`), so no plugin could answer for such a path. No root needed: the
//! refusal comes before any namespace is opened.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};

use std::io::Write;

const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");

#[test]
fn every_plugin_refuses_a_netns_that_is_not_utf8_with_code_4() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    let out = Command::new(BIN)
        .args(["install", bin_dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let netns = OsStr::from_bytes(b"/run/netns/pod-\xff\xfe");
    for plugin in cni_plugins::PLUGINS {
        for command in ["ADD", "CHECK", "DEL"] {
            let mut cmd = Command::new(bin_dir.join(plugin.name));
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("CNI_") {
                    cmd.env_remove(k);
                }
            }
            let mut child = cmd
                .env("CNI_COMMAND", command)
                .env("CNI_CONTAINERID", "c1")
                .env("CNI_NETNS", netns)
                .env("CNI_IFNAME", "eth0")
                .env("CNI_PATH", &bin_dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let conf = format!(
                r#"{{"cniVersion":"1.1.0","name":"n","type":"{}"}}"#,
                plugin.name
            );
            // The plugin may answer before it reads stdin; a closed pipe is fine then.
            let _ = child.stdin.take().unwrap().write_all(conf.as_bytes());
            let out = child.wait_with_output().unwrap();
            let who = format!("{} {command}", plugin.name);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked"), "{who}: {stderr}");
            assert_eq!(out.status.code(), Some(1), "{who}: {stderr}");
            let e: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|err| panic!("{who}: stdout is no JSON ({err}): {out:?}"));
            assert_eq!(e["code"], 4, "{who}: {e}");
            assert_eq!(e["msg"], "CNI_NETNS is not valid UTF-8", "{who}: {e}");
            assert_eq!(e["cniVersion"], "1.1.0", "{who}: {e}");
        }
    }
}
