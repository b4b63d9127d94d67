//! Crashes and load for `rcni pod`:
//! - `rcni pod run` and `rcni pod stop` killed with SIGKILL at seeded random instants (the
//!   plugins they started live on in process groups of their own and finish after the kill), each followed by `rcni pod gc`: afterwards the
//!   node holds exactly what the ready sandboxes account for (leases, veths, cache entries,
//!   namespaces, rules, records), and two long-lived pods still reach each other (ping and
//!   HTTP) after every recovery.
//! - Many sandboxes run and removed concurrently: no failure, no duplicate address, nothing
//!   left.
//!
//! Counts are small in the default suite; `scripts/pod-soak` runs ≥ 50 kills and 100
//! sandboxes at concurrency 16 (env `RCNI_POD_KILLS`, `RCNI_POD_KILL_SEED`, `RCNI_POD_COUNT`,
//! `RCNI_POD_CONCURRENCY`, `RCNI_POD_PLUGINS=rcni|go|both`).

mod pod_env;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cni_testkit::{http_get, http_server, ping};
use pod_env::{ip_of, Plugins, PodEnv};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn plugin_sets() -> Vec<Plugins> {
    match std::env::var("RCNI_POD_PLUGINS").as_deref() {
        Ok("go") => vec![Plugins::Go],
        Ok("both") => vec![Plugins::Rcni, Plugins::Go],
        _ => vec![Plugins::Rcni],
    }
}

/// xorshift64*: a seeded, reproducible sequence of kill instants.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Starts `rcni pod <args>` and SIGKILLs its process group after `delay` (if still running).
/// Returns true when the kill landed before the process finished. The plugins rcni started
/// run in process groups of their own (as under a CRI runtime that is restarted): they
/// survive the kill and finish on their own, which `rcni pod gc` must wait for.
fn kill_after(env: &PodEnv, args: &[&str], delay: Duration) -> bool {
    let mut child = env.spawn(args);
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    // The child leads its own process group (`PodEnv::spawn`): nsenter and rcni, not the
    // plugins (cni-invoke gives each its own group).
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    assert!(pgid.as_raw() > 1);
    let killed = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).is_ok();
    let status = child.wait().unwrap();
    killed && std::os::unix::process::ExitStatusExt::signal(&status) == Some(9)
}

/// Ping both ways and an HTTP request between the two long-lived pods.
fn assert_pods_talk(env: &PodEnv, a: &(String, String), b: &(String, String), context: &str) {
    let ip_a: IpAddr = a.1.parse().unwrap();
    let ip_b: IpAddr = b.1.parse().unwrap();
    let ns_a = PodEnv::netns_name(&a.0);
    let ns_b = PodEnv::netns_name(&b.0);
    assert!(
        ping(&ns_a, ip_b),
        "{}: {context}: a cannot ping b",
        env.label()
    );
    assert!(
        ping(&ns_b, ip_a),
        "{}: {context}: b cannot ping a",
        env.label()
    );
    let server = http_server(&ns_a, ip_a, 8080).unwrap();
    let body = http_get(&ns_b, &server.url());
    assert!(
        body.is_ok(),
        "{}: {context}: HTTP b -> a: {body:?}",
        env.label()
    );
}

/// A plugin whose ADD stops half-way until `$dir/slow-go` exists (after saying so in
/// `$dir/slow-started`), then takes a "lease" `$dir/slow-leases/<id>-<ifname>` and prints a
/// result; its DEL releases the lease. `$dir/slow-done` marks the lease taken (before the
/// result, which a killed caller's closed pipe answers with SIGPIPE).
const SLOW_PLUGIN: &str = r#"#!/bin/sh
cat >/dev/null
dir=$(dirname "$0")
lease="$dir/slow-leases/$CNI_CONTAINERID-$CNI_IFNAME"
case "$CNI_COMMAND" in
ADD)
  touch "$dir/slow-started"
  while [ ! -e "$dir/slow-go" ]; do sleep 0.05; done
  mkdir -p "$dir/slow-leases" && echo "$CNI_CONTAINERID" > "$lease"
  touch "$dir/slow-done"
  echo '{"cniVersion":"1.0.0","ips":[{"address":"198.18.45.2/24"}]}' ;;
