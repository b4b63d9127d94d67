//! Kill at any point: SIGKILL ADDs and DELs at random instants, directly and
//! through `rcni add`/`rcni del`, then clean up with the runtime's DEL or with GC and an empty
//! valid list, and count what is left in the kernel and on disk.
//!
//! Scenarios: bridge+host-local+ipMasq, ptp+host-local+ipMasq, macvlan+host-local,
//! bridge+portmap, bridge+tuning, ptp+bandwidth. Each kill picks with a fixed seed
//! (`RCNI_KILLS_SEED`, default 10): the scenario (round robin), direct plugin run or `rcni`,
//! ADD or DEL, how the kill lands (the process group only, so delegated IPAM children in their
//! own group run on as orphans, or every process of the call), the instant (0 to 1 times the
//! duration of that call measured in a warm-up) and the cleanup (runtime DEL or GC). The harness waits
//! until no process of the killed call is left before it cleans up.
//!
//! `RCNI_KILLS` is the number of kills that land on a running call (default 36, for CI;
//! `scripts/kills` runs 300); calls that finished before their instant are run on top.
//! Leftovers are counted per scenario and kind and printed as a table. Every kind must be
//! zero, except the known leaks of [`KNOWN_LEAKS`] and those listed in `RCNI_KILLS_TOLERATE`
//! (comma-separated `scenario:kind`), which are reported but do not fail;
//! `RCNI_KILLS_STRICT=1` tolerates nothing.
//!
//! Needs the `rcni` binary next to `rcni-plugins` (`cargo build -p rcni` first; a workspace
//! test run builds it).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cni_testkit::{bin_path, Netns, PluginCall, Sandbox};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_rcni-plugins");
const PLUGINS: &[&str] = &[
    "bridge",
    "ptp",
    "macvlan",
    "host-local",
    "portmap",
    "tuning",
    "bandwidth",
];
const MASTER: &str = "kmst0";
const TAG_VAR: &str = "RCNI_KILLS_TAG";

/// Leaks this harness found whose fixes belong to the plugins' own attribution work (issue
/// 10); the plugin leaks are after direct plugin runs, which leave no runtime cache entry, so
/// GC has only the valid list. Remove an entry when its fix lands.
/// (host-local's empty lease files and hint temp files are gone since its store writes
/// through random temp files that are linked into place and swept under the lock; macvlan's
/// container links since each attachment's record gives GC its namespace and the link carries
/// its attachment's tag: `gc_removes_a_killed_macvlan_add`; bandwidth's IFBs a killed ADD
/// left in the container before moving them since bandwidth keeps such records too:
/// `gc_removes_a_killed_bandwidth_add`.)
const KNOWN_LEAKS: &[&str] = &[];

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    Direct,
    Runtime,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Add,
    Del,
}

/// One network: a conflist whose last plugin is the one killed in direct runs.
struct Scenario {
    name: &'static str,
    sb: Sandbox,
    dir: PathBuf,
    bin: PathBuf,
    net: String,
    plugins: Vec<Value>,
    cap_args: Value,
    /// Measured durations (ms) of unkilled calls: (via, op) -> ms.
    timing: BTreeMap<(u8, u8), u64>,
}

fn key(via: Via, op: Op) -> (u8, u8) {
    (via as u8, op as u8)
}

