//! run_plugin passes exactly the CNI environment, stdin and argv[0] (run as root).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cni_testkit::{go_plugins_dir, PluginCall, Sandbox};

/// Prints `$0`, then its environment, one `KEY=value` per line; copies stdin to stderr.
const ENV_SCRIPT: &str = "#!/bin/sh\necho \"ARGV0=$0\"\nenv\ncat >&2\n";

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, body).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn parse_env(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn passes_exactly_the_given_cni_env_and_stdin() {
    // An inherited CNI variable must not reach the plugin.
    std::env::set_var("CNI_IFNAME", "inherited-from-test");
    std::env::set_var("CNI_CONTAINERID", "inherited-too");

    let sb = Sandbox::new().unwrap();
    let c = sb.add_container().unwrap();
    let script = write_script(sb.dir(), "print-env", ENV_SCRIPT);
    let call = PluginCall::new("ADD")
        .netns(&c.path)
        .ifname("eth0")
        .args("IgnoreUnknown=1;K8S_POD_NAME=p")
        .path("/opt/cni/bin:/usr/lib/cni")
        .env("EXTRA_VAR", "x y")
        .stdin(r#"{"cniVersion":"1.0.0","name":"n","type":"t"}"#);

    let out = sb.run_plugin(&script, &call).unwrap();
    out.assert_success();
    let env = parse_env(&out.stdout);
    let cni: BTreeMap<&str, &str> = env
        .iter()
        .filter(|(k, _)| k.starts_with("CNI_"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let netns = c.path.to_str().unwrap();
    let expected = BTreeMap::from([
        ("CNI_COMMAND", "ADD"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=p"),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
    ]);
    assert_eq!(cni, expected);
    assert_eq!(env["EXTRA_VAR"], "x y");
    assert_eq!(env["PATH"], std::env::var("PATH").unwrap());
    assert_eq!(env["ARGV0"], script.to_str().unwrap());
    assert_eq!(out.stderr, call.stdin);
}

#[test]
fn runs_in_the_host_namespace() {
    let sb = Sandbox::new().unwrap();
    let script = write_script(
        sb.dir(),
        "netns-id",
        "#!/bin/sh\nreadlink /proc/self/ns/net\n",
    );
    let out = sb.run_plugin(&script, &PluginCall::new("VERSION")).unwrap();
    out.assert_success();
    let host_ns = sb.exec_host(["readlink", "/proc/self/ns/net"]).unwrap();
    let root_ns = fs::read_link("/proc/self/ns/net").unwrap();
    assert_eq!(out.stdout, host_ns.stdout);
    assert_ne!(out.stdout.trim(), root_ns.to_str().unwrap());
}

#[test]
fn symlinked_plugins_run_under_their_own_name() {
    let sb = Sandbox::new().unwrap();
    let script = write_script(sb.dir(), "multi-call", ENV_SCRIPT);
    let dir = sb
        .link_plugins(&script, &["loopback", "host-local"])
        .unwrap();
    for name in ["loopback", "host-local"] {
        let link = dir.join(name);
        assert_eq!(
            fs::read_link(&link).unwrap(),
            script.canonicalize().unwrap()
        );
        let out = sb.run_plugin(&link, &PluginCall::new("VERSION")).unwrap();
        out.assert_success();
        assert_eq!(parse_env(&out.stdout)["ARGV0"], link.to_str().unwrap());
    }
    // linking again replaces the links
    sb.link_plugins(&script, &["loopback"]).unwrap();
    assert!(sb.link_plugins(sb.dir().join("missing"), &["x"]).is_err());
    assert!(sb.link_plugins(&script, &["../escape"]).is_err());
}

#[test]
fn cni_errors_are_decoded() {
    let sb = Sandbox::new().unwrap();
    let script = write_script(
        sb.dir(),
        "fails",
        "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"bad config\"}'\necho detail >&2\nexit 1\n",
    );
    let out = sb.run_plugin(&script, &PluginCall::new("ADD")).unwrap();
    assert_eq!(out.status, 1);
    assert_eq!(out.error_code(), Some(7));
    assert_eq!(out.json().unwrap()["msg"], "bad config");
    let panic = std::panic::catch_unwind(|| {
        out.assert_success();
    })
    .unwrap_err();
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("bad config") && msg.contains("detail"),
        "{msg}"
    );
}

#[test]
fn go_loopback_answers_version() {
    let Some(go_dir) = go_plugins_dir() else {
        eprintln!("skipped: Go reference plugins not installed in /usr/lib/cni");
        return;
    };
    let sb = Sandbox::new().unwrap();
    let out = sb
        .run_plugin(
            go_dir.join("loopback"),
            &PluginCall::new("VERSION").stdin(r#"{"cniVersion":"1.0.0"}"#),
        )
        .unwrap();
    out.assert_success();
    let versions = out.json().unwrap()["supportedVersions"].clone();
    assert!(
        versions.as_array().unwrap().iter().any(|v| v == "1.0.0"),
        "{versions}"
    );
}
