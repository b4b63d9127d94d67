//! libcni 1.3's non-inlined plugin configs through `rcni add`/`rcni del` with the real rcni plugins: a network whose
//! tuning step lives in the sub-directory named after the network (libcni v1.3's non-inlined
//! plugins), and the caller's `TRACEPARENT`/`TRACESTATE`/`BAGGAGE` reaching every plugin.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use cni_testkit::{bin_path, is_root, link, Sandbox};

mod support;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// `rcni <args>` inside the sandbox's host namespace, with a trace context in its environment.
fn rcni(sb: &Sandbox, confdir: &Path, plugins: &Path, cache: &Path, args: &[&str]) -> Output {
    support::rcni_in_host(sb, confdir, plugins, cache, args)
        .env("TRACEPARENT", TRACEPARENT)
        .env("BAGGAGE", "pod=p1")
        .env_remove("TRACESTATE")
        .output()
        .unwrap()
}

/// A chained plugin that records its trace variables and passes `prevResult` on.
fn install_spy(plugins: &Path, log: &Path) {
    let script = format!(
        "#!/bin/sh\n\
         env | grep -E '^(TRACEPARENT|TRACESTATE|BAGGAGE)=' | sort | tr '\\n' ' ' >> '{log}'\n\
         echo \"$CNI_COMMAND\" >> '{log}'\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then jq -c .prevResult; else cat > /dev/null; fi\n",
        log = log.display()
    );
    let path = plugins.join("trace-spy");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn subdir_plugins_and_trace_context_through_rcni() {
    if !is_root() || !Path::new("/usr/bin/jq").is_file() {
        eprintln!("SKIPPED: needs root for network namespaces and jq for the spy plugin");
        return;
    }
    let sb = Sandbox::new().unwrap();
    let pod = sb.add_container().unwrap();
    let bin = bin_path("rcni-plugins").expect("build rcni-plugins first");
    let plugins = sb
        .link_plugins(bin, &["bridge", "host-local", "tuning"])
        .unwrap();
    let spy_log = sb.dir().join("spy.log");
    install_spy(&plugins, &spy_log);
    let confdir = sb.dir().join("net.d");
    let cache = sb.dir().join("cache");
    fs::create_dir_all(confdir.join("v13")).unwrap();
    fs::write(
        confdir.join("10-v13.conflist"),
        format!(
            r#"{{"cniVersion":"1.1.0","name":"v13","plugins":[{{"type":"bridge","bridge":"v13br0","isGateway":true,
              "ipam":{{"type":"host-local","ranges":[[{{"subnet":"198.18.93.0/24"}}]],"dataDir":"{}"}}}}]}}"#,
            sb.dir().join("ipam").display()
        ),
    )
    .unwrap();
    fs::write(
        confdir.join("v13").join("50-tuning.conf"),
        r#"{"type":"tuning","mtu":1280}"#,
    )
    .unwrap();
    fs::write(
        confdir.join("v13").join("60-spy.conf"),
        r#"{"type":"trace-spy"}"#,
    )
    .unwrap();
    let netns = pod.path.display().to_string();

    let add = rcni(&sb, &confdir, &plugins, &cache, &["add", "v13", &netns]);
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let eth0 = link(&pod.name, "eth0").unwrap().expect("eth0 after ADD");
    assert_eq!(
        eth0["mtu"], 1280,
        "the sub-directory tuning plugin ran: {eth0}"
    );
    let result: serde_json::Value = serde_json::from_slice(&add.stdout).unwrap();
    assert!(
        result["ips"][0]["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("198.18.93.")),
        "the spy passed the bridge result on: {result}"
    );

    let del = rcni(&sb, &confdir, &plugins, &cache, &["del", "v13", &netns]);
    assert!(
        del.status.success(),
        "{}",
        String::from_utf8_lossy(&del.stderr)
    );
    assert!(link(&pod.name, "eth0").unwrap().is_none());
    let expect = format!("BAGGAGE=pod=p1 TRACEPARENT={TRACEPARENT} ");
    assert_eq!(
        fs::read_to_string(&spy_log).unwrap(),
        format!("{expect}ADD\n{expect}DEL\n")
    );
}
