//! The rcni runtime driving Debian's Go reference plugins (/usr/lib/cni) with the conflists
//! containerd, CRI-O and podman ship, as root inside throwaway namespaces.
//!
//! `rcni` itself runs under `ip netns exec <host ns>`, so every plugin it starts (and the
//! iptables rules they make) live in the sandbox's throwaway "host" namespace. Only the IPAM
//! `dataDir` is changed from the shipped files; bridge names and subnets stay as shipped
//! because they only exist inside that namespace.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use cni_testkit::{addrs, link, links, Netns, PluginOutput, Sandbox};
use serde_json::Value;

/// The Go plugins, or `None` (with a message) when the test must be skipped.
fn go_plugins() -> Option<PathBuf> {
    let dir = PathBuf::from("/usr/lib/cni");
    if !dir.join("bridge").is_file() {
        eprintln!("skipped: Go reference plugins not installed (/usr/lib/cni/bridge is absent)");
        return None;
    }
    let root = fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("skipped: needs root for network namespaces");
        return None;
    }
    Some(dir)
}

struct Env {
    sb: Sandbox,
    go: PathBuf,
    extra_bin: PathBuf,
}

impl Env {
    fn new(go: PathBuf) -> Env {
        let sb = Sandbox::new().unwrap();
        for d in ["net.d", "cache", "ipam", "bin"] {
            fs::create_dir_all(sb.dir().join(d)).unwrap();
        }
        let extra_bin = sb.dir().join("bin");
        Env { sb, go, extra_bin }
    }

    fn conf_dir(&self) -> PathBuf {
        self.sb.dir().join("net.d")
    }
    fn cache(&self) -> PathBuf {
        self.sb.dir().join("cache")
    }
    fn ipam(&self) -> PathBuf {
        self.sb.dir().join("ipam")
    }

    /// Writes a conflist, with `@IPAM@` replaced by the sandbox's IPAM data directory (tuning
    /// keeps its backups beside it, never in the machine's `/run/cni/tuning`).
    fn conflist(&self, file: &str, text: &str) {
        let text = text.replace("@IPAM@", &self.ipam().display().to_string());
        fs::write(self.conf_dir().join(file), text).unwrap();
    }

