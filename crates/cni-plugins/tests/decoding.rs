//! One decoding rule for every plugin of the multi-call binary (#10 items 9 and 10): unknown
//! keys are checked for syntax only and never held as a value tree, so a huge unknown value
//! costs memory proportional to the input, not to its element count; nesting deeper than Go's
//! 10000 levels is refused with code 6; a known key of the wrong type is refused with code 7.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use cni_testkit::{PluginCall, PluginOutput, Sandbox};
use common::BIN;
use nix::sys::resource::{getrusage, UsageWho};

/// A config of about 10 MB: `top` plus an unknown key holding five million numbers.
fn big_config(top: &str) -> String {
    let mut numbers = "1,".repeat(5_000_000);
    numbers.pop();
    format!(r#"{{{top},"junk":[{numbers}]}}"#)
}

/// Runs `cmd` with the call's environment and stdin; returns its output and the largest peak
/// resident set of any child this test process has waited for so far (so: of this plugin or
/// of a plugin it delegated to, unless an earlier call peaked higher), in bytes.
fn run_measured(mut cmd: Command, call: &PluginCall) -> (PluginOutput, u64) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(key);
        }
    }
    let mut child = cmd
        .envs(call.env_vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = call.stdin.clone();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = child.wait().unwrap();
    writer.join().unwrap();
    let out = PluginOutput {
        status: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    // ru_maxrss is in KiB on Linux.
    (out, usage.max_rss() as u64 * 1024)
}

/// The most a plugin may hold for a config of `input` bytes: a small multiple of the input
/// plus the fixed cost of a (debug) binary. Go's host-local peaks at about 42 MB here.
fn budget(input: usize) -> u64 {
    4 * input as u64 + 40 * 1024 * 1024
}

// Before: host-local decoded the whole document into a value tree, 5 million numbers
// peaked at about 370 MB.
#[test]
fn host_local_memory_stays_proportional_to_a_huge_unknown_value() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let host_local = plugins.path().join("host-local");
    std::os::unix::fs::symlink(std::fs::canonicalize(BIN).unwrap(), &host_local).unwrap();
    let conf = big_config(&format!(
        r#""cniVersion":"1.0.0","name":"bignet","ipam":{{"type":"host-local","subnet":"198.18.40.0/24","dataDir":{:?}}}"#,
        data.path()
    ));
    assert!(conf.len() >= 10_000_000);
    for command in ["ADD", "DEL"] {
        let call = PluginCall::new(command)
            .container_id("big1")
            .netns("/var/run/netns/rcni-decoding-no-such-netns")
            .ifname("eth0")
            .path(plugins.path())
            .stdin(conf.clone());
        let (out, peak) = run_measured(Command::new(&host_local), &call);
        out.assert_success();
        eprintln!("host-local {command}: peak RSS {} MiB", peak >> 20);
        assert!(
            peak < budget(conf.len()),
            "host-local {command} peaked at {} MiB for a {} MB config",
            peak >> 20,
            conf.len() / 1_000_000
        );
    }
    assert!(std::fs::read_dir(data.path().join("bignet"))
        .unwrap()
        .all(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .parse::<std::net::IpAddr>()
            .is_err()));
}

// bridge reads the config and hands the same bytes to host-local: both stay within budget.
#[test]
fn bridge_with_host_local_memory_stays_proportional() {
    let sb = Sandbox::new().expect("sandbox");
    let pod = sb.add_container().unwrap();
    let cni_dir = sb.link_plugins(BIN, &["bridge", "host-local"]).unwrap();
    let conf = big_config(&format!(
        r#""cniVersion":"1.0.0","name":"bignet","type":"bridge","bridge":"rcnibig0","ipam":{{"type":"host-local","subnet":"198.18.41.0/24","dataDir":{:?}}}"#,
        sb.dir().join("ipam")
    ));
    for command in ["ADD", "DEL"] {
        let call = PluginCall::new(command)
            .container_id("big1")
            .netns(&pod.path)
            .ifname("eth0")
            .path(&cni_dir)
            .stdin(conf.clone());
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &sb.host().name])
            .arg(cni_dir.join("bridge"));
        let (out, peak) = run_measured(cmd, &call);
        out.assert_success();
        eprintln!("bridge {command}: peak RSS {} MiB", peak >> 20);
        assert!(
            peak < budget(conf.len()),
            "bridge {command} peaked at {} MiB for a {} MB config",
            peak >> 20,
            conf.len() / 1_000_000
        );
    }
}