impl Scenario {
    fn new(index: u8, name: &'static str) -> Scenario {
        let sb = Sandbox::new().expect("sandbox (tests need root and iproute2)");
        let dir = sb.dir().to_path_buf();
        let bin = sb.link_plugins(BIN, PLUGINS).expect("plugin links");
        for d in ["net.d", "cache", "ipam", "tuning"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        let net = format!("kills-{name}");
        let subnet = format!("198.18.{}.0/24", 60 + index);
        let ipam = json!({"type": "host-local", "dataDir": dir.join("ipam"),
                          "ranges": [[{"subnet": subnet}]]});
        let bridge = json!({"type": "bridge", "bridge": format!("rkbr{index}"),
                            "isGateway": true, "ipMasq": true, "ipam": ipam});
        let ptp = json!({"type": "ptp", "ipMasq": true, "ipam": ipam});
        let plugins = match name {
            "bridge" => vec![bridge],
            "ptp" => vec![ptp],
            "macvlan" => {
                // No dummy driver on every kernel: a veth pair makes the master.
                for argv in [
                    &[
                        "ip", "link", "add", MASTER, "type", "veth", "peer", "name", "kmst0p",
                    ][..],
                    &["ip", "link", "set", MASTER, "up"],
                    &["ip", "link", "set", "kmst0p", "up"],
                ] {
                    sb.exec_host(argv).unwrap().assert_success();
                }
                vec![json!({"type": "macvlan", "master": MASTER, "ipam": ipam,
                            "dataDir": dir.join("sublink")})]
            }
            "portmap" => vec![
                bridge,
                json!({"type": "portmap", "capabilities": {"portMappings": true}}),
            ],
            "tuning" => vec![
                bridge,
                json!({"type": "tuning", "dataDir": dir.join("tuning"), "mtu": 1400,
                       "promisc": true, "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}}),
            ],
            "bandwidth" => vec![
                ptp,
                json!({"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 80_000,
                       "egressRate": 8_000_000, "egressBurst": 80_000,
                       "dataDir": dir.join("bandwidth")}),
            ],
            _ => unreachable!("{name}"),
        };
        let cap_args = if name == "portmap" {
            json!({"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]})
        } else {
            json!({})
        };
        let s = Scenario {
            name,
            sb,
            dir,
            bin,
            net,
            plugins,
            cap_args,
            timing: BTreeMap::new(),
        };
        s.write_conflist();
        s
    }

    fn host(&self) -> &str {
        &self.sb.host().name
    }

    /// The config plugin `i` of the chain gets, as libcni builds it.
    fn plugin_conf(&self, i: usize, prev: Option<&Value>) -> Value {
        let mut c = self.plugins[i].clone();
        c["cniVersion"] = json!("1.1.0");
        c["name"] = json!(self.net);
        if let Some(caps) = c.get("capabilities").and_then(Value::as_object).cloned() {
            let mut rc = serde_json::Map::new();
            for (k, on) in caps {
                if on == json!(true) {
                    if let Some(v) = self.cap_args.get(&k) {
                        rc.insert(k, v.clone());
                    }
                }
            }
            if !rc.is_empty() {
                c["runtimeConfig"] = Value::Object(rc);
            }
        }
        if let Some(prev) = prev {
            c["prevResult"] = prev.clone();
        }
        c
    }

    fn plugin_call(&self, command: &str, pod: &Netns, cid: &str, conf: &Value) -> PluginCall {
        PluginCall::new(command)
            .container_id(cid)
            .netns(&pod.path)
            .ifname("eth0")
            .path(&self.bin)
            .stdin(conf.to_string())
    }

    fn plugin_type(&self, i: usize) -> String {
        self.plugins[i]["type"].as_str().unwrap().to_string()
    }

    /// Runs plugins `0..upto` of the chain (ADD) to completion; returns the last result.
    fn add_prefix(&self, pod: &Netns, cid: &str, upto: usize) -> Option<Value> {
        let mut prev: Option<Value> = None;
        for i in 0..upto {
            let conf = self.plugin_conf(i, prev.as_ref());
            let out = self
                .sb
                .run_plugin(
                    self.bin.join(self.plugin_type(i)),
                    &self.plugin_call("ADD", pod, cid, &conf),
                )
                .unwrap();
            out.assert_success();
            prev = Some(out.json().unwrap());
        }
        prev
    }

    /// `rcni` in the sandbox's host namespace with this scenario's directories.
    fn rcni(&self, cid: &str, verb_args: &[&str]) -> Command {
        let rcni = bin_path("rcni").expect("the rcni binary (cargo build -p rcni)");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.host()]).arg(rcni);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("CNI_") || k == "NETCONFPATH" || k == "CAP_ARGS" {
                cmd.env_remove(k);
            }
        }
        cmd.arg("--conf-dir")
            .arg(self.dir.join("net.d"))
            .arg("--bin-dir")
            .arg(&self.bin)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .arg("--container-id")
            .arg(cid)
            .arg("--capability-args")
            .arg(self.cap_args.to_string())
            .args(verb_args);
        cmd
    }

    /// Runs `rcni` to completion; (success, output).
    /// The network's conflist of the scenario's plugins, in its conf dir for `rcni`.
    fn write_conflist(&self) {
        let list = json!({"cniVersion": "1.1.0", "name": self.net, "plugins": self.plugins});
        fs::write(
            self.dir
                .join("net.d")
                .join(format!("{}.conflist", self.net)),
            list.to_string(),
        )
        .unwrap();
    }

    /// GC with only the live attachment valid, after an ADD of `cid` in `pod` was killed at
    /// `step`: everything beyond `base` is gone, and the link `other0` planted there is not.
    #[track_caller]
    fn assert_gc_removes_only_the_killed(&self, pod: &Netns, cid: &str, base: &State, step: &str) {
        let (ok, out) = self.rcni_run(cid, &["gc", &self.net, "--valid", "live:eth0"]);
        assert!(ok, "{step}: GC: {out}");
        let left = self.state(Some(pod)).beyond(base);
        assert!(left.is_empty(), "{step}: left after GC: {left:?}");
        assert!(
            self.state(Some(pod)).0["container links"]
                .iter()
                .any(|l| l.starts_with("other0:")),
            "{step}: GC deleted a link that was not the attachment's"
        );
    }

    fn rcni_run(&self, cid: &str, verb_args: &[&str]) -> (bool, String) {
        let out = self.rcni(cid, verb_args).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// The command for the call to be killed: the last plugin of the chain (direct; the
    /// plugins before it have run) or `rcni add`/`rcni del` (runtime).
    fn killable(
        &self,
        via: Via,
        op: Op,
        pod: &Netns,
        cid: &str,
        added: Option<&Value>,
    ) -> Killable {
        match via {
            Via::Direct => {
                let last = self.plugins.len() - 1;
                let prev = match op {
                    Op::Add => self.add_prefix(pod, cid, last),
                    // DEL gets the ADD result, as libcni passes the cached one.
                    Op::Del => added.cloned(),
                };
                let command = if op == Op::Add { "ADD" } else { "DEL" };
                let conf = self.plugin_conf(last, prev.as_ref());
                let call = self.plugin_call(command, pod, cid, &conf);
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", self.host()])
                    .arg(self.bin.join(self.plugin_type(last)));
                for (k, _) in std::env::vars_os() {
                    if k.to_string_lossy().starts_with("CNI_") {
                        cmd.env_remove(k);
                    }
                }
                cmd.envs(call.env_vars());
                Killable {
                    cmd,
                    stdin: conf.to_string().into_bytes(),
                }
            }
            Via::Runtime => {
                let verb = if op == Op::Add { "add" } else { "del" };
                let path = pod.path.display().to_string();
                Killable {
                    cmd: self.rcni(cid, &[verb, &self.net, &path]),
                    stdin: Vec::new(),
                }
            }
        }
    }

    /// A complete, unkilled ADD through `via`; the chain's result.
    fn full_add(&self, via: Via, pod: &Netns, cid: &str) -> Value {
        match via {
            Via::Direct => self.add_prefix(pod, cid, self.plugins.len()).unwrap(),
            Via::Runtime => {
                let (ok, out) =
                    self.rcni_run(cid, &["add", &self.net, &pod.path.display().to_string()]);
                assert!(ok, "{}: rcni add failed: {out}", self.name);
                serde_json::from_str(&out).unwrap_or(Value::Null)
            }
        }
    }

    /// The kernel and disk state leftovers are counted against.
    fn state(&self, pod: Option<&Netns>) -> State {
        let mut s = State::default();
        let kinds = |ns: &str| -> Vec<String> {
            cni_testkit::links(ns)
                .unwrap()
                .iter()
                .filter_map(|l| {
                    let name = l["ifname"].as_str()?;
                    (name != "lo").then(|| {
                        format!(
                            "{name}:{}",
                            l["linkinfo"]["info_kind"].as_str().unwrap_or("?")
                        )
                    })
                })
                .collect()
        };
        s.add("host links", kinds(self.host()));
        if let Some(pod) = pod {
            s.add("container links", kinds(&pod.name));
            s.add("container qdiscs", qdiscs(&pod.name));
        }
        s.add("host qdiscs", qdiscs(self.host()));
        let (rules, chains) = nft(self.host());
        s.add("nft rules", rules);
        s.add("nft chains", chains);
        let lease_dir = self.dir.join("ipam").join(&self.net);
        let (temps, names): (Vec<String>, Vec<String>) = files(&lease_dir)
            .into_iter()
            .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
            .partition(|n| n.starts_with('.'));
        // The store's temp files (a kill during a write).
        s.add("host-local temp files", temps);
        let (empty, leases): (Vec<String>, Vec<String>) = names
            .into_iter()
            .partition(|n| fs::metadata(lease_dir.join(n)).is_ok_and(|m| m.len() == 0));
        // With the owner written in the file, so a leftover says whose it is.
        let leases = leases
            .into_iter()
            .map(|n| {
                let owner = fs::read_to_string(lease_dir.join(&n)).unwrap_or_default();
                format!("{n}={}", owner.replace("\r\n", "/"))
            })
            .collect();
        s.add("host-local files", leases);
        // Killed between creating a lease file and writing its owner into it.
        s.add("empty lease files", empty);
        s.add("tuning backups", files(&self.dir.join("tuning")));
        // The attachment records of the sub-link plugins (temp files included).
        s.add("sub-link records", files(&self.dir.join("sublink")));
        s.add("bandwidth records", files(&self.dir.join("bandwidth")));
        let results = files(&self.dir.join("cache").join("results"));
        let (temps, entries): (Vec<String>, Vec<String>) = results
            .into_iter()
            .partition(|n| n.starts_with(".rcni-tmp-"));
        s.add("cache entries", entries);
        s.add("cache temp files", temps);
        s
    }
}

struct Killable {
    cmd: Command,
    stdin: Vec<u8>,
}

/// Multisets of object descriptions per kind.
#[derive(Default, Clone)]
struct State(BTreeMap<&'static str, Vec<String>>);

impl State {
    fn add(&mut self, kind: &'static str, mut items: Vec<String>) {
        items.sort();
        self.0.insert(kind, items);
    }

    /// What `self` has beyond `base`, per kind.
    fn beyond(&self, base: &State) -> BTreeMap<&'static str, Vec<String>> {
        let mut out = BTreeMap::new();
        for (kind, items) in &self.0 {
            let mut rest: Vec<String> = base.0.get(kind).cloned().unwrap_or_default();
            let mut extra = Vec::new();
            for item in items {
                if let Some(i) = rest.iter().position(|r| r == item) {
                    rest.swap_remove(i);
                } else {
                    extra.push(item.clone());
                }
            }
            if !extra.is_empty() {
                out.insert(*kind, extra);
            }
        }
        out
    }
}

fn files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Qdiscs other than the kernel's defaults, as `dev:kind:parent`.
fn qdiscs(ns: &str) -> Vec<String> {
    cni_testkit::qdiscs(ns)
        .unwrap()
        .iter()
        .filter(|q| {
            !matches!(
                q["kind"].as_str(),
                Some("noqueue" | "pfifo_fast" | "fq_codel" | "mq" | "noop")
            )
        })
        .map(|q| {
            format!(
                "{}:{}:{}",
                q["dev"].as_str().unwrap_or("?"),
                q["kind"].as_str().unwrap_or("?"),
                q["parent"].as_str().unwrap_or("root")
            )
        })
        .collect()
}

/// nft rules (without handles) and chains of `ns`.
fn nft(ns: &str) -> (Vec<String>, Vec<String>) {
    let Some(ruleset) = cni_testkit::nft_json(ns).expect("nft -j list ruleset") else {
        return (Vec::new(), Vec::new());
    };
    let mut rules = Vec::new();
    let mut chains = Vec::new();
    for o in ruleset["nftables"].as_array().into_iter().flatten() {
        if let Some(r) = o.get("rule") {
            let mut r = r.clone();
            if let Some(m) = r.as_object_mut() {
                m.remove("handle");
            }
            rules.push(r.to_string());
        }
        if let Some(c) = o.get("chain") {
            chains.push(format!(
                "{} {} {}",
                c["family"].as_str().unwrap_or("?"),
                c["table"].as_str().unwrap_or("?"),
                c["name"].as_str().unwrap_or("?")
            ));
        }
    }
    (rules, chains)
}

/// Pids of live processes carrying `tag` in their environment.
fn tagged(tag: &str) -> Vec<i32> {
    let needle = format!("{TAG_VAR}={tag}");
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .collect()
}

/// How the kill went.
#[derive(Debug, PartialEq, Eq)]
enum Landed {
    /// The call was still running and was killed.
    Killed,
    /// The call had finished before the instant.
    Finished,
}

/// Spawns the call, kills it after `delay`, then waits until no process of it is left
/// (killing them all when `whole_tree`).
fn spawn_and_kill(mut k: Killable, tag: &str, delay: Duration, whole_tree: bool) -> Landed {
    let mut child = k
        .cmd
        .env(TAG_VAR, tag)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&k.stdin);
    }
    std::thread::sleep(delay);
    let landed = match child.try_wait().unwrap() {
        Some(_) => Landed::Finished,
        None => {
            let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
            let _ = killpg(pid, Signal::SIGKILL);
            if whole_tree {
                // Delegates run in process groups of their own: find them by the tag.
                for _ in 0..20 {
                    let pids = tagged(tag);
                    if pids.is_empty() {
                        break;
                    }
                    for p in pids {
                        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                    }
                }
            }
            Landed::Killed
        }
    };
    let _ = child.wait();
    // Orphans (a delegated host-local, a plugin `rcni` started) finish on their own. Three
    // empty scans in a row, so a process caught mid-exec is not missed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut empty_scans = 0;
    while empty_scans < 3 {
        assert!(
            Instant::now() < deadline,
            "processes of {tag} still running"
        );
        empty_scans = if tagged(tag).is_empty() {
            empty_scans + 1
        } else {
            0
        };
        std::thread::sleep(Duration::from_millis(5));
    }
    landed
}

#[derive(Default)]
struct Tally {
    kills: BTreeMap<(&'static str, &'static str), u32>,
    finished_first: BTreeMap<&'static str, u32>,
    leftovers: BTreeMap<(&'static str, &'static str), u32>,
    /// The first leftover of each (scenario, kind, context).
    examples: BTreeMap<(&'static str, &'static str, String), String>,
    /// Per (scenario, kind): how many calls left some, by "way, then cleanup".
    contexts: BTreeMap<(&'static str, &'static str), BTreeMap<String, u32>>,
    cleanup_failures: BTreeMap<&'static str, Vec<String>>,
}

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn kill_at_any_point_leaves_nothing_after_del_or_gc() {
    if bin_path("rcni").is_err() {
        panic!("the rcni binary is needed: cargo build -p rcni");
    }
    let total = env_u64("RCNI_KILLS", 36);
    let seed = env_u64("RCNI_KILLS_SEED", 10);
    let strict = std::env::var("RCNI_KILLS_STRICT").is_ok_and(|v| v == "1");
    let tolerate: BTreeSet<String> = std::env::var("RCNI_KILLS_TOLERATE")
        .unwrap_or_default()
        .split(',')
        .chain(KNOWN_LEAKS.iter().copied())
        .filter(|s| !s.is_empty() && !strict)
        .map(str::to_string)
        .collect();
    let names = ["bridge", "ptp", "macvlan", "portmap", "tuning", "bandwidth"];
    let mut scenarios: Vec<Scenario> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Scenario::new(i as u8, n))
        .collect();

