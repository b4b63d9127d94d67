//! `rcni pod` through the sequences kubelet drives a CRI runtime through (as observed with
//! containerd 1.6), with rcni's plugins and with Debian's Go plugins: real binaries in a throwaway
//! host namespace, the kernel and the node's files checked afterwards.

mod pod_env;

use std::fs;

use cni_testkit::{http_get, http_server, link, ping};
use pod_env::{ip_of, text, Plugins, PodEnv};

fn kubelet_sequence(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(20, 24, ""));
    let id = env.new_id("seq");
    // A label Kubernetes would refuse is refused before anything is made.
    let bad = env.pod(&["run", "pod", "--id", &id, "--label=-app=web"]);
    let stderr = text(&bad.stderr);
    assert!(!bad.status.success(), "{stderr}");
    assert!(stderr.contains("invalid key \"-app\""), "{stderr}");
    env.assert_only(&[], "after a refused label");
    let run = env.run(
        &id,
        &[
            "--port",
            "18080:80",
            "--namespace",
            "shop",
            "--label",
            "app=web",
        ],
    );
    let ip = ip_of(&run);
    assert!(ip.starts_with("198.18.20."), "{run}");
    assert_eq!(run["state"], "ready");
    assert_eq!(run["netns"], format!("/run/netns/rcni-{id}"));

    // The namespace is ours and holds lo (up) and eth0 with the address.
    let ns = PodEnv::netns_name(&id);
    let lo = link(&ns, "lo").unwrap().unwrap();
    assert!(lo["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    assert!(link(&ns, "eth0").unwrap().is_some());
    assert!(
        ping(&env.sb.host().name, ip.parse::<std::net::IpAddr>().unwrap()),
        "{}: host cannot reach the pod",
        env.label()
    );
    // containerd's CNI_ARGS and the port mapping reached the plugins: portmap tagged its
    // rules with the sandbox id.
    assert!(env.ids_in_rules().contains(&id), "{}", env.label());

    // Running the same id again answers with its status, without a new ADD.
    let again = env.run(&id, &[]);
    assert_eq!(again["ips"], run["ips"]);
    assert_eq!(env.leases().len(), 1);

    let st = env.status(&id);
    assert_eq!(st["state"], "ready");
    assert_eq!(st["pod"]["namespace"], "shop");
    assert_eq!(st["pod"]["labels"], serde_json::json!({"app": "web"}));
    assert_eq!(st["ips"], run["ips"]);

    env.pod_ok(&["stop", &id]);
    assert_eq!(env.status(&id)["state"], "stopped");
    assert!(
        env.leases().is_empty(),
        "{}: stop released the lease",
        env.label()
    );
    assert!(env.ids_in_rules().is_empty(), "{}", env.label());
    env.pod_ok(&["stop", &id]);
    env.pod_ok(&["rm", &id]);
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");

    // Status never fails: an unknown sandbox has an empty network status.
    let unknown = env.status(&id);
    assert_eq!(unknown["state"], serde_json::Value::Null);
    assert_eq!(unknown["ips"], serde_json::json!([]));
}

#[test]
fn kubelet_sequence_run_status_stop_stop_rm_with_rcni_plugins() {
    kubelet_sequence(Plugins::Rcni);
}

#[test]
fn kubelet_sequence_run_status_stop_stop_rm_with_go_plugins() {
    kubelet_sequence(Plugins::Go);
}

/// A /30 holds one pod: the second run fails in IPAM, is undone, and the first pod keeps
/// working.
fn run_failing_in_ipam(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(21, 30, ""));
    let first = env.new_id("ok");
    let ip = ip_of(&env.run(&first, &[]));
    let second = env.new_id("full");
    let out = env.pod(&["run", "pod", "--id", &second, "--port", "18081:80"]);
    assert_eq!(out.status.code(), Some(1), "{}", env.label());
    let err = text(&out.stderr);
    assert!(err.contains("host-local") || err.contains("IP"), "{err}");
    env.assert_only(&[(first.clone(), ip.clone())], "after the failed run");
    assert!(ping(
        &env.sb.host().name,
        ip.parse::<std::net::IpAddr>().unwrap()
    ));
    env.pod_ok(&["stop", &first]);
    env.pod_ok(&["rm", &first]);
    env.assert_only(&[], "after rm");
}

#[test]
fn run_failing_in_ipam_is_undone_with_rcni_plugins() {
    run_failing_in_ipam(Plugins::Rcni);
}

#[test]
fn run_failing_in_ipam_is_undone_with_go_plugins() {
    run_failing_in_ipam(Plugins::Go);
}

