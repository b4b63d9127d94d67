//! `rcni doctor explain` from the command line: text and JSON, argument and stdin.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const KUBELET_EVENT: &str = r#"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to destroy network for sandbox "7f1e": plugin type="portmap" failed (delete): netplugin failed with no error message: signal: killed"#;

#[test]
fn explain_places_a_kubelet_event_in_its_stage() {
    let out = Command::new(env!("CARGO_BIN_EXE_rcni"))
        .args(["--json", "doctor", "explain", KUBELET_EVENT])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stage"], "del");
    assert_eq!(v["cause"], "plugin-killed");
    assert_eq!(v["plugin"], "portmap");
}

#[test]
fn explain_reads_the_message_from_stdin() {
    let mut rcni = Command::new(env!("CARGO_BIN_EXE_rcni"));
    rcni.args(["doctor", "explain", "-"]);
    let out = with_stdin(rcni, b"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stage:   STATUS"), "{text}");
    assert!(text.contains("cni-not-initialized"), "{text}");
}

/// Runs `cmd` with `input` on its stdin; its output.
fn with_stdin(mut cmd: Command, input: &[u8]) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

// ---- the node audit and --fix, on planted leaks --------------------------------------------

use std::path::{Path, PathBuf};

use cni_testkit::{bin_path, is_root, link, PluginCall, Sandbox};

mod support;

struct Node {
    sb: Sandbox,
    conf: PathBuf,
    cache: PathBuf,
    ipam: PathBuf,
    plugins: PathBuf,
    /// The network's conflist.
    list: String,
}

const NET: &str = "docnet";

impl Node {
    /// A node whose network runs rcni's plugins.
    fn new() -> Node {
        Node::with(|sb| {
            let bin = bin_path("rcni-plugins").expect("build rcni-plugins first");
            let plugins = sb
                .link_plugins(bin, &["bridge", "host-local", "tuning"])
                .unwrap();
            (plugins, "1.1.0", "doc0", "198.18.93.0/24")
        })
    }

    /// A node whose network runs Debian's Go plugins (spec 1.0.0; ipMasq through iptables).
    fn go(go_dir: PathBuf) -> Node {
        Node::with(|_| (go_dir, "1.0.0", "godoc0", "198.18.94.0/24"))
    }