    // Warm-up: one unkilled ADD and DEL per scenario and way, timed; shared objects (bridges,
    // nft tables) exist afterwards and belong to the baseline.
    for s in &mut scenarios {
        for via in [Via::Direct, Via::Runtime] {
            let pod = s.sb.add_container().unwrap();
            let cid = format!("warm-{}", via as u8);
            let t = Instant::now();
            let added = s.full_add(via, &pod, &cid);
            let add_ms = t.elapsed().as_millis() as u64;
            let t = Instant::now();
            match via {
                Via::Direct => {
                    let last = s.plugins.len() - 1;
                    let conf = s.plugin_conf(last, Some(&added));
                    s.sb.run_plugin(
                        s.bin.join(s.plugin_type(last)),
                        &s.plugin_call("DEL", &pod, &cid, &conf),
                    )
                    .unwrap()
                    .assert_success();
                    let del_ms = t.elapsed().as_millis() as u64;
                    s.timing.insert(key(via, Op::Del), del_ms);
                    let (ok, out) =
                        s.rcni_run(&cid, &["del", &s.net, &pod.path.display().to_string()]);
                    assert!(ok, "{}: warm-up DEL: {out}", s.name);
                    // The time of the killed direct ADD: the last plugin only.
                    let t = Instant::now();
                    let prev = s.add_prefix(&pod, &cid, last);
                    let prefix_ms = t.elapsed().as_millis() as u64;
                    let _ = prev;
                    let (ok, out) =
                        s.rcni_run(&cid, &["del", &s.net, &pod.path.display().to_string()]);
                    assert!(ok, "{}: warm-up DEL: {out}", s.name);
                    let last_ms = if last == 0 {
                        add_ms
                    } else {
                        add_ms.saturating_sub(prefix_ms).max(1)
                    };
                    s.timing.insert(key(via, Op::Add), last_ms);
                }
                Via::Runtime => {
                    let (ok, out) =
                        s.rcni_run(&cid, &["del", &s.net, &pod.path.display().to_string()]);
                    assert!(ok, "{}: warm-up DEL: {out}", s.name);
                    s.timing
                        .insert(key(via, Op::Del), t.elapsed().as_millis() as u64);
                    s.timing.insert(key(via, Op::Add), add_ms);
                }
            }
            s.sb.remove_container(&pod).unwrap();
        }
        let left = s.state(None).beyond(&State::default());
        eprintln!(
            "{}: baseline after warm-up {:?}; timings {:?}",
            s.name,
            left.keys().collect::<Vec<_>>(),
            s.timing
        );
    }

    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    // Calls that finished before their instant do not count: run until `total` kills landed
    // (at most 3 calls per kill).
    let mut landed_kills = 0;
    let mut i: u64 = 0;
    while landed_kills < total && i < 3 * total {
        i += 1;
        let s = &scenarios[(i % scenarios.len() as u64) as usize];
        let via = if rng.coin() {
            Via::Direct
        } else {
            Via::Runtime
        };
        let op = if rng.below(3) < 2 { Op::Add } else { Op::Del };
        let whole_tree = rng.coin();
        let use_gc = rng.coin();
        let ms = s.timing[&key(via, op)].max(2);
        let delay = Duration::from_micros(rng.below(ms * 1000 + 1));

        let pod = s.sb.add_container().unwrap();
        let base = s.state(Some(&pod));
        let cid = format!("k{i}");
        let added = (op == Op::Del).then(|| s.full_add(via, &pod, &cid));
        let tag = format!("{}-{i}", std::process::id());
        let killable = s.killable(via, op, &pod, &cid, added.as_ref());
        let landed = spawn_and_kill(killable, &tag, delay, whole_tree);
        let what = format!(
            "{via:?} {op:?} {} after {delay:?}",
            if whole_tree { "tree" } else { "group" }
        );
        let way = match (via, op) {
            (Via::Direct, Op::Add) => "direct ADD",
            (Via::Direct, Op::Del) => "direct DEL",
            (Via::Runtime, Op::Add) => "rcni add",
            (Via::Runtime, Op::Del) => "rcni del",
        };
        if landed == Landed::Killed {
            landed_kills += 1;
            *tally.kills.entry((s.name, way)).or_default() += 1;
        } else {
            *tally.finished_first.entry(s.name).or_default() += 1;
        }

        let path = pod.path.display().to_string();
        let (ok, out) = if use_gc {
            s.rcni_run(&cid, &["gc", &s.net])
        } else {
            s.rcni_run(&cid, &["del", &s.net, &path])
        };
        if !ok {
            tally
                .cleanup_failures
                .entry(s.name)
                .or_default()
                .push(format!(
                    "{what}, then {}: {}",
                    if use_gc { "GC" } else { "DEL" },
                    out.trim()
                ));
        }
        let after = s.state(Some(&pod));
        for (kind, items) in after.beyond(&base) {
            let k = (s.name, kind);
            *tally.leftovers.entry(k).or_default() += items.len() as u32;
            let cleanup = if use_gc { "GC" } else { "DEL" };
            let context = format!("{way}, then {cleanup}");
            *tally
                .contexts
                .entry(k)
                .or_default()
                .entry(context.clone())
                .or_default() += 1;
            tally
                .examples
                .entry((s.name, kind, context))
                .or_insert_with(|| format!("{what}, then {cleanup}: {items:?}"));
        }
        s.sb.remove_container(&pod).unwrap();
    }

