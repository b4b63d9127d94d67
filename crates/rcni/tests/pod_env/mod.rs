//! The world of one `rcni pod` test: a throwaway host namespace (rcni runs inside it through
//! `nsenter --net`, so everything the plugins do lands there, and the namespaces it creates
//! are real bind mounts under /run/netns), conf/cache/state/IPAM dirs in scratch, a plugin
//! directory (rcni's multi-call binary or Debian's Go plugins) plus test plugins, and readers
//! of everything a sandbox can leave behind.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

use cni_testkit::{bin_path, go_plugins_dir, is_root, links, Sandbox};

/// Which plugins the sandboxes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugins {
    Rcni,
    Go,
}

/// A chained test plugin: ADD passes `prevResult` on (fails with code 100 when
/// `$CNI_FAIL_ADD_FLAG` exists), DEL fails with code 100 while `$CNI_FAIL_DEL_FLAG` exists.
const FLAKY_PLUGIN: &str = r#"#!/bin/sh
conf=$(cat)
dir=$(dirname "$0")
case "$CNI_COMMAND" in
ADD)
  if [ -e "$dir/fail-add" ]; then echo '{"cniVersion":"1.0.0","code":100,"msg":"flaky: ADD refused"}'; exit 1; fi
  printf '%s' "$conf" | jq -c '.prevResult' ;;
DEL)
  if [ -e "$dir/fail-del" ]; then echo '{"cniVersion":"1.0.0","code":100,"msg":"flaky: DEL refused"}'; exit 1; fi ;;