    /// A fake plugin in the extra bin dir that fails ADD and succeeds at everything else.
    fn failing_plugin(&self, name: &str) {
        let p = self.extra_bin.join(name);
        fs::write(
            &p,
            "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then\n  echo '{\"code\":7,\"msg\":\"second plugin says no\"}'\n  exit 1\nfi\nexit 0\n",
        )
        .unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Runs `rcni <args>` inside the host namespace.
    fn rcni(&self, args: &[&str]) -> PluginOutput {
        let mut argv: Vec<String> = vec![
            env!("CARGO_BIN_EXE_rcni").to_string(),
            "--conf-dir".into(),
            self.conf_dir().display().to_string(),
            "--bin-dir".into(),
            self.go.display().to_string(),
            "--bin-dir".into(),
            self.extra_bin.display().to_string(),
            "--cache-dir".into(),
            self.cache().display().to_string(),
        ];
        argv.extend(args.iter().map(|s| s.to_string()));
        self.sb.exec_host(&argv).unwrap()
    }

    fn host(&self) -> &str {
        &self.sb.host().name
    }

    /// IP lease files host-local holds for network `net`.
    fn leases(&self, net: &str) -> Vec<String> {
        let Ok(dir) = fs::read_dir(self.ipam().join(net)) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    fn cache_files(&self) -> Vec<String> {
        let Ok(dir) = fs::read_dir(self.cache().join("results")) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()
    }

    /// Host-side veth interfaces.
    fn host_veths(&self) -> Vec<String> {
        links(self.host())
            .unwrap()
            .into_iter()
            .filter(|l| l["linkinfo"]["info_kind"] == "veth")
            .filter_map(|l| l["ifname"].as_str().map(String::from))
            .collect()
    }

    fn iptables_save(&self) -> String {
        let out = self.sb.exec_host(["iptables-save"]).unwrap();
        out.stdout
    }
}

fn ipv4_of(ns: &Netns, ifname: &str) -> Vec<String> {
    addrs(&ns.name)
        .unwrap()
        .into_iter()
        .filter(|l| l["ifname"] == ifname)
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["family"] == "inet")
        .filter_map(|a| a["local"].as_str().map(String::from))
        .collect()
}

/// The shared scenario: ADD, CHECK, DEL, re-ADD, DEL twice, with kernel and leftover checks.
fn lifecycle(env: &Env, net: &str, subnet_prefix: &str, leases: usize, check_supported: bool) {
    let ctr = env.sb.add_container().unwrap();
    let ctr_arg = ctr.path.display().to_string();

    // ADD
    let out = env.rcni(&["--json", "add", net, &ctr_arg]);
    out.assert_success();
    let result: Value = out.json().unwrap();
    let eth0 = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0")
        .cloned()
        .expect("eth0 in result");
    assert_eq!(eth0["sandbox"], ctr_arg.as_str());
    let ips = ipv4_of(&ctr, "eth0");
    assert_eq!(ips.len(), 1, "{ips:?}");
    assert!(ips[0].starts_with(subnet_prefix), "{ips:?}");
    assert!(
        result["ips"].to_string().contains(&ips[0]),
        "result {result} lacks {}",
        ips[0]
    );
    assert_eq!(env.host_veths().len(), 1);
    assert_eq!(env.leases(net).len(), leases);
    let files = env.cache_files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with(&format!("{net}-cnitool-")));
    assert!(files[0].ends_with("-eth0"));
    let entry = fs::read_to_string(env.cache().join("results").join(&files[0])).unwrap();
    assert!(entry.starts_with(r#"{"kind":"cniCacheV1","containerId":"cnitool-"#));
    // The entry is in Go's canonical encoding: decoding and re-encoding the way libcni
    // does gives the same bytes.
    let decoded = cni_runtime::CacheEntry::decode(entry.as_bytes()).unwrap();
    assert_eq!(decoded.to_go_json().unwrap(), entry);
    assert_eq!(decoded.netns, ctr_arg);
    let cid = files[0]
        .strip_prefix(&format!("{net}-"))
        .unwrap()
        .strip_suffix("-eth0")
        .unwrap()
        .to_string();
    assert_eq!(cid.len(), "cnitool-".len() + 20);

    // CHECK
    let out = env.rcni(&["--json", "check", net, &ctr_arg]);
    if check_supported {
        out.assert_success();
    } else {
        assert_eq!(out.status, 1, "{out}");
        assert_eq!(out.error_code(), Some(1), "{out}");
    }

    // DEL
    env.rcni(&["del", net, &ctr_arg]).assert_success();
    assert!(link(&ctr.name, "eth0").unwrap().is_none());
    assert!(env.host_veths().is_empty(), "{:?}", env.host_veths());
    assert!(env.leases(net).is_empty(), "{:?}", env.leases(net));
    assert!(env.cache_files().is_empty());
    assert!(
        !env.iptables_save().contains(&cid),
        "iptables rules for {cid} left:\n{}",
        env.iptables_save()
    );

    // re-ADD, then DEL twice
    env.rcni(&["add", net, &ctr_arg]).assert_success();
    assert_eq!(ipv4_of(&ctr, "eth0").len(), 1);
    env.rcni(&["del", net, &ctr_arg]).assert_success();
    env.rcni(&["del", net, &ctr_arg]).assert_success();
    assert!(link(&ctr.name, "eth0").unwrap().is_none());
    assert!(env.host_veths().is_empty());
    assert!(env.leases(net).is_empty());
}

const CONTAINERD: &str = r#"{
  "cniVersion": "0.4.0",
  "name": "containerd-net",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "promiscMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [
          [{"subnet": "198.18.0.0/16"}],
          [{"subnet": "2001:2::/64"}]
        ],
        "routes": [
          {"dst": "0.0.0.0/0"},
          {"dst": "::/0"}
        ],
        "dataDir": "@IPAM@"
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}"#;

const CRIO_IPV4: &str = r#"{
  "cniVersion": "0.3.1",
  "name": "crio",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "198.19.0.0/16"}]],
        "dataDir": "@IPAM@"
      }
    }
  ]
}"#;

const PODMAN: &str = r#"{
  "cniVersion": "0.4.0",
  "name": "podman",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni-podman0",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "198.18.0.0/16", "gateway": "198.18.0.1"}]],
        "dataDir": "@IPAM@"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"},
    {"type": "tuning", "dataDir": "@IPAM@-tuning"}
  ]
}"#;

#[test]
fn containerd_conflist_lifecycle() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist("10-containerd-net.conflist", CONTAINERD);
    lifecycle(&env, "containerd-net", "198.18.", 2, true);
}

#[test]
fn crio_conflist_lifecycle() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist("11-crio-ipv4-bridge.conflist", CRIO_IPV4);
    // 0.3.1 has no CHECK: rcni refuses it with code 1 without running anything.
    lifecycle(&env, "crio", "198.19.", 1, false);
}

#[test]
fn podman_conflist_lifecycle() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist("87-podman-bridge.conflist", PODMAN);
    lifecycle(&env, "podman", "198.18.", 1, true);
}

// Port mappings reach portmap through the capability args and vanish with DEL.
#[test]
fn podman_port_mapping_rules_follow_the_attachment() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist("87-podman-bridge.conflist", PODMAN);
    let ctr = env.sb.add_container().unwrap();
    let ctr_arg = ctr.path.display().to_string();
    env.rcni(&[
        "--capability-args",
        r#"{"portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp"}]}"#,
        "add",
        "podman",
        &ctr_arg,
    ])
    .assert_success();
    assert!(
        env.iptables_save().contains("18080"),
        "{}",
        env.iptables_save()
    );
    env.rcni(&["del", "podman", &ctr_arg]).assert_success();
    assert!(
        !env.iptables_save().contains("18080"),
        "{}",
        env.iptables_save()
    );
}

