//! Root-only: SIGTERM stops `rcni-node` within its bound (2 s: 1.5 s for the graceful stop,
//! then blocking work still running is abandoned with the process) whatever it is doing. One
//! simulated node with a real containerd (pods through CRI, and the agent's GC of forgotten
//! sandboxes on it), and every task of the agent kept busy: policies and pods written to
//! etcd all along (enforcement), its nf_tables table deleted again and again (rule repair),
//! pods made and removed through CRI (the pod scan), and a GC round every second whose
//! `tuning` plugin takes 8 s to answer GC (a blocking task of the agent that outlives any
//! stop). The agent is stopped and started again many times, half of the stops while that
//! GC is running, and once more while etcd is frozen (SIGSTOP), so that the graceful stop
//! itself (the lease released with `--release-on-exit`) cannot finish. Skipped, saying
//! why, where containerd, crun, gcc or br_netfilter is missing.

mod harness;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::containerd::skip_without_containerd;
use harness::cri::PodSpec;
use harness::*;
use serde_json::json;

/// The documented bound, and the room a loaded test machine gets on top of it.
const BOUND: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_secs(1);
/// How long the slow plugin's GC takes.
const SLOW_GC: u64 = 8;

fn restarts() -> usize {
    std::env::var("RCNI_SHUTDOWN_RESTARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

/// Replaces the node's `tuning` with a wrapper whose GC takes [`SLOW_GC`] seconds (marking
/// `running` meanwhile) before the real plugin answers.
fn slow_gc_tuning(plugins: &Path, running: &Path) {
    let real = cni_testkit::bin_path("rcni-plugins").unwrap();
    let tuning = plugins.join("tuning");
    std::fs::remove_file(&tuning).unwrap();
    let script = format!(
        "#!/bin/bash\nif [ \"$CNI_COMMAND\" = GC ]; then\n  touch {m}\n  sleep {SLOW_GC}\n  rm -f {m}\nfi\nexec -a tuning {real} \"$@\"\n",
        m = running.display(),
        real = real.display()
    );
    std::fs::write(&tuning, script).unwrap();
    sh(&["chmod", "755", tuning.to_str().unwrap()]);
}

/// One node with containerd, an agent reclaiming forgotten sandboxes every second, and its
/// CRI socket linked.
fn node(running: &Path) -> Cluster {
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    slow_gc_tuning(&c.plugins, running);
    c.add_cri_node(&["--gc-interval", "1", "--release-on-exit"]);
    c
}

/// Threads that keep the agent's tasks busy until `stop`.
fn churn(c: &Cluster, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    // Enforcement: a policy selecting the pods and a pod record of another node, rewritten.
    let (host, url) = (c.sb.host().name.clone(), c.etcd_url.clone());
    let s = stop.clone();
    threads.push(std::thread::spawn(move || {
        let mut k = 0u32;
        while !s.load(Ordering::SeqCst) {
            let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "churn", "namespace": "default"},
                "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"k": k.to_string()}}}]}]}});
            let pod = json!({"namespace": "default", "name": "remote", "node": "elsewhere",
                "labels": {"k": k.to_string()}, "ips": [format!("198.19.200.{}", 1 + k % 200)]});
            for (key, value) in [
                (format!("{PREFIX}/policies/default/churn"), policy),
                (format!("{PREFIX}/pods/elsewhere/default/remote"), pod),
            ] {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "exec", &host, "etcdctl", "--endpoints", &url, "put", &key])
                    .arg(value.to_string())
                    .output();
            }
            k += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    }));
    // Rule repair: the agent's masquerade table deleted again and again.
    let (ns, s) = (c.nodes[0].ns.name.clone(), stop.clone());
    threads.push(std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            let _ = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &ns,
                    "nft",
                    "delete",
                    "table",
                    "ip",
                    "rcni-node",
                ])
                .output();
            std::thread::sleep(Duration::from_millis(150));
        }
    }));
    threads
}

/// SIGTERM to the agent of node 0; how long it took to exit (`None`: still running after
/// 30 s, then killed).
fn stop_agent(c: &mut Cluster) -> Option<Duration> {
    let mut child = c.nodes[0].agent.0.take().expect("a running agent");
    let started = Instant::now();
    sh(&["kill", "-TERM", &child.id().to_string()]);
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(_)) = child.try_wait() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn sigterm_stops_the_agent_within_its_bound_whatever_it_is_doing() {
    if skip_without_containerd() {
        return;
    }
    if !br_netfilter_loaded() {
        eprintln!("skipping: NetworkPolicy needs br_netfilter");
        return;
    }
    let running: PathBuf = std::env::temp_dir().join(format!("rcni-gc-{}", std::process::id()));
    let mut c = node(&running);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = churn(&c, &stop);
    let mut stops = Vec::new();
    let mut during_gc = 0;
    for round in 0..restarts() {
        // A pod made and one removed through CRI each round (the pod scan), then the stop:
        // on even rounds while the slow GC runs, on odd ones at once.
        let pod = c.run_pod(0, &PodSpec::named(&format!("churn-{round}")));
        if round % 2 == 0 {
            let gc = wait_for(Duration::from_secs(3 * SLOW_GC), || running.exists());
            assert!(gc.is_some(), "no GC round:\n{}", c.nodes[0].agent_log());
            during_gc += 1;
        }
        let took = stop_agent(&mut c);
        stops.push(took);
        c.remove_pod(pod);
        c.restart_agent(0);
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    // etcd frozen: releasing the lease would wait for its request timeout.
    let etcd = c.etcd.pid().unwrap().to_string();
    sh(&["kill", "-STOP", &etcd]);
    stops.push(stop_agent(&mut c));
    sh(&["kill", "-CONT", &etcd]);
    let _ = std::fs::remove_file(&running);
    eprintln!(
        "{during_gc} of {} stops during a GC, the last with etcd frozen: {stops:?}",
        stops.len()
    );
    let worst = stops
        .iter()
        .map(|s| s.unwrap_or(Duration::MAX))
        .max()
        .unwrap();
    assert!(
        worst <= BOUND + SLACK,
        "an agent took {worst:?} to stop after SIGTERM (bound {BOUND:?}): {stops:?}\n{}",
        c.nodes[0].agent_log()
    );
}