    eprintln!("\n== kills (seed {seed}): {landed_kills} kills landed in {i} calls");
    for ((scenario, way), n) in &tally.kills {
        eprintln!("  {scenario:<10} {way:<11} {n}");
    }
    for (scenario, n) in &tally.finished_first {
        eprintln!("  {scenario:<10} finished before the kill: {n}");
    }
    eprintln!("== leftovers after DEL or GC");
    if tally.leftovers.is_empty() {
        eprintln!("  none");
    }
    let mut failing = Vec::new();
    for ((scenario, kind), n) in &tally.leftovers {
        let tolerated = tolerate.contains(&format!("{scenario}:{kind}"));
        eprintln!(
            "  {scenario:<10} {kind:<21} {n}{}",
            if tolerated { " (tolerated)" } else { "" },
        );
        for (context, calls) in &tally.contexts[&(*scenario, *kind)] {
            let example = &tally.examples[&(*scenario, *kind, context.clone())];
            eprintln!("      {calls} after {context}, e.g. {example}");
        }
        if !tolerated {
            failing.push(format!("{scenario}:{kind}={n}"));
        }
    }
    for (scenario, fails) in &tally.cleanup_failures {
        eprintln!(
            "== {scenario}: {} cleanup failures, e.g. {}",
            fails.len(),
            fails[0]
        );
        if !tolerate.contains(&format!("{scenario}:cleanup failures")) {
            failing.push(format!("{scenario}:cleanup failures={}", fails.len()));
        }
    }
    assert!(failing.is_empty(), "leftovers: {failing:?}");
}