// GC (as libcni's `GCNetworkList`): without valid attachments every cached attachment is stale;
// with them, only the unlisted ones are deleted.
#[test]
fn gc_with_and_without_valid_attachments() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist("10-containerd-net.conflist", CONTAINERD);
    let a = env.sb.add_container().unwrap();
    let b = env.sb.add_container().unwrap();
    let (pa, pb) = (a.path.display().to_string(), b.path.display().to_string());
    env.rcni(&["--container-id", "ctr-a", "add", "containerd-net", &pa])
        .assert_success();
    env.rcni(&["--container-id", "ctr-b", "add", "containerd-net", &pb])
        .assert_success();
    // Dual stack: one IPv4 and one IPv6 lease per container.
    assert_eq!(env.leases("containerd-net").len(), 4);

    env.rcni(&["gc", "containerd-net", "--valid", "ctr-a:eth0"])
        .assert_success();
    assert_eq!(ipv4_of(&a, "eth0").len(), 1);
    assert!(link(&b.name, "eth0").unwrap().is_none());
    assert_eq!(env.leases("containerd-net").len(), 2);
    assert_eq!(env.cache_files(), ["containerd-net-ctr-a-eth0"]);
    assert_eq!(env.host_veths().len(), 1);

    env.rcni(&["gc", "containerd-net"]).assert_success();
    assert!(link(&a.name, "eth0").unwrap().is_none());
    assert!(env.leases("containerd-net").is_empty());
    assert!(env.cache_files().is_empty());
    assert!(env.host_veths().is_empty());
}

// A chain whose second plugin fails leaves nothing behind once rcni's ADD returns.
#[test]
fn failed_chain_is_rolled_back() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.failing_plugin("rcni-test-fail");
    env.conflist(
        "10-broken-chain.conflist",
        r#"{"cniVersion":"1.0.0","name":"broken","plugins":[
            {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,
             "ipam":{"type":"host-local","ranges":[[{"subnet":"198.19.77.0/24"}]],"dataDir":"@IPAM@"}},
            {"type":"rcni-test-fail"}]}"#,
    );
    let ctr = env.sb.add_container().unwrap();
    let out = env.rcni(&["add", "broken", &ctr.path.display().to_string()]);
    assert_eq!(out.status, 1, "{out}");
    assert!(out.stderr.contains("second plugin says no"), "{out}");
    assert!(out.stderr.contains("CNI error code 7"), "{out}");
    assert!(link(&ctr.name, "eth0").unwrap().is_none());
    assert!(env.host_veths().is_empty(), "{:?}", env.host_veths());
    assert!(
        env.leases("broken").is_empty(),
        "{:?}",
        env.leases("broken")
    );
    assert!(env.cache_files().is_empty());
    let rules = env.iptables_save();
    assert!(!rules.contains("198.19.77."), "{rules}");

    // --json: the error object on stdout.
    let out = env.rcni(&["--json", "add", "broken", &ctr.path.display().to_string()]);
    assert_eq!(out.error_code(), Some(7), "{out}");
}

// Version probing and validation against the Go plugins; loopback from the CRI-O conflist.
#[test]
fn version_validate_and_loopback() {
    let Some(go) = go_plugins() else { return };
    let env = Env::new(go);
    env.conflist(
        "99-loopback.conflist",
        r#"{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}"#,
    );
    env.conflist(
        "50-future.conflist",
        r#"{"cniVersion": "1.1.0", "name": "future", "plugins": [{"type": "loopback"}]}"#,
    );
    let out = env.rcni(&["validate", "loopback"]);
    out.assert_success();
    let out = env.rcni(&["validate", "future"]);
    assert_eq!(out.status, 1, "{out}");
    assert!(
        out.stderr.contains("does not support config version"),
        "{out}"
    );
    let out = env.rcni(&["--json", "version", "loopback"]);
    out.assert_success();
    let v = out.json().unwrap();
    assert_eq!(v["plugins"][0]["type"], "loopback");
    let ctr = env.sb.add_container().unwrap();
    let p = ctr.path.display().to_string();
    env.rcni(&["--ifname", "lo", "add", "loopback", &p])
        .assert_success();
    let lo = link(&ctr.name, "lo").unwrap().unwrap();
    assert!(lo["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
    env.rcni(&["--ifname", "lo", "check", "loopback", &p])
        .assert_success();
    env.rcni(&["--ifname", "lo", "del", "loopback", &p])
        .assert_success();
    // STATUS below 1.1.0 asks nothing and succeeds.
    env.rcni(&["status", "loopback"]).assert_success();
}