DEL) rm -f "$lease" ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
esac
exit 0
"#;

/// The root cause of the soak's leaked host-local lease: `rcni pod run` killed
/// while a plugin's ADD is under way; the plugin survives (its own process group) and takes
/// its lease after the kill. `gc` must not DEL the attachment before that plugin has exited
/// (it would find nothing to release, and the lease taken afterwards would stay forever):
/// it waits, then undoes the run, and nothing is left.
#[test]
fn gc_waits_for_the_surviving_plugin_of_a_killed_run_before_undoing_it() {
    let Some(env) = PodEnv::new(Plugins::Rcni) else {
        return;
    };
    let slow = env.test_bin.join("slow");
    std::fs::write(&slow, SLOW_PLUGIN).unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.write_conf(
        "10-slow.conflist",
        r#"{"cniVersion":"1.0.0","name":"slow","plugins":[{"type":"slow"}]}"#,
    );
    let flag = |name: &str| env.test_bin.join(name);
    let id = env.new_id("orphan");
    let mut run = env.spawn(&["run", "pod", "--id", &id]);
    while !flag("slow-started").exists() {
        assert!(
            run.try_wait().unwrap().is_none(),
            "run ended before its plugin started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap());
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
    run.wait().unwrap();
    assert!(!flag("slow-done").exists(), "the plugin finished too early");

    // gc either says it waits for the surviving plugin, or (the bug) is done without it.
    let mut gc = env.spawn_stderr(&["gc"]);
    let mut said = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(gc.stderr.take().unwrap())) {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains("waiting for the plugins") {
            break;
        }
    }
    std::fs::write(flag("slow-go"), "").unwrap();
    let status = gc.wait().unwrap();
    while !flag("slow-done").exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(status.success(), "gc failed: {said}");
    let leases = std::fs::read_dir(env.test_bin.join("slow-leases"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(
        leases, 0,
        "a lease taken after gc's DEL was left behind (gc said: {said})"
    );
    assert_eq!(env.status(&id)["state"], serde_json::Value::Null);
    env.assert_only(&[], "after gc");
}

fn kills(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    let count = env_usize("RCNI_POD_KILLS", 8);
    let seed = env_usize("RCNI_POD_KILL_SEED", 0x5eed) as u64;
    let mut rng = Rng(seed | 1);
    let mut conf = env.pods_conflist(40, 24, "");
    let mut ports: &[&str] = &["--port", "18091:80"];
    if plugins == Plugins::Go {
        // Debian's Go portmap (1.1.1) killed mid-ADD can leave a CNI-DN chain that its own DEL
        // then fails to delete ("CHAIN_DEL failed (Device or resource busy)"), so GC cannot
        // recover it: the Go chain here is bridge + host-local only.
        conf = conf.replace(
            r#",
  {"type":"portmap","capabilities":{"portMappings":true}}"#,
            "",
        );
        ports = &[];
    }
    env.write_conf("10-pods.conflist", &conf);

    let keepers: Vec<(String, String)> = ["keepa", "keepb"]
        .iter()
        .map(|tag| {
            let id = env.new_id(tag);
            let ip = ip_of(&env.run(&id, &[]));
            (id, ip)
        })
        .collect();
    // How long a run and a stop take here (median of three), to spread the kills over their
    // whole duration.
    let (mut runs, mut stops) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let probe = env.new_id("probe");
        let t = Instant::now();
        env.run(&probe, ports);
        runs.push(t.elapsed());
        let t = Instant::now();
        env.pod_ok(&["stop", &probe]);
        stops.push(t.elapsed());
        env.pod_ok(&["rm", &probe]);
    }
    runs.sort();
    stops.sort();
    let (run_time, stop_time) = (runs[1], stops[1]);
    env.assert_only(&keepers, "before the kills");

    // Kill instants are drawn from [0, scale × measured duration]; a kill that comes too late
    // (the process had finished) does not count and narrows the range, so `count` kills land
    // while the process runs even when the machine speeds up after the calibration.
    let (mut landed, mut attempts, mut scale) = (0, 0, 1.1f64);
    while landed < count && attempts < 4 * count {
        let i = attempts;
        attempts += 1;
        let id = env.new_id("k");
        let kill_run = i % 2 == 0;
        let context = format!(
            "attempt {i}, kill {landed} of {count} (seed {seed:#x}), {} of {id}",
            if kill_run { "run" } else { "stop" }
        );
        let span = |d: Duration| (d.as_micros() as f64 * scale) as u64;
        let hit = if kill_run {
            let delay = Duration::from_micros(rng.below(span(run_time)));
            let args = [&["run", "pod", "--id", &id][..], ports].concat();
            kill_after(&env, &args, delay)
        } else {
            env.run(&id, ports);
            let delay = Duration::from_micros(rng.below(span(stop_time)));
            kill_after(&env, &["stop", &id], delay)
        };
        if hit {
            landed += 1;
            scale = (scale * 1.1).min(1.1);
        } else {
            scale *= 0.7;
        }
        let gc = env.pod(&["gc"]);
        assert!(
            gc.status.success(),
            "{}: {context}: gc failed:\n{}",
            env.label(),
            pod_env::text(&gc.stderr)
        );
        // A run killed after it was ready, or a stop killed before it began, leaves a
        // sandbox that is still whole: the kubelet would stop and remove it; so do we.
        let st = env.status(&id);
        match st["state"].as_str() {
            None => {}
            Some("ready") => {
                assert_eq!(st["ips"].as_array().unwrap().len(), 1, "{context}: {st}");
                env.assert_only(
                    &[keepers.clone(), vec![(id.clone(), ip_of(&st))]].concat(),
                    &context,
                );
                env.pod_ok(&["rm", &id]);
            }
            Some("stopped") => env.pod_ok(&["rm", &id]).truncate(0),
            Some(other) => panic!("{context}: gc left the sandbox in {other}: {st}"),
        }
        env.assert_only(&keepers, &context);
        assert_pods_talk(&env, &keepers[0], &keepers[1], &context);
    }
    eprintln!(
        "{}: {landed} kills landed while rcni was running, in {attempts} attempts",
        env.label()
    );
    assert_eq!(
        landed, count,
        "only {landed} of {count} kills landed in {attempts} attempts"
    );
    for (id, _) in &keepers {
        env.pod_ok(&["stop", id]);
        env.pod_ok(&["rm", id]);
    }
    env.assert_only(&[], "after removing the long-lived pods");
}

#[test]
fn killed_runs_and_stops_leave_only_the_ready_sandboxes_after_gc() {
    for plugins in plugin_sets() {
        kills(plugins);
    }
}

fn concurrent(plugins: Plugins) {
    let Some(env) = PodEnv::new(plugins) else {
        return;
    };
    let count = env_usize("RCNI_POD_COUNT", 24);
    let concurrency = env_usize("RCNI_POD_CONCURRENCY", 8);
    env.write_conf("10-pods.conflist", &env.pods_conflist(41, 24, ""));
    let ids: Vec<String> = (0..count).map(|_| env.new_id("c")).collect();
    let next = AtomicUsize::new(0);
    let ips = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else { break };
                let out = env.pod(&["--json", "run", "pod", "--id", id]);
                if out.status.success() {
                    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    ips.lock().unwrap().push(ip_of(&st));
                } else {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{id}: {}", pod_env::text(&out.stderr)));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}: {failures:#?}", env.label());
    let ips = ips.into_inner().unwrap();
    let unique: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(unique.len(), count, "{}: duplicate addresses", env.label());
    let ready: Vec<(String, String)> = ids
        .iter()
        .map(|id| (id.clone(), ip_of(&env.status(id))))
        .collect();
    env.assert_only(&ready, "all running");

    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else { break };
                for verb in ["stop", "rm"] {
                    let out = env.pod(&[verb, id]);
                    if !out.status.success() {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{verb} {id}: {}", pod_env::text(&out.stderr)));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}: {failures:#?}", env.label());
    env.assert_only(&[], "all removed");
}

#[test]
fn sandboxes_run_concurrently_get_distinct_addresses_and_leave_nothing() {
    for plugins in plugin_sets() {
        concurrent(plugins);
    }
}