/// `rcni add` killed after macvlan's ADD finished (the next plugin of the chain kills it):
/// GC with an empty valid list finds the entry the runtime wrote before the first plugin ran
/// and runs DEL with the container's netns, which removes the macvlan inside it and releases
/// the lease; without that entry GC cannot reach into the namespace at all.
#[test]
fn gc_after_a_killed_rcni_add_runs_del_in_the_containers_netns() {
    if bin_path("rcni").is_err() {
        panic!("the rcni binary is needed: cargo build -p rcni");
    }
    let mut s = Scenario::new(7, "macvlan");
    let killer = s.bin.join("kill-runtime");
    fs::write(
        &killer,
        "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then kill -9 $PPID; sleep 1; fi\n",
    )
    .unwrap();
    fs::set_permissions(&killer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    s.plugins.push(json!({"type": "kill-runtime"}));
    s.write_conflist();

    let pod = s.sb.add_container().unwrap();
    let base = s.state(Some(&pod));
    let path = pod.path.display().to_string();
    let (ok, out) = s.rcni_run("c1", &["add", &s.net, &path]);
    assert!(!ok, "rcni add was killed: {out}");
    assert_eq!(
        s.state(Some(&pod))
            .beyond(&base)
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [
            "cache entries",
            "container links",
            "host-local files",
            "sub-link records"
        ],
        "the killed ADD left its interface, lease, claim and record"
    );
    let (ok, out) = s.rcni_run("c1", &["gc", &s.net]);
    assert!(ok, "{out}");
    let left = s.state(Some(&pod)).beyond(&base);
    assert!(left.is_empty(), "left after GC: {left:?}");
}

/// A direct macvlan ADD killed at each of its steps (an abort at a known instant runs no undo,
/// like SIGKILL): no runtime cache entry exists, so GC (whose valid list holds only a live
/// attachment) has only the killed attachment's record to go by. It enters the recorded namespace, deletes the link carrying
/// the attachment's tag (and nothing else there), releases the lease and drops the record.
/// Before: the macvlan stayed in the container's namespace (GC gets no netns).
#[test]
fn gc_removes_a_killed_macvlan_add() {
    if bin_path("rcni").is_err() {
        panic!("the rcni binary is needed: cargo build -p rcni");
    }
    let s = Scenario::new(8, "macvlan");
    s.write_conflist();
    // A live attachment made through the runtime: GC must keep it.
    let live = s.sb.add_container().unwrap();
    s.full_add(Via::Runtime, &live, "live");
    let live_state = s.state(Some(&live));
    for (i, step) in ["record", "link", "ipam", "done"].into_iter().enumerate() {
        let pod = s.sb.add_container().unwrap();
        // A link of someone else in the same namespace: GC must leave it.
        s.sb.exec_in(
            &pod.name,
            [
                "ip", "link", "add", "other0", "type", "veth", "peer", "other1",
            ],
        )
        .unwrap()
        .assert_success();
        let base = s.state(Some(&pod));
        let cid = format!("killed{i}");
        let conf = s.plugin_conf(0, None);
        let call = s
            .plugin_call("ADD", &pod, &cid, &conf)
            .env("RCNI_TEST_ABORT_AT", format!("macvlan:{step}"));
        let out = s.sb.run_plugin(s.bin.join("macvlan"), &call).unwrap();
        assert!(!out.success(), "{step}: the ADD was aborted: {out}");
        let left = s.state(Some(&pod)).beyond(&base);
        assert!(
            left.contains_key("sub-link records"),
            "{step}: the record is written first: {left:?}"
        );
        if step != "record" {
            assert!(
                left.contains_key("container links"),
                "{step}: the aborted ADD left its link: {left:?}"
            );
        }
        s.assert_gc_removes_only_the_killed(&pod, &cid, &base, step);
        s.sb.remove_container(&pod).unwrap();
    }
    let now = s.state(Some(&live));
    assert!(
        now.beyond(&live_state).is_empty() && live_state.beyond(&now).is_empty(),
        "GC changed the live attachment: {:?} / {:?}",
        now.0,
        live_state.0
    );
}

/// A direct bandwidth ADD (after ptp's) killed at each of its steps, in particular after the
/// IFB was created in the container's namespace and before its move to the host (no alias
/// yet): GC, whose valid list holds only a live attachment, enters the recorded namespace and
/// deletes that IFB (and nothing else there), the host IFB by its tag, and the record.
/// Before: the IFB stayed in the container's namespace (GC gets no netns).
#[test]
fn gc_removes_a_killed_bandwidth_add() {
    if bin_path("rcni").is_err() {
        panic!("the rcni binary is needed: cargo build -p rcni");
    }
    let s = Scenario::new(9, "bandwidth");
    s.write_conflist();
    let live = s.sb.add_container().unwrap();
    s.full_add(Via::Runtime, &live, "live");
    let live_state = s.state(Some(&live));
    let steps = ["record", "ifb-in-container", "ifb", "filter", "done"];
    for (i, step) in steps.into_iter().enumerate() {
        let pod = s.sb.add_container().unwrap();
        // An IFB of someone else in the same namespace: GC must leave it.
        s.sb.exec_in(&pod.name, ["ip", "link", "add", "other0", "type", "ifb"])
            .unwrap()
            .assert_success();
        let base = s.state(Some(&pod));
        let cid = format!("killed{i}");
        let prev = s.add_prefix(&pod, &cid, 1);
        let conf = s.plugin_conf(1, prev.as_ref());
        let call = s
            .plugin_call("ADD", &pod, &cid, &conf)
            .env("RCNI_TEST_ABORT_AT", format!("bandwidth:{step}"));
        let out = s.sb.run_plugin(s.bin.join("bandwidth"), &call).unwrap();
        assert!(!out.success(), "{step}: the ADD was aborted: {out}");
        let left = s.state(Some(&pod)).beyond(&base);
        assert!(
            left.contains_key("bandwidth records"),
            "{step}: the record is written first: {left:?}"
        );
        if step == "ifb-in-container" {
            assert!(
                left.get("container links")
                    .is_some_and(|l| l.iter().any(|n| n.ends_with(":ifb"))),
                "{step}: the aborted ADD left its IFB in the container: {left:?}"
            );
        }
        s.assert_gc_removes_only_the_killed(&pod, &cid, &base, step);
        s.sb.remove_container(&pod).unwrap();
    }
    let now = s.state(Some(&live));
    assert!(
        now.beyond(&live_state).is_empty() && live_state.beyond(&now).is_empty(),
        "GC changed the live attachment: {:?} / {:?}",
        now.0,
        live_state.0
    );
}