VERSION)
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
esac
exit 0
"#;

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct PodEnv {
    pub sb: Sandbox,
    pub plugins: Plugins,
    pub conf: PathBuf,
    pub state: PathBuf,
    pub cache: PathBuf,
    /// `--run-dir`: the gc-on-start marker of this env (never the machine's /run/rcni).
    pub run: PathBuf,
    pub ipam: PathBuf,
    /// The `--bin-dir` value.
    pub bin_dirs: String,
    /// Where the flaky plugin and its flag files live.
    pub test_bin: PathBuf,
    /// Every sandbox id of this env starts with it (and so its netns name).
    pub prefix: String,
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl PodEnv {
    /// `None` (and a message) when the test cannot run here.
    pub fn new(plugins: Plugins) -> Option<PodEnv> {
        if !is_root() {
            eprintln!("SKIPPED: needs root for network namespaces");
            return None;
        }
        let sb = Sandbox::new().unwrap();
        let test_bin = sb.dir().join("test-bin");
        fs::create_dir_all(&test_bin).unwrap();
        let flaky = test_bin.join("flaky");
        fs::write(&flaky, FLAKY_PLUGIN).unwrap();
        fs::set_permissions(&flaky, fs::Permissions::from_mode(0o755)).unwrap();
        let main_dir = match plugins {
            Plugins::Rcni => {
                let bin = bin_path("rcni-plugins").expect("build rcni-plugins first");
                sb.link_plugins(bin, &["loopback", "bridge", "host-local", "portmap"])
                    .unwrap()
            }
            Plugins::Go => match go_plugins_dir() {
                Some(d) => d,
                None => {
                    eprintln!("SKIPPED: Go reference plugins not installed in /usr/lib/cni");
                    return None;
                }
            },
        };
        let dir = sb.dir().to_path_buf();
        let prefix = format!(
            "t{}x{}x",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        Some(PodEnv {
            plugins,
            conf: dir.join("net.d"),
            state: dir.join("state"),
            cache: dir.join("cache"),
            run: dir.join("run"),
            ipam: dir.join("ipam"),
            bin_dirs: format!("{}:{}", main_dir.display(), test_bin.display()),
            test_bin,
            prefix,
            sb,
        })
    }

    pub fn label(&self) -> &'static str {
        match self.plugins {
            Plugins::Rcni => "rcni plugins",
            Plugins::Go => "Go plugins",
        }
    }

    /// The spec version both plugin sets speak (Debian's Go plugins stop at 1.0.0).
    pub fn version(&self) -> &'static str {
        "1.0.0"
    }

    /// Writes `<conf>/<file>`.
    pub fn write_conf(&self, file: &str, body: &str) {
        fs::create_dir_all(&self.conf).unwrap();
        fs::write(self.conf.join(file), body).unwrap();
    }

    /// bridge `pod0` + host-local on `198.18.<third>.0/<len>` + portmap, then `extra` plugins.
    pub fn pods_conflist(&self, third: u8, len: u8, extra: &str) -> String {
        format!(
            r#"{{"cniVersion":"{v}","name":"pods","plugins":[
  {{"type":"bridge","bridge":"pod0","isGateway":true,
    "ipam":{{"type":"host-local","ranges":[[{{"subnet":"198.18.{third}.0/{len}"}}]],"routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{ipam}"}}}},
  {{"type":"portmap","capabilities":{{"portMappings":true}}}}{extra}]}}"#,
            v = self.version(),
            ipam = self.ipam.display()
        )
    }

    /// A fresh sandbox id of this env.
    pub fn new_id(&self, tag: &str) -> String {
        format!(
            "{}{tag}{}",
            self.prefix,
            COUNTER.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_with_bins(&self.bin_dirs, args)
    }

    fn command_with_bins(&self, bin_dirs: &str, args: &[&str]) -> Command {
        let mut c = self.rcni_command(bin_dirs);
        c.arg("pod")
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--run-dir")
            .arg(&self.run)
            .args(args);
        c
    }

    /// `rcni <args>` (any verb) in the host namespace, with this env's dirs.
    pub fn rcni(&self, args: &[&str]) -> Output {
        let mut c = self.rcni_command(&self.bin_dirs);
        c.args(args).output().unwrap()
    }

    fn rcni_command(&self, bin_dirs: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.sb.host().path.display()))
            .arg(env!("CARGO_BIN_EXE_rcni"))
            .arg("--conf-dir")
            .arg(&self.conf)
            .arg("--bin-dir")
            .arg(bin_dirs)
            .arg("--cache-dir")
            .arg(&self.cache)
            .env_remove("CNI_ARGS")
            .env_remove("CAP_ARGS")
            .env_remove("NETCONFPATH")
            .env_remove("CNI_PATH")
            .env_remove("CNI_IFNAME")
            .stdin(Stdio::null());
        c
    }

    /// `rcni pod <args>` in the host namespace.
    pub fn pod(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `rcni --bin-dir <bin_dirs> pod <args>` in the host namespace.
    pub fn pod_with_bins(&self, bin_dirs: &str, args: &[&str]) -> Output {
        self.command_with_bins(bin_dirs, args).output().unwrap()
    }

    /// `rcni pod <args>`, which must succeed; its stdout.
    pub fn pod_ok(&self, args: &[&str]) -> String {
        let out = self.pod(args);
        assert!(
            out.status.success(),
            "{}: rcni pod {args:?} failed ({:?}):\n{}{}",
            self.label(),
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `rcni pod <args>` in a process group of its own (so a SIGKILL reaches its plugins).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    /// `rcni pod <args>` with its stderr piped to the caller.
    pub fn spawn_stderr(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Runs a sandbox with `--id`; returns its `--json` status.
    pub fn run(&self, id: &str, extra: &[&str]) -> Value {
        let mut args = vec!["--json", "run", "pod", "--id", id];
        args.extend_from_slice(extra);
        serde_json::from_str(&self.pod_ok(&args)).unwrap()
    }

    pub fn status(&self, id: &str) -> Value {
        serde_json::from_str(&self.pod_ok(&["--json", "status", id])).unwrap()
    }

    /// The netns name of a sandbox this env created.
    pub fn netns_name(id: &str) -> String {
        format!("rcni-{id}")
    }

    // ---- what a sandbox can leave behind -------------------------------------------------------

    pub fn host_veths(&self) -> usize {
        links(&self.sb.host().name)
            .unwrap()
            .iter()
            .filter(|l| l["linkinfo"]["info_kind"] == "veth")
            .count()
    }

    /// host-local lease files (named after their address) of every network.
    pub fn leases(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for net in fs::read_dir(&self.ipam).into_iter().flatten().flatten() {
            for f in fs::read_dir(net.path()).into_iter().flatten().flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.parse::<IpAddr>().is_ok() {
                    out.insert(name);
                }
            }
        }
        out
    }

    /// Result-cache entries (and temp files) of the runtime.
    pub fn cache_entries(&self) -> Vec<String> {
        names_in(&self.cache.join("results"))
    }

    /// Namespaces under /run/netns made for sandboxes of this env.
    pub fn netns_files(&self) -> Vec<String> {
        names_in(Path::new("/run/netns"))
            .into_iter()
            .filter(|n| n.starts_with(&format!("rcni-{}", self.prefix)))
            .collect()
    }

    /// The ids of this env named in the host's nftables or iptables rules.
    pub fn ids_in_rules(&self) -> BTreeSet<String> {
        let mut all = String::new();
        for argv in [&["nft", "list", "ruleset"][..], &["iptables-save"][..]] {
            if let Ok(out) = self.sb.exec_host(argv) {
                all.push_str(&out.stdout);
            }
        }
        all.split(|c: char| !(c.is_ascii_alphanumeric()))
            .filter(|w| w.starts_with(&self.prefix))
            .map(String::from)
            .collect()
    }

    /// Files in the `--run-dir` (the gc-on-start marker).
    pub fn run_files(&self) -> Vec<String> {
        names_in(&self.run)
    }

    /// Records (and temp files) in the state dir.
    pub fn record_files(&self) -> Vec<String> {
        names_in(&self.state)
            .into_iter()
            // The store's own: its lock, the sandbox locks, the marker saying every pending
            // record has its pending marker (`<id>.pending`, which must not outlive its verb),
            // and the spare files it recycles.
            .filter(|n| !["locks", ".lock", ".pending-complete", ".spare"].contains(&n.as_str()))
            .collect()
    }

    /// Asserts that what is on the node is exactly what the `ready` sandboxes (ids and IPs)
    /// account for: their leases, one veth and two cache entries (lo, eth0) each, their
    /// namespaces and records, and rules of nobody else.
    pub fn assert_only(&self, ready: &[(String, String)], context: &str) {
        let label = format!("{} ({context})", self.label());
        let ips: BTreeSet<String> = ready.iter().map(|(_, ip)| ip.clone()).collect();
        assert_eq!(self.leases(), ips, "{label}: leases");
        assert_eq!(self.host_veths(), ready.len(), "{label}: host veths");
        assert_eq!(
            self.cache_entries().len(),
            2 * ready.len(),
            "{label}: cache entries {:?}",
            self.cache_entries()
        );
        let mut want_ns: Vec<String> = ready.iter().map(|(id, _)| Self::netns_name(id)).collect();
        want_ns.sort();
        let mut ns = self.netns_files();
        ns.sort();
        assert_eq!(ns, want_ns, "{label}: netns files");
        let mut want_rec: Vec<String> = ready.iter().map(|(id, _)| format!("{id}.json")).collect();
        want_rec.sort();
        assert_eq!(self.record_files(), want_rec, "{label}: records");
        let ids: BTreeSet<String> = ready.iter().map(|(id, _)| id.clone()).collect();
        let stray: Vec<String> = self
            .ids_in_rules()
            .into_iter()
            .filter(|i| !ids.contains(i))
            .collect();
        assert!(
            stray.is_empty(),
            "{label}: rules of gone sandboxes {stray:?}"
        );
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

impl Drop for PodEnv {
    /// Removes every sandbox still recorded (through rcni), then any namespace of this env
    /// that is still there, so a failed test leaves nothing on the node.
    fn drop(&mut self) {
        for rec in names_in(&self.state) {
            if let Some(id) = rec.strip_suffix(".json") {
                let _ = self.pod(&["rm", id]);
            }
        }
        for ns in self.netns_files() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
    }
}

/// The first address of a `--json` status.
pub fn ip_of(status: &Value) -> String {
    status["ips"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no ip in {status}"))
        .to_string()
}
