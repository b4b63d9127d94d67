//! Exec protocol against scripted fake plugins.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use cni_invoke::*;
use cni_types::SpecVersion;

fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn inv() -> Invocation {
    Invocation {
        command: "ADD".into(),
        container_id: "c1".into(),
        netns: "/run/netns/x".into(),
        ifname: "eth0".into(),
        args: "A=1".into(),
        path: "/opt/cni/bin".into(),
    }
}

fn quiet() -> ExecOptions {
    ExecOptions {
        forward_stderr: false,
        ..Default::default()
    }
}

#[test]
fn passes_env_and_stdin() {
    let d = tempfile::tempdir().unwrap();
    let p = script(
        &d,
        "echo",
        r#"read -r line; printf '{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.2/24"}],"x":"%s|%s|%s|%s|%s|%s|%s"}' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_NETNS" "$CNI_IFNAME" "$CNI_ARGS" "$CNI_PATH" "$line""#,
    );
    let out = exec_raw(&p, &inv(), b"[1,2]\n", &quiet()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["x"], "ADD|c1|/run/netns/x|eth0|A=1|/opt/cni/bin|[1,2]");
    let r = exec_with_result(&p, &inv(), b"{}\n", SpecVersion::V1_1_0, &quiet()).unwrap();
    assert_eq!(r.cni_version, SpecVersion::V1_0_0);
    assert_eq!(r.ips.len(), 1);
}

