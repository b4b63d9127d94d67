//! One decoding rule for every plugin of the multi-call binary: unknown
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

/// A config of about 10 MB: `top` plus 900,000 distinct unknown keys.
fn many_keys_config(top: &str) -> String {
    let mut out = format!("{{{top}");
    for i in 0..900_000 {
        out.push_str(&format!(r#","k{i}":{}"#, i % 10));
    }
    out.push('}');
    out
}

// Every distinct unknown key costs a few bytes of index, not allocations of its own. Before:
// host-local peaked at about 210 MiB (Go's: about 40 MiB) for 900,000 keys in 10.7 MB, as
// RawObject allocated each key and value separately; loopback, which reads nothing but the
// config, shows RawObject's own cost (about 42 MiB, the input counted twice).
#[test]
fn memory_stays_proportional_to_many_distinct_keys() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    // Measured in this order: a child's peak is the largest of all children waited for.
    for plugin in ["loopback", "host-local"] {
        let bin = plugins.path().join(plugin);
        std::os::unix::fs::symlink(std::fs::canonicalize(BIN).unwrap(), &bin).unwrap();
        let conf = many_keys_config(&format!(
            r#""cniVersion":"1.0.0","name":"manykeys","type":"{plugin}","ipam":{{"type":"host-local","subnet":"198.18.42.0/24","dataDir":{:?}}}"#,
            data.path()
        ));
        assert!(conf.len() >= 10_000_000);
        let call = PluginCall::new("DEL")
            .container_id("many1")
            .netns("/var/run/netns/rcni-decoding-no-such-netns")
            .ifname("eth0")
            .path(plugins.path())
            .stdin(conf.clone());
        let (out, peak) = run_measured(Command::new(&bin), &call);
        out.assert_success();
        eprintln!(
            "{plugin} DEL, 900k keys in {} MB: peak RSS {} MiB",
            conf.len() / 1_000_000,
            peak >> 20
        );
        assert!(
            peak < budget(conf.len()),
            "{plugin} peaked at {} MiB for a {} MB config of 900,000 keys",
            peak >> 20,
            conf.len() / 1_000_000
        );
    }
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

/// One plugin of the table: its base config (members after `cniVersion`, `name`, `type`) and a
/// key it knows, given a value of the wrong type.
struct Case {
    plugin: &'static str,
    base: String,
    wrong_type: &'static str,
}

/// Every plugin of the registry with a config its DEL accepts in an empty container.
fn cases(data_dir: &std::path::Path) -> Vec<Case> {
    let ipam = format!(
        r#""ipam":{{"type":"host-local","ranges":[[{{"subnet":"198.18.43.0/24"}}]],"dataDir":{data_dir:?}}}"#
    );
    let case = |plugin, base: &str, wrong_type| Case {
        plugin,
        base: base.to_string(),
        wrong_type,
    };
    let with_ipam = |plugin, extra: &str, wrong_type| Case {
        plugin,
        base: format!("{extra}{ipam}"),
        wrong_type,
    };
    let cases = vec![
        case("loopback", "", r#""dns":"x""#),
        with_ipam("bridge", r#""bridge":"rcnidec0","#, r#""bridge":5"#),
        with_ipam("ptp", "", r#""ipMasq":"yes""#),
        with_ipam("macvlan", r#""master":"rcnidecm0","#, r#""master":5"#),
        with_ipam("ipvlan", r#""master":"rcnidecm0","#, r#""master":5"#),
        with_ipam(
            "vlan",
            r#""master":"rcnidecm0","vlanId":100,"#,
            r#""vlanId":"x""#,
        ),
        with_ipam("dummy", "", r#""ipam":{"type":"host-local","ranges":5}"#),
        with_ipam("host-device", r#""device":"rcnidechd0","#, r#""device":5"#),
        with_ipam("tap", "", r#""multiQueue":"x""#),
        case("sbr", "", r#""table":"x""#),
        case("vrf", r#""vrfname":"rcnidecv0""#, r#""vrfname":5"#),
        case("portmap", "", r#""snat":"x""#),
        case("firewall", "", r#""backend":5"#),
        case("tuning", "", r#""sysctl":5"#),
        case("bandwidth", "", r#""ingressRate":"x""#),
        with_ipam(
            "host-local",
            "",
            r#""ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.43.0/24"}]],"rangeStart":5}"#,
        ),
        case(
            "dhcp",
            &format!(
                r#""ipam":{{"type":"dhcp","daemonSocketPath":{:?}}}"#,
                data_dir.join("dhcp.sock")
            ),
            r#""ipam":{"type":"dhcp","priority":"x"}"#,
        ),
        case(
            "static",
            r#""ipam":{"type":"static","addresses":[{"address":"198.18.44.2/24"}]}"#,
            r#""ipam":{"type":"static","addresses":5}"#,
        ),
    ];
    let names: Vec<&str> = cases.iter().map(|c| c.plugin).collect();
    let registry: Vec<&str> = cni_plugins::PLUGINS.iter().map(|p| p.name).collect();
    assert_eq!(
        names, registry,
        "every plugin of the registry, in its order"
    );
    cases
}

/// What a plugin answered: success, or the CNI error code.
fn verdict(out: &PluginOutput) -> Result<(), u64> {
    if out.success() {
        return Ok(());
    }
    cni_testkit::assert_clean_stdout(out);
    let error: serde_json::Value = out.json().unwrap_or_else(|e| panic!("{e}: {out}"));
    Err(error["code"]
        .as_u64()
        .unwrap_or_else(|| panic!("no code: {out}")))
}

fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

// The same config gets the same answer from every plugin: an unknown key holding 1e400 or
// 9000 levels of nesting is accepted (at the top or inside runtimeConfig and args), nesting past Go's limit is code 6, a known key of the
// wrong type is code 7. Before: bridge, ptp, host-local and static (and every plugin
// delegating to host-local) refused 1e400 and deep nesting; host-local ignored a wrong-typed
// rangeStart when ranges was set; loopback, portmap and firewall accepted 100k levels.
#[test]
fn every_plugin_decodes_alike() {
    let sb = Sandbox::new().expect("sandbox");
    let pod = sb.add_container().unwrap();
    let names: Vec<&str> = cni_plugins::PLUGINS.iter().map(|p| p.name).collect();
    let cni_dir = sb.link_plugins(BIN, &names).unwrap();
    // dhcp's DEL asks its daemon (socket in the data dir, as `cases` configures it).
    let _dhcp =
        common::dhcp_daemon::DhcpDaemon::start(&sb.host().name, &sb.dir().join("ipam"), &[]);
    let rows: [(&str, Option<String>, Result<(), u64>); 7] = [
        ("base config", None, Ok(())),
        (
            "1e400 in an unknown key",
            Some(r#""junk":1e400"#.into()),
            Ok(()),
        ),
        (
            "9000 levels in an unknown key",
            Some(format!(r#""junk":{}"#, nested(9_000))),
            Ok(()),
        ),
        (
            "10001 levels in an unknown key",
            Some(format!(r#""junk":{}"#, nested(10_001))),
            Err(6),
        ),
        // Before: runtimeConfig and args were decoded as value trees, so this was code 7 in
        // every plugin; Go's structs skip the unknown keys.
        (
            "1e400 in unknown keys of runtimeConfig and args",
            Some(
                r#""runtimeConfig":{"junk":1e400,"bandwidth":{"junk":1e400}},"args":{"junk":1e400,"cni":{"junk":-1e400}}"#
                    .into(),
            ),
            Ok(()),
        ),
        (
            "9000 levels in unknown keys of runtimeConfig and args",
            Some(format!(
                r#""runtimeConfig":{{"junk":{0}}},"args":{{"cni":{{"junk":{0}}}}}"#,
                nested(9_000)
            )),
            Ok(()),
        ),
        ("a known key of the wrong type", None, Err(7)),
    ];
    let mut failures = Vec::new();
    for case in cases(&sb.dir().join("ipam")) {
        for (index, (row, member, expected)) in rows.iter().enumerate() {
            let member = match (index, member) {
                (i, _) if i == rows.len() - 1 => Some(case.wrong_type.to_string()),
                (_, member) => member.clone(),
            };
            // A later key replaces an earlier one of the same name (the wrong-typed `ipam`).
            let members = [case.base.as_str(), member.as_deref().unwrap_or("")]
                .into_iter()
                .filter(|m| !m.is_empty())
                .collect::<Vec<_>>()
                .join(",");
            let sep = if members.is_empty() { "" } else { "," };
            let conf = format!(
                r#"{{"cniVersion":"1.0.0","name":"decnet","type":"{}"{sep}{members}}}"#,
                case.plugin
            );
            let call = PluginCall::new("DEL")
                .container_id("dec1")
                .netns(&pod.path)
                .ifname("eth0")
                .path(&cni_dir)
                .stdin(conf);
            let out = sb.run_plugin(cni_dir.join(case.plugin), &call).unwrap();
            let got = verdict(&out);
            if got != *expected {
                failures.push(format!(
                    "{} / {row}: expected {expected:?}, got {got:?}: {}",
                    case.plugin,
                    out.stdout.trim()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