/// bridge, portmap, then a plugin that refuses ADD: the run fails with its code and leaves
/// nothing (veth, lease, portmap rules, cache, netns, record).
fn run_failing_in_the_third_plugin(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf(
        "10-pods.conflist",
        &env.pods_conflist(22, 24, r#",{"type":"flaky"}"#),
    );
    fs::write(env.test_bin.join("fail-add"), "").unwrap();
    let id = env.new_id("third");
    let out = env.pod(&["--json", "run", "pod", "--id", &id, "--port", "18082:80"]);
    assert_eq!(out.status.code(), Some(1), "{}", env.label());
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["code"], 100, "{err}");
    assert!(
        err["msg"].as_str().unwrap().contains("flaky"),
        "{}",
        err["msg"]
    );
    env.assert_only(&[], "after the failed run");
    assert_eq!(env.status(&id)["state"], serde_json::Value::Null);
}

#[test]
fn run_failing_in_the_third_plugin_leaves_nothing_with_rcni_plugins() {
    run_failing_in_the_third_plugin(Plugins::Rcni);
}

#[test]
fn run_failing_in_the_third_plugin_leaves_nothing_with_go_plugins() {
    run_failing_in_the_third_plugin(Plugins::Go);
}

/// The node lost the namespace (a reboot): stop still runs DEL, with an empty CNI_NETNS, and
/// the lease, rules and cache entries go.
fn netns_removed_before_stop(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(23, 24, ""));
    let id = env.new_id("gone");
    env.run(&id, &["--port", "18083:80"]);
    let del = std::process::Command::new("ip")
        .args(["netns", "del", &PodEnv::netns_name(&id)])
        .output()
        .unwrap();
    assert!(del.status.success());
    env.pod_ok(&["stop", &id]);
    assert!(env.leases().is_empty(), "{}", env.label());
    assert!(env.cache_entries().is_empty(), "{}", env.label());
    assert!(env.ids_in_rules().is_empty(), "{}", env.label());
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");
}

#[test]
fn netns_removed_before_stop_still_releases_everything_with_rcni_plugins() {
    netns_removed_before_stop(Plugins::Rcni);
}

#[test]
fn netns_removed_before_stop_still_releases_everything_with_go_plugins() {
    netns_removed_before_stop(Plugins::Go);
}

/// A process killed between unmounting the pod's namespace and unlinking its path leaves a
/// plain file there: stop treats it as a vanished namespace (empty `CNI_NETNS`, which Go's
/// plugins accept; they refuse the file itself), and rm removes the file.
fn netns_left_as_a_plain_file(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(36, 24, ""));
    let id = env.new_id("plain");
    env.run(&id, &["--port", "18086:80"]);
    let path = format!("/run/netns/{}", PodEnv::netns_name(&id));
    let umount = std::process::Command::new("umount")
        .arg(&path)
        .output()
        .unwrap();
    assert!(umount.status.success(), "{umount:?}");
    assert!(
        std::path::Path::new(&path).is_file(),
        "a plain file is left at {path}"
    );
    env.pod_ok(&["stop", &id]);
    assert!(env.leases().is_empty(), "{}", env.label());
    assert!(env.cache_entries().is_empty(), "{}", env.label());
    env.pod_ok(&["rm", &id]);
    assert!(
        !std::path::Path::new(&path).exists(),
        "{path} removed by rm"
    );
    env.assert_only(&[], "after rm");
}

#[test]
fn netns_left_as_a_plain_file_is_treated_as_gone_with_rcni_plugins() {
    netns_left_as_a_plain_file(Plugins::Rcni);
}

#[test]
fn netns_left_as_a_plain_file_is_treated_as_gone_with_go_plugins() {
    netns_left_as_a_plain_file(Plugins::Go);
}

/// The conflist is deleted while the pod runs: stop uses the config in the record.
fn conflist_removed_between_run_and_stop(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(24, 24, ""));
    let id = env.new_id("noconf");
    env.run(&id, &["--port", "18084:80"]);
    fs::remove_file(env.conf.join("10-pods.conflist")).unwrap();
    env.pod_ok(&["stop", &id]);
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");
}

#[test]
fn conflist_removed_between_run_and_stop_uses_the_recorded_config_with_rcni_plugins() {
    conflist_removed_between_run_and_stop(Plugins::Rcni);
}

#[test]
fn conflist_removed_between_run_and_stop_uses_the_recorded_config_with_go_plugins() {
    conflist_removed_between_run_and_stop(Plugins::Go);
}