    /// A sandbox with the network's conflist (bridge + host-local + tuning) in its conf dir;
    /// `setup` gives the plugin dir, spec version, bridge name and subnet.
    fn with(
        setup: impl FnOnce(&Sandbox) -> (PathBuf, &'static str, &'static str, &'static str),
    ) -> Node {
        let sb = Sandbox::new().unwrap();
        let conf = sb.dir().join("net.d");
        let cache = sb.dir().join("cache");
        let ipam = sb.dir().join("ipam");
        std::fs::create_dir_all(&conf).unwrap();
        let (plugins, version, bridge, subnet) = setup(&sb);
        let list = format!(
            r#"{{"cniVersion":"{version}","name":"{NET}","plugins":[{{"type":"bridge","bridge":"{bridge}","isGateway":true,"ipMasq":true,
              "ipam":{{"type":"host-local","ranges":[[{{"subnet":"{subnet}"}}]],"dataDir":"{}"}}}},
              {{"type":"tuning","promisc":true,"dataDir":"{}"}}]}}"#,
            ipam.display(),
            sb.dir().join("tuning").display()
        );
        std::fs::write(conf.join("10-doc.conflist"), &list).unwrap();
        Node {
            sb,
            conf,
            cache,
            ipam,
            plugins,
            list,
        }
    }

    /// ADD of the network's chain run plugin by plugin, directly, as by a runtime that then
    /// lost its state: no cache entry will ever name it. Returns the host veth.
    fn orphan_add(&self, cid: &str, netns: &Path) -> String {
        let conf: Value = serde_json::from_str(&self.list).unwrap();
        let mut prev: Option<Value> = None;
        let mut veth = None;
        for plugin in conf["plugins"].as_array().unwrap() {
            let mut single = plugin.clone();
            single["cniVersion"] = conf["cniVersion"].clone();
            single["name"] = conf["name"].clone();
            if let Some(p) = &prev {
                single["prevResult"] = p.clone();
            }
            let call = PluginCall::new("ADD")
                .container_id(cid)
                .netns(netns)
                .ifname("eth0")
                .path(&self.plugins)
                .stdin(single.to_string());
            let r = self
                .sb
                .run_plugin(self.plugins.join(plugin["type"].as_str().unwrap()), &call)
                .unwrap();
            r.assert_success();
            let result = r.json().unwrap();
            veth.get_or_insert_with(|| {
                result["interfaces"][1]["name"]
                    .as_str()
                    .unwrap()
                    .to_string()
            });
            prev = Some(result);
        }
        veth.unwrap()
    }

    fn rcni(&self, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.sb.host().name])
            .arg(env!("CARGO_BIN_EXE_rcni"))
            .args(["--conf-dir", self.conf.to_str().unwrap()])
            .args(["--cache-dir", self.cache.to_str().unwrap()])
            .args(["--bin-dir", self.plugins.to_str().unwrap()])
            .args(args)
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("CNI_IFNAME")
            .output()
            .unwrap()
    }

    /// `rcni <verb> NET <netns>`, which must succeed; its stdout.
    #[track_caller]
    fn ok(&self, verb: &str, netns: &Path) -> Vec<u8> {
        let out = self.rcni(&[verb, NET, netns.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn leases(&self) -> Vec<String> {
        support::lease_files(&self.ipam.join(NET))
    }

    /// The audit's leaks that belong to this test (the machine may have others).
    fn audit(&self, fix: bool) -> (Vec<(String, String)>, Value) {
        let pod_state = self.sb.dir().join("pod-state");
        let mut args = vec![
            "--json",
            "doctor",
            "--pod-state-dir",
            pod_state.to_str().unwrap(),
        ];
        if fix {
            args.push("--fix");
        }
        let out = self.rcni(&args);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let mine: Vec<(String, String)> = v["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["network"] == NET)
            .map(|f| {
                (
                    f["kind"].as_str().unwrap().to_string(),
                    f["object"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        (mine, v)
    }
}

#[test]
fn doctor_finds_planted_leaks_and_fix_removes_only_them() {
    if !is_root() {
        eprintln!("SKIPPED: needs root for network namespaces");
        return;
    }
    let node = Node::new();
    let live = node.sb.add_container().unwrap();
    let orphan = node.sb.add_container().unwrap();
    let vanished = node.sb.add_container().unwrap();

    // A live attachment, through the runtime.
    node.ok("add", &live.path);
    // An attachment no runtime knows: the plugin run directly (a runtime that lost its state).
    let orphan_veth = node.orphan_add("leaked-orphan", &orphan.path);
    // An attachment whose sandbox died without DEL.
    node.ok("add", &vanished.path);
    node.sb.remove_container(&vanished).unwrap();
    assert_eq!(node.leases().len(), 3);

    let (found, report) = node.audit(false);
    let kinds: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert!(kinds.contains(&"cache-netns-gone"), "{report:#}");
    assert!(kinds.contains(&"lease"), "{report:#}");
    assert!(
        found.contains(&("veth".to_string(), orphan_veth.clone())),
        "{report:#}"
    );
    assert!(
        kinds.contains(&"nft-rule"),
        "the orphan's masquerade rules: {report:#}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "lease").count(),
        1,
        "{report:#}"
    );
    let orphan_backup = node.sb.dir().join("tuning").join("leaked-orphan_eth0.json");
    assert!(
        found.contains(&(
            "tuning-backup".to_string(),
            orphan_backup.display().to_string()
        )),
        "{report:#}"
    );
    // Read-only: nothing changed.
    assert_eq!(node.leases().len(), 3);
    assert!(orphan_backup.is_file());
    assert!(link(&node.sb.host().name, &orphan_veth).unwrap().is_some());

    let (left, report) = node.audit(true);
    assert!(left.is_empty(), "{report:#}");
    assert!(
        report["fixed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["error"].is_null()),
        "{report:#}"
    );
    assert_eq!(node.leases().len(), 1, "only the live lease is left");
    assert!(
        !orphan_backup.exists(),
        "rcni's tuning GC removes the orphan's backup"
    );
    let backups: Vec<String> = std::fs::read_dir(node.sb.dir().join("tuning"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(
        backups.len(),
        1,
        "only the live backup is left: {backups:?}"
    );
    assert!(link(&node.sb.host().name, &orphan_veth).unwrap().is_none());
    assert!(link(&orphan.name, "eth0").unwrap().is_none());
    // The live attachment is untouched.
    assert!(link(&live.name, "eth0").unwrap().is_some());
    node.ok("check", &live.path);
}

/// A process holding a namespace whose netns file was removed; killed (by PID) on drop.
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The kinds of all the report's leaks (this test's and any others on the machine).
fn kinds_of(report: &Value) -> Vec<&str> {
    report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect()
}

/// Asserts that a finding's `why` says `text`.
#[track_caller]
fn assert_why(finding: &Value, text: &str) {
    assert!(finding["why"].as_str().unwrap().contains(text), "{finding}");
}

fn finding<'a>(report: &'a Value, kind: &str, object: &str) -> Option<&'a Value> {
    report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind && f["object"] == object)
}

/// Leaks of the Go plugins: their orphaned host veths carry no tag and are found by what no
/// cached result names or by a peer no netns path reaches, and `--fix` leaves them (it cannot
/// attribute them to an attachment); a vanished sandbox's cache entry gets Go's DEL, an orphan
/// lease Go's DEL of the attachment it names (Go 1.1.1 has no GC), and a Go tuning backup,
/// which no Go DEL without the netns removes, stays reported with its removal command.
#[test]
fn doctor_reports_go_made_veths_and_fix_never_removes_them() {
    if !is_root() {
        eprintln!("SKIPPED: needs root for network namespaces");
        return;
    }
    let Some(go) = cni_testkit::go_plugins_dir() else {
        eprintln!("SKIPPED: Go reference plugins not installed (containernetworking-plugins)");
        return;
    };
    let node = Node::go(go);
    let live = node.sb.add_container().unwrap();
    let orphan = node.sb.add_container().unwrap();
    let vanished = node.sb.add_container().unwrap();
    let held = node.sb.add_container().unwrap();

    let live_result: Value = serde_json::from_slice(&node.ok("add", &live.path)).unwrap();
    let live_veth = live_result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let orphan_veth = node.orphan_add("go-orphan", &orphan.path);
    node.ok("add", &vanished.path);
    node.sb.remove_container(&vanished).unwrap();
    // A veth whose peer sits in a namespace that lost its netns file but is held by a process.
    let out = node
        .sb
        .exec_host([
            "ip",
            "link",
            "add",
            "vpeergone",
            "type",
            "veth",
            "peer",
            "name",
            "vpeergonep",
            "netns",
            &held.name,
        ])
        .unwrap();
    assert!(out.success(), "{out:?}");
    let _holder = Holder(
        Command::new("ip")
            .args(["netns", "exec", &held.name, "sleep", "300"])
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    node.sb.remove_container(&held).unwrap();

    let (_, report) = node.audit(false);
    let o = finding(&report, "veth-unattributed", &orphan_veth)
        .unwrap_or_else(|| panic!("Go orphan veth {orphan_veth} not found: {report:#}"));
    assert!(o["network"].is_null(), "{o}");
    assert_why(o, &format!("its peer is eth0 in {}", orphan.path.display()));
    assert_why(o, "godoc0");
    assert_eq!(
        o["remedy"].as_str().unwrap(),
        format!("not removed by --fix: nothing attributes it to a CNI attachment; once you know it is unused: ip link del {orphan_veth}")
    );
    let g = finding(&report, "veth-unattributed", "vpeergone")
        .unwrap_or_else(|| panic!("peer-gone veth not found: {report:#}"));
    assert_why(g, "no namespace a netns path names");
    assert!(
        report["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["object"] != live_veth.as_str()),
        "the live Go attachment's veth {live_veth} is named by its cached result: {report:#}"
    );
    let orphan_lease = node.ipam.join(NET).join(lease_of(&node, "go-orphan"));
    assert!(
        finding(&report, "lease", &orphan_lease.display().to_string()).is_some(),
        "{report:#}"
    );
    let kinds = kinds_of(&report);
    assert!(kinds.contains(&"cache-netns-gone"), "{report:#}");
    // Go's tuning backup of the orphan (promisc changed).
    let backup = node.sb.dir().join("tuning").join("go-orphan_eth0.json");
    assert!(backup.is_file());
    let b = finding(&report, "tuning-backup", &backup.display().to_string())
        .unwrap_or_else(|| panic!("Go tuning backup not found: {report:#}"));
    assert_eq!(b["network"], NET);

    // Go's ipMasq chain of the orphan, named as Go names it (SHA-512 of network + ID).
    let orphan_chain = go_chain(&format!("{NET}go-orphan"));
    let c = finding(&report, "go-masq-chain", &format!("nat/{orphan_chain}"))
        .unwrap_or_else(|| panic!("{orphan_chain} not found: {report:#}"));
    assert_why(c, "container \"go-orphan\"");
    assert!(c["network"].is_null());
    let live_cid = cached_cid(&node, &live.path);
    assert!(nat_chain_exists(
        &node,
        &go_chain(&format!("{NET}{live_cid}"))
    ));
    assert!(
        finding(
            &report,
            "go-masq-chain",
            &format!("nat/{}", go_chain(&format!("{NET}{live_cid}")))
        )
        .is_none(),
        "the live attachment's chain is not a leak: {report:#}"
    );

    let (_, report) = node.audit(true);
    assert!(
        nat_chain_exists(&node, &orphan_chain),
        "--fix touched Go's chain"
    );
    assert!(finding(&report, "go-masq-chain", &format!("nat/{orphan_chain}")).is_some());
    // What a cache entry attributes is gone through Go's own DEL ...
    let kinds = kinds_of(&report);
    assert!(!kinds.contains(&"cache-netns-gone"), "{report:#}");
    // ... and nothing unattributed was touched.
    assert!(link(&node.sb.host().name, &orphan_veth).unwrap().is_some());
    assert!(link(&node.sb.host().name, "vpeergone").unwrap().is_some());
    assert!(
        finding(&report, "veth-unattributed", &orphan_veth).is_some(),
        "{report:#}"
    );
    // Go 1.1.1 speaks no spec 1.1.0, so no GC can run; --fix says so, and releases the
    // orphan's lease through Go's DEL of the attachment the lease names.
    let fixed = report["fixed"].as_array().unwrap();
    assert!(
        fixed
            .iter()
            .any(|a| a["error"].as_str().is_some_and(|e| e.contains("1.1.0"))),
        "{report:#}"
    );
    assert!(
        fixed.iter().any(|a| a["error"].is_null()
            && a["action"]
                .as_str()
                .unwrap()
                .starts_with(&format!("DEL of {NET} container go-orphan interface eth0"))),
        "{report:#}"
    );
    assert!(!orphan_lease.exists(), "{report:#}");
    // Go's tuning DEL without a netns keeps its backup (and it has no GC): still reported,
    // with the file removal as the remedy, and left in place.
    let b = finding(&report, "tuning-backup", &backup.display().to_string())
        .unwrap_or_else(|| panic!("{report:#}"));
    assert!(
        b["remedy"]
            .as_str()
            .unwrap()
            .ends_with(&format!("rm {}", backup.display())),
        "{b}"
    );
    assert!(backup.is_file());
    assert!(
        report["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["kind"] != "lease"),
        "{report:#}"
    );
    // The live attachment is untouched.
    assert!(link(&node.sb.host().name, &live_veth).unwrap().is_some());
    node.ok("check", &live.path);
}

/// The lease file name (the address) host-local keeps for a container.
fn lease_of(node: &Node, cid: &str) -> String {
    std::fs::read_dir(node.ipam.join(NET))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_to_string(e.path()).is_ok_and(|c| c.starts_with(cid)))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("no lease of {cid}"))
}

/// `CNI-` and 24 hex digits of SHA-512, computed with sha512sum.
fn go_chain(text: &str) -> String {
    let out = with_stdin(Command::new("sha512sum"), text.as_bytes());
    format!("CNI-{}", &String::from_utf8_lossy(&out.stdout)[..24])
}

fn nat_chain_exists(node: &Node, chain: &str) -> bool {
    node.sb
        .exec_host(["nft", "list", "chain", "ip", "nat", chain])
        .unwrap()
        .success()
}

/// The container ID of the cached attachment in `netns`.
fn cached_cid(node: &Node, netns: &Path) -> String {
    std::fs::read_dir(node.cache.join("results"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap()).unwrap())
        .find(|v| v["netns"] == netns.to_str().unwrap())
        .map(|v| v["containerId"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no cached attachment in {}", netns.display()))
}

// ---- rcni pod records ------------------------------------------------------------------------

mod pod_env;

/// A sandbox whose netns vanished behind `rcni pod`'s back is a finding naming `rcni pod rm`;
/// `--fix` removes it (record, cache entries, lease) and leaves a live sandbox alone.
#[test]
fn doctor_finds_a_sandbox_without_its_netns_and_fix_removes_only_it() {
    let Some(env) = pod_env::PodEnv::new(pod_env::Plugins::Rcni) else {
        return;
    };
    env.write_conf("10-pods.conflist", &env.pods_conflist(35, 24, ""));
    let live = env.new_id("live");
    let live_ip = pod_env::ip_of(&env.run(&live, &[]));
    let gone = env.new_id("gone");
    env.run(&gone, &[]);
    let del = Command::new("ip")
        .args(["netns", "del", &pod_env::PodEnv::netns_name(&gone)])
        .output()
        .unwrap();
    assert!(del.status.success());

    let state = env.state.to_str().unwrap();
    let doctor = |fix: bool| -> Value {
        let mut args = vec!["--json", "doctor", "--pod-state-dir", state];
        if fix {
            args.push("--fix");
        }
        let out = env.rcni(&args);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    let sandbox_findings = |v: &Value| -> Vec<Value> {
        v["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "sandbox-netns-gone")
            .cloned()
            .collect()
    };

    let report = doctor(false);
    let found = sandbox_findings(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0]["object"], gone.as_str());
    assert_eq!(
        found[0]["remedy"],
        format!("rcni pod --state-dir {state} rm {gone}")
    );
    // Read-only: the record is still there.
    assert_eq!(env.record_files().len(), 2);

    let fixed = doctor(true);
    assert!(
        fixed["fixed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"] == format!("rcni pod rm {gone}") && a["error"].is_null()),
        "{fixed:#}"
    );
    assert!(sandbox_findings(&fixed).is_empty(), "{fixed:#}");
    env.assert_only(&[(live.clone(), live_ip.clone())], "after doctor --fix");
    assert_eq!(env.status(&live)["state"], "ready");
    assert!(cni_testkit::ping(
        &env.sb.host().name,
        live_ip.parse::<std::net::IpAddr>().unwrap()
    ));
}