// Plugin output handling: a failure with stderr only, a failure with unparsable stdout, a result
// without `cniVersion`, an unknown result version, a typed error.
#[test]
fn output_handling() {
    let d = tempfile::tempdir().unwrap();
    let a = script(&d, "a", "echo boom >&2; exit 1");
    let e = exec_raw(&a, &inv(), b"{}", &quiet()).unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    assert!(e.to_string().contains("exit status 1"), "{e}");

    let b = script(&d, "b", "echo 'not json'; exit 1");
    let e = exec_raw(&b, &inv(), b"{}", &quiet()).unwrap_err();
    assert!(e.to_string().contains("not json"), "{e}");
    assert_eq!(e.plugin_code(), Some(0));

    let c = script(&d, "c", r#"echo '{"ips":[{"address":"198.18.0.2/24"}]}'"#);
    let r = exec_with_result(&c, &inv(), b"{}", SpecVersion::V0_4_0, &quiet()).unwrap();
    assert_eq!(r.cni_version, SpecVersion::V0_4_0);

    let dd = script(&d, "d", r#"echo '{"cniVersion":"7.0.0"}'"#);
    let e = exec_with_result(&dd, &inv(), b"{}", SpecVersion::V1_0_0, &quiet()).unwrap_err();
    assert!(
        e.to_string().contains("unsupported CNI result version"),
        "{e}"
    );

    let typed = script(&d, "t", r#"echo '{"code":7,"msg":"bad"}'; exit 1"#);
    let e = exec_raw(&typed, &inv(), b"{}", &quiet()).unwrap_err();
    assert_eq!(e.to_cni_error().code, 7);
}

#[test]
fn timeout_kills_the_plugin() {
    let d = tempfile::tempdir().unwrap();
    let p = script(&d, "slow", "exec sleep 5");
    let opts = ExecOptions {
        timeout: Some(Duration::from_millis(200)),
        ..quiet()
    };
    let started = std::time::Instant::now();
    let e = exec_raw(&p, &inv(), b"{}", &opts).unwrap_err();
    assert!(matches!(e, InvokeError::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(e.to_cni_error().code, 11);
}

#[test]
fn version_probe() {
    let d = tempfile::tempdir().unwrap();
    let p = script(
        &d,
        "v",
        r#"[ "$CNI_COMMAND" = VERSION ] && [ "$CNI_NETNS" = dummy ] && echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'"#,
    );
    let info = get_version_info(&p, &quiet()).unwrap();
    assert!(info.supports("1.1.0"));
    let old = script(
        &d,
        "old",
        r#"echo '{"code":4,"msg":"unknown CNI_COMMAND: VERSION"}'; exit 1"#,
    );
    assert_eq!(
        get_version_info(&old, &quiet()).unwrap().supported_versions,
        ["0.1.0"]
    );
}

#[test]
fn missing_binary_is_a_spawn_error() {
    let e = exec_raw(
        std::path::Path::new("/nonexistent/plugin"),
        &inv(),
        b"{}",
        &quiet(),
    )
    .unwrap_err();
    assert!(matches!(e, InvokeError::Spawn { .. }));
}

// Input, output and error streams larger than a pipe buffer move together on one thread: a
// plugin that echoes while it reads does not deadlock, and one that exits without reading
// its stdin is still answered (a broken stdin pipe is not an error).
#[test]
fn large_streams_in_both_directions_and_unread_stdin() {
    let d = tempfile::tempdir().unwrap();
    let input: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let echo = script(&d, "cat", "tee /dev/stderr");
    let mut opts = quiet();
    opts.timeout = Some(Duration::from_secs(20));
    let out = exec_raw(&echo, &inv(), &input, &opts).unwrap();
    assert_eq!(out, input);

    let unread = script(&d, "unread", r#"printf '{"cniVersion":"1.0.0"}'"#);
    let out = exec_raw(&unread, &inv(), &input, &opts).unwrap();
    assert_eq!(out, br#"{"cniVersion":"1.0.0"}"#);
}

// stdin is filled before the plugin starts as far as the pipe takes it; the rest is fed
// while the plugin runs. Both parts arrive whole and in order, and end of file follows.
#[test]
fn stdin_larger_than_a_pipe_arrives_whole() {
    let d = tempfile::tempdir().unwrap();
    let p = script(&d, "cat", "cat");
    for len in [0, 1, 4096, 65536, 65537, 300_000] {
        let input: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let out = exec_raw(&p, &inv(), &input, &quiet()).unwrap();
        assert_eq!(out.len(), input.len(), "length {len}");
        assert!(out == input, "content of length {len}");
    }
}

// A plugin that exits without reading a stdin larger than the pipe is still judged by its
// exit status and output, not by the input it left.
#[test]
fn plugin_that_ignores_a_large_stdin_still_answers() {
    let d = tempfile::tempdir().unwrap();
    let p = script(&d, "quick", r#"printf '{"cniVersion":"1.0.0"}'"#);
    let input = vec![b' '; 300_000];
    let out = exec_raw(&p, &inv(), &input, &quiet()).unwrap();
    assert_eq!(out, br#"{"cniVersion":"1.0.0"}"#);
}

// A descriptor in `pass_fds` reaches the plugin (and what it starts) and no other child of
// this process: it stays close-on-exec here.
#[test]
fn a_passed_descriptor_reaches_the_plugin_and_no_other_child() {
    let d = tempfile::tempdir().unwrap();
    let held = d.path().join("held");
    let file = std::fs::File::create(&held).unwrap();
    let fd = std::sync::Arc::new(std::os::fd::OwnedFd::from(file));
    // The plugin and a child of the plugin list the files they hold open.
    let p = script(
        &d,
        "lister",
        r#"sh -c 'readlink /proc/$$/fd/*' > "$(dirname "$0")/child"; readlink /proc/$$/fd/* > "$(dirname "$0")/plugin"; echo '{"cniVersion":"1.0.0"}'"#,
    );
    let opts = ExecOptions {
        pass_fds: vec![fd.clone()],
        ..quiet()
    };
    exec_raw(&p, &inv(), b"{}", &opts).unwrap();
    let listed = |name: &str| std::fs::read_to_string(d.path().join(name)).unwrap();
    let target = held.display().to_string();
    assert!(
        listed("plugin").lines().any(|l| l == target),
        "{}",
        listed("plugin")
    );
    assert!(
        listed("child").lines().any(|l| l == target),
        "{}",
        listed("child")
    );
    // Neither a plugin run without it nor any other child gets it.
    exec_raw(&p, &inv(), b"{}", &quiet()).unwrap();
    assert!(!listed("plugin").contains(&target), "{}", listed("plugin"));
    let other = std::process::Command::new("sh")
        .args(["-c", "readlink /proc/$$/fd/*"])
        .output()
        .unwrap();
    let other = String::from_utf8_lossy(&other.stdout);
    assert!(!other.contains(&target), "{other}");
}