/// The last plugin's DEL fails: stop still DELs portmap, bridge and host-local (lease gone),
/// reports the failure, and keeps the network attached in the record; once the plugin
/// recovers, a retry finishes.
fn stop_continues_past_a_failing_plugin(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf(
        "10-pods.conflist",
        &env.pods_conflist(25, 24, r#",{"type":"flaky"}"#),
    );
    let id = env.new_id("flaky");
    env.run(&id, &["--port", "18085:80"]);
    fs::write(env.test_bin.join("fail-del"), "").unwrap();
    let out = env.pod(&["stop", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", env.label());
    assert!(
        text(&out.stderr).contains("DEL refused"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        env.leases().is_empty(),
        "{}: host-local got its DEL",
        env.label()
    );
    assert!(
        env.ids_in_rules().is_empty(),
        "{}: portmap got its DEL",
        env.label()
    );
    let st = env.status(&id);
    assert_eq!(st["state"], "stopped");
    assert_eq!(st["networks"][1]["attached"], true, "{st}");
    assert_eq!(st["networks"][0]["attached"], false, "{st}");
    fs::remove_file(env.test_bin.join("fail-del")).unwrap();
    env.pod_ok(&["stop", &id]);
    assert_eq!(env.status(&id)["networks"][1]["attached"], false);
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");
}

#[test]
fn stop_continues_past_a_failing_plugin_and_a_retry_finishes_with_rcni_plugins() {
    stop_continues_past_a_failing_plugin(Plugins::Rcni);
}

#[test]
fn stop_continues_past_a_failing_plugin_and_a_retry_finishes_with_go_plugins() {
    stop_continues_past_a_failing_plugin(Plugins::Go);
}

/// Two pods talk to each other over the bridge (ping and HTTP), with the Go plugins too.
fn two_pods_talk(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(26, 24, ""));
    let a = env.new_id("a");
    let b = env.new_id("b");
    let ip_a: std::net::IpAddr = ip_of(&env.run(&a, &[])).parse().unwrap();
    let ip_b: std::net::IpAddr = ip_of(&env.run(&b, &[])).parse().unwrap();
    let server = http_server(&PodEnv::netns_name(&a), ip_a, 8080).unwrap();
    assert!(ping(&PodEnv::netns_name(&b), ip_a), "{}", env.label());
    http_get(&PodEnv::netns_name(&b), &server.url()).unwrap();
    drop(server);
    assert!(ping(&PodEnv::netns_name(&a), ip_b), "{}", env.label());
    for id in [&a, &b] {
        env.pod_ok(&["rm", id]);
    }
    env.assert_only(&[], "after rm");
}

#[test]
fn two_pods_reach_each_other_with_rcni_plugins() {
    two_pods_talk(Plugins::Rcni);
}

#[test]
fn two_pods_reach_each_other_with_go_plugins() {
    two_pods_talk(Plugins::Go);
}

// containerd's documented conf_template shape: ranges and routes through `range`.
const TEMPLATE: &str = r#"{"cniVersion":"1.1.0","name":"k8s-pod-network","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,
  "ipam":{"type":"host-local","dataDir":"IPAM_DIR",
   "ranges":[{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet":"{{$range}}"}]{{end}}],
   "routes":[{{range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst":"{{$route}}"}{{end}}]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

#[test]
fn update_cidr_then_ready_then_run_with_the_rendered_conflist() {
    let Some(env) = PodEnv::new(Plugins::Rcni) else {
        return;
    };
    let tpl = env.sb.dir().join("template.json");
    fs::write(
        &tpl,
        TEMPLATE.replace("IPAM_DIR", &env.ipam.display().to_string()),
    )
    .unwrap();
    let tpl = tpl.display().to_string();

    let out = env.pod(&["ready"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no network config"),
        "{}",
        text(&out.stderr)
    );

    let written = env.pod_ok(&["--conf-template", &tpl, "update-cidr", "198.18.30.0/24"]);
    assert!(written.contains("10-rcni-pod.conflist"), "{written}");
    assert_eq!(env.pod_ok(&["ready"]).trim(), "ready");

    let id = env.new_id("cidr");
    let ip = ip_of(&env.run(&id, &[]));
    assert!(ip.starts_with("198.18.30."), "{ip}");

    // A later CIDR leaves the existing file alone, as containerd does.
    let file = env.conf.join("10-rcni-pod.conflist");
    let before = fs::read(&file).unwrap();
    let again = env.pod_ok(&[
        "--json",
        "--conf-template",
        &tpl,
        "update-cidr",
        "198.18.31.0/24",
    ]);
    let again: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(again["written"], false);
    assert_eq!(fs::read(&file).unwrap(), before);

    // Without a template, update-cidr is a usage error.
    assert_eq!(
        env.pod(&["update-cidr", "198.18.31.0/24"]).status.code(),
        Some(2)
    );
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");
}

#[test]
fn exhausted_host_local_range_makes_ready_false_with_the_status_code() {
    let Some(env) = PodEnv::new(Plugins::Rcni) else {
        return;
    };
    // A 1.1.0 network whose /30 has room for one pod: STATUS reports it full after one run.
    env.write_conf(
        "10-pods.conflist",
        &env.pods_conflist(32, 30, "")
            .replace(r#""cniVersion":"1.0.0""#, r#""cniVersion":"1.1.0""#),
    );
    assert_eq!(env.pod_ok(&["ready"]).trim(), "ready");
    let id = env.new_id("full");
    env.run(&id, &[]);
    let out = env.pod(&["--json", "ready"]);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["ready"], false);
    let code = r["code"].as_u64().unwrap();
    assert!(code == 50 || code == 51, "{r}");
    assert!(r["reason"].as_str().unwrap().contains("\"pods\""), "{r}");
    env.pod_ok(&["rm", &id]);
    assert_eq!(env.pod_ok(&["ready"]).trim(), "ready");
    env.assert_only(&[], "after rm");
}

#[test]
fn ready_is_false_without_the_loopback_plugin() {
    let Some(env) = PodEnv::new(Plugins::Rcni) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(33, 24, ""));
    // Only the test plugins: no loopback.
    let out = env.pod_with_bins(&env.test_bin.display().to_string(), &["ready"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("loopback"),
        "{}",
        text(&out.stderr)
    );
}

/// `--network` twice: the first on eth0, the second on net1, each with its own bridge and
/// range; status lists eth0's address first; rm releases both.
fn two_networks(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(27, 24, ""));
    env.write_conf(
        "20-side.conflist",
        &env.pods_conflist(28, 24, "")
            .replace(r#""name":"pods""#, r#""name":"side""#)
            .replace(r#""bridge":"pod0""#, r#""bridge":"side0""#),
    );
    let id = env.new_id("multi");
    let st = env.run(&id, &["--network", "pods", "--network", "side"]);
    let ips: Vec<&str> = st["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ips.len(), 2, "{st}");
    assert!(ips[0].starts_with("198.18.27."), "{st}");
    assert!(ips[1].starts_with("198.18.28."), "{st}");
    let ns = PodEnv::netns_name(&id);
    assert!(link(&ns, "eth0").unwrap().is_some(), "{}", env.label());
    assert!(link(&ns, "net1").unwrap().is_some(), "{}", env.label());
    let names: Vec<&str> = st["networks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["ifname"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lo", "eth0", "net1"]);
    assert_eq!(env.leases().len(), 2);
    assert_eq!(env.cache_entries().len(), 3);
    env.pod_ok(&["rm", &id]);
    env.assert_only(&[], "after rm");
}

#[test]
fn extra_networks_get_net1_with_rcni_plugins() {
    two_networks(Plugins::Rcni);
}

#[test]
fn extra_networks_get_net1_with_go_plugins() {
    two_networks(Plugins::Go);
}

/// The first `rcni pod` after boot (no marker in the run dir) runs GC: a sandbox whose record
/// vanished keeps its lease, veth and cache entries until then. With the marker present, a
/// start only recovers and leaves them.
fn gc_on_start(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(34, 24, ""));
    let kept = env.new_id("kept");
    let kept_ip = ip_of(&env.run(&kept, &[]));
    let marker = env.run_files();
    assert_eq!(
        marker.len(),
        1,
        "the first start left its marker: {marker:?}"
    );
    assert!(marker[0].starts_with("pod-gc-"), "{marker:?}");
    let leaked = env.new_id("leaked");
    env.run(&leaked, &[]);
    fs::remove_file(env.state.join(format!("{leaked}.json"))).unwrap();

    // Marker present: nothing is collected.
    env.pod_ok(&["ls"]);
    assert_eq!(env.leases().len(), 2, "{}", env.label());
    assert_eq!(env.cache_entries().len(), 4, "{}", env.label());
    assert_eq!(env.host_veths(), 2, "{}", env.label());

    // Marker gone (the node rebooted): `ls` collects the leak, keeps the recorded sandbox
    // and writes the marker again.
    fs::remove_file(env.run.join(&marker[0])).unwrap();
    env.pod_ok(&["ls"]);
    assert_eq!(env.run_files(), marker);
    // The leaked sandbox's namespace is ours to remove (no record names it any more).
    let del = std::process::Command::new("ip")
        .args(["netns", "del", &PodEnv::netns_name(&leaked)])
        .output()
        .unwrap();
    assert!(del.status.success());
    env.assert_only(&[(kept.clone(), kept_ip.clone())], "after gc on start");
    assert!(ping(
        &env.sb.host().name,
        kept_ip.parse::<std::net::IpAddr>().unwrap()
    ));
}

#[test]
fn gc_on_start_collects_what_no_record_names_with_rcni_plugins() {
    gc_on_start(Plugins::Rcni);
}

#[test]
fn gc_on_start_collects_what_no_record_names_with_go_plugins() {
    gc_on_start(Plugins::Go);
}
