//! Root-only measurement (ignored by default; `scripts/policy-scale` runs it): NetworkPolicy
//! at cluster scale. A real etcd in a throwaway underlay namespace is filled with the leases
//! of N remote nodes and their pods' records as `rcni-node` publishes them, namespaces and M
//! policies ([`workload`]); one real `rcni-node` (the build under test) runs on a simulated
//! node with a few real pods made by `rcni pod run --label`. Then changes elsewhere in the
//! cluster stream in. Printed as `RESULT` lines:
//!
//! - `fill`: what etcd holds (keys, MiB) and how long the fill took;
//! - `start`: from a restart of the agent to its first policy program committed (its
//!   `/metrics`, polled every 50 ms), CPU used until then;
//! - `objects`: the policy table's chains, rules, sets and elements (`nft -j list table`);
//! - `burst`: CPU per change over a burst of changes written back to back (`/proc/<pid>/stat`
//!   from before the burst until the agent is idle again, less its idle rate), and how long
//!   it took to drain;
//! - `pod-change` / `policy-change`: one change at a time, from the write's return to the
//!   kernel announcing it (`nft monitor` in the node's namespace: the element with the pod's
//!   address, or the ipBlock's CIDR; for a deleted policy the agent's next commit after which
//!   the table no longer mentions the CIDR), and the CPU of each change (to one tick, 10 ms);
//! - `memory`: resident memory after start and at the end, and its peak.
//!
//! What fails (no program committed, a change never reaching the kernel) is a `RESULT
//! failure` line with the agent's last warning, and the rest of that size is skipped.
//!
//! Size from the environment: `RCNI_SCALE_NODES` (5000), `RCNI_SCALE_PODS_PER_NODE` (30),
//! `RCNI_SCALE_POLICIES` (2000), `RCNI_SCALE_NAMESPACES` (200), `RCNI_SCALE_EVENTS` (300,
//! the burst), `RCNI_SCALE_PROBES` (20 of each kind).

#[path = "../harness/mod.rs"]
mod harness;

mod fill;
mod observe;
mod workload;

use std::time::{Duration, Instant};

use harness::netpol::rcni_pod;
use harness::*;
use observe::{metric, percentile, Monitor, Proc};
use serde_json::json;
use workload::Size;

/// How long a program or a change may take before it counts as failed.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(300);
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// The agent counts as idle after this long with at most one tick of CPU.
const QUIET: Duration = Duration::from_millis(1500);

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Plan {
    size: Size,
    events: u32,
    probes: u32,
}

impl Plan {
    fn from_env() -> Plan {
        Plan {
            size: Size {
                nodes: env("RCNI_SCALE_NODES", 5000),
                pods_per_node: env("RCNI_SCALE_PODS_PER_NODE", 30),
                policies: env("RCNI_SCALE_POLICIES", 2000),
                namespaces: env("RCNI_SCALE_NAMESPACES", 200),
            },
            events: env("RCNI_SCALE_EVENTS", 300),
            probes: env("RCNI_SCALE_PROBES", 20),
        }
    }

    /// `nodes=… pods=… policies=…`, the key of every RESULT line.
    fn tag(&self) -> String {
        let s = &self.size;
        format!(
            "nodes={} pods={} policies={}",
            s.nodes,
            s.nodes * s.pods_per_node,
            s.policies
        )
    }
}

#[test]
#[ignore = "measurement: scripts/policy-scale"]
fn networkpolicy_at_cluster_scale() {
    if skip_unless_root() {
        return;
    }
    if !br_netfilter_loaded() {
        eprintln!("skipping: NetworkPolicy needs br_netfilter");
        return;
    }
    let plan = Plan::from_env();
    let config = json!({"EnableIPv4": false, "EnableIPv6": true, "IPv6Network": CLUSTER_NET6,
                        "IPv6SubnetLen": 64, "Backend": {"Type": "host-gw"}});
    let mut c = Cluster::with_config(config);
    // `rcni pod run` attaches loopback too.
    let multi = cni_testkit::bin_path("rcni-plugins").unwrap();
    std::os::unix::fs::symlink(multi, c.plugins.join("loopback")).unwrap();
    let i = c.add_node();
    // Route resync every hour: its cost with thousands of remote nodes is not policy's.
    c.nodes[i].extra = vec!["--resync-interval".into(), "3600".into()];
    let underlay = cni_linux::NetNs::open(&c.sb.host().path).unwrap();
    underlay.run(|| scenario(&mut c, i, &plan)).unwrap();
}

fn scenario(c: &mut Cluster, i: usize, plan: &Plan) {
    let tag = plan.tag();
    let mut store = fill::Store::connect(&c.etcd_url, PREFIX);
    let took = store.fill(&plan.size);
    println!(
        "RESULT fill {tag} namespaces={} prefix_mib={:.1} fill_s={:.1}",
        plan.size.namespaces + 2,
        store.bytes as f64 / 1048576.0,
        took.as_secs_f64()
    );
    // First start, then the node's own pods, then the measured restart.
    let Some(_) = start(c, i, &tag, "first start") else {
        return;
    };
    add_local_pods(c, i, &plan.size);
    c.nodes[i].agent.terminate();
    let Some((agent, started)) = start(c, i, &tag, "restart") else {
        return;
    };
    let rss_start = agent.rss_mib();
    let objects = observe::objects(&c.nodes[i].ns.name, "rcni_policy");
    println!(
        "RESULT objects {tag} chains={} rules={} sets={} elements={}",
        objects.chains, objects.rules, objects.sets, objects.elements
    );
    let monitor = Monitor::start(&c.nodes[i].ns.name);
    let idle_rate = idle_rate(&agent);
    burst(&mut store, &agent, plan, idle_rate);
    pod_changes(c, i, &mut store, &agent, &monitor, plan, idle_rate);
    policy_changes(c, i, &mut store, &agent, &monitor, plan, idle_rate);
    let remote = plan.size.nodes * plan.size.pods_per_node;
    println!(
        "RESULT memory {tag} rss_after_start_mib={rss_start:.1} rss_end_mib={:.1} peak_rss_mib={:.1} \
         kib_per_remote_pod={:.2} start_cpu_s={:.2}",
        agent.rss_mib(),
        agent.peak_rss_mib(),
        rss_start * 1024.0 / f64::from(remote.max(1)),
        started.as_secs_f64()
    );
}

/// Spawns the agent of node `i` and waits for its first policy program; the process and the
/// CPU it used until then. `None` (with a failure line) when it never programs.
fn start(c: &mut Cluster, i: usize, tag: &str, what: &str) -> Option<(Proc, Duration)> {
    let _ = std::fs::remove_file(c.nodes[i].status_file());
    let t0 = Instant::now();
    c.spawn_agent(i);
    let agent = Proc::new(c.nodes[i].agent.pid().unwrap());
    let node = &c.nodes[i];
    let (mut healthy, mut programmed) = (None, None);
    poll_every(Duration::from_millis(50), PROGRAM_TIMEOUT, || {
        if healthy.is_none() && node.healthy() {
            healthy = Some(t0.elapsed());
        }
        let text = node.health_get("/metrics").unwrap_or_default();
        let synced = metric(&text, "rcni_node_policy_last_sync_timestamp_seconds");
        if programmed.is_none() && synced.is_some_and(|t| t > 0.0) {
            programmed = Some(t0.elapsed());
        }
        healthy.is_some() && programmed.is_some()
    });
    let Some(programmed) = programmed else {
        failure(
            c,
            i,
            tag,
            &format!("{what}: no policy program in {PROGRAM_TIMEOUT:?}"),
        );
        return None;
    };
    let cpu = agent.cpu();
    let text = node.health_get("/metrics").unwrap_or_default();
    println!(
        "RESULT start {tag} case={} healthy_s={:.2} program_s={:.2} cpu_s={:.2} rss_mib={:.1} \
         set_elements={} sync_errors={}",
        what.replace(' ', "-"),
        healthy.map_or(f64::NAN, |h| h.as_secs_f64()),
        programmed.as_secs_f64(),
        cpu.as_secs_f64(),
        agent.rss_mib(),
        metric(&text, "rcni_node_policy_set_elements").unwrap_or(f64::NAN),
        metric(&text, "rcni_node_policy_sync_errors_total").unwrap_or(f64::NAN),
    );
    agent.wait_idle(QUIET, PROGRAM_TIMEOUT);
    Some((agent, cpu))
}

/// A failure line: what failed, whether the node still says healthy, and the agent's last
/// warning.
fn failure(c: &Cluster, i: usize, tag: &str, what: &str) {
    let log = c.nodes[i].agent_log();
    let last = log
        .lines()
        .rev()
        .find(|l| l.contains(": warn: ") || l.contains(": error: "))
        .unwrap_or("(no warning)");
    let last: String = last.chars().take(300).collect();
    println!(
        "RESULT failure {tag} what=\"{what}\" healthy={} last_warning=\"{last}\"",
        c.nodes[i].healthy()
    );
}

/// The node's own pods, made with `rcni pod run --label` and the agent's conflist.
fn add_local_pods(c: &Cluster, i: usize, size: &Size) {
    for (ns, name, labels) in workload::local_pods(size) {
        let netns = c.sb.add_container().unwrap();
        let path = netns.path.to_string_lossy().into_owned();
        let id = format!("{ns}-{name}");
        let mut args = vec![
            "run".to_string(),
            name,
            "--namespace".into(),
            ns,
            "--id".into(),
            id,
            "--netns".into(),
            path,
        ];
        for (k, v) in labels {
            args.extend(["--label".into(), format!("{k}={v}")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rcni_pod(c, i, &args);
    }
}

/// The agent's CPU per second while nothing changes (its status file, pod scan, renewals).
fn idle_rate(agent: &Proc) -> f64 {
    let (t, cpu) = (Instant::now(), agent.cpu());
    std::thread::sleep(Duration::from_secs(5));
    (agent.cpu() - cpu).as_secs_f64() / t.elapsed().as_secs_f64()
}

/// CPU of `agent` since `since` (at `cpu0`), less its idle rate.
fn net_cpu(agent: &Proc, cpu0: Duration, since: Instant, idle_rate: f64) -> f64 {
    let used = (agent.cpu() - cpu0).as_secs_f64();
    (used - idle_rate * since.elapsed().as_secs_f64()).max(0.0)
}

fn burst(store: &mut fill::Store, agent: &Proc, plan: &Plan, idle_rate: f64) {
    let changes = workload::changes(&plan.size, plan.events, 1);
    let (t0, cpu0) = (Instant::now(), agent.cpu());
    for change in &changes {
        store.apply(change);
    }
    let written = t0.elapsed();
    let drained = agent.wait_idle(QUIET, PROGRAM_TIMEOUT);
    let cpu = net_cpu(agent, cpu0, t0, idle_rate);
    println!(
        "RESULT burst {} events={} written_s={:.2} drained_s={} cpu_ms_per_event={:.2} idle_cpu_pct={:.2}",
        plan.tag(),
        changes.len(),
        written.as_secs_f64(),
        drained.map_or("never".into(), |d| format!("{:.2}", d.as_secs_f64())),
        cpu * 1e3 / changes.len() as f64,
        idle_rate * 100.0
    );
}

/// Times and CPU of paced changes: `write` makes change `k`, `seen` waits for the kernel
/// to hold it (its arrival instant).
struct Paced {
    latency_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
}

impl Paced {
    fn new() -> Paced {
        Paced {
            latency_ms: Vec::new(),
            cpu_ms: Vec::new(),
        }
    }

    /// One change; false when the kernel never held it.
    fn one(
        &mut self,
        agent: &Proc,
        idle_rate: f64,
        write: impl FnOnce(),
        seen: impl FnOnce() -> Option<Instant>,
    ) -> bool {
        let (t0, cpu0) = (Instant::now(), agent.cpu());
        write();
        let written = Instant::now();
        let Some(at) = seen() else { return false };
        self.latency_ms
            .push(at.saturating_duration_since(written).as_secs_f64() * 1e3);
        agent.wait_idle(QUIET, CHANGE_TIMEOUT);
        self.cpu_ms.push(net_cpu(agent, cpu0, t0, idle_rate) * 1e3);
        true
    }

    fn summary(&self) -> String {
        let mean = self.cpu_ms.iter().sum::<f64>() / self.cpu_ms.len().max(1) as f64;
        format!(
            "n={} latency_p50_ms={:.1} latency_p99_ms={:.1} latency_max_ms={:.1} cpu_p50_ms={:.0} cpu_p99_ms={:.0} cpu_mean_ms={:.1}",
            self.latency_ms.len(),
            percentile(&self.latency_ms, 50.0),
            percentile(&self.latency_ms, 99.0),
            percentile(&self.latency_ms, 100.0),
            percentile(&self.cpu_ms, 50.0),
            percentile(&self.cpu_ms, 99.0),
            mean
        )
    }
}

/// Probe pods matched by the probe policy start and stop on a remote node, one at a time.
fn pod_changes(
    c: &Cluster,
    i: usize,
    store: &mut fill::Store,
    agent: &Proc,
    monitor: &Monitor,
    plan: &Plan,
    idle_rate: f64,
) {
    let (mut added, mut deleted) = (Paced::new(), Paced::new());
    for k in 1..=plan.probes {
        let pod = workload::probe_pod(k);
        let element = format!("{{ {} }}", pod.ips[0]);
        let mark = monitor.mark();
        let ok = added.one(
            agent,
            idle_rate,
            || store.put_pod(&pod),
            || {
                monitor
                    .wait(mark, CHANGE_TIMEOUT, |l| {
                        l.starts_with("add element") && l.contains(&element)
                    })
                    .map(|(at, _)| at)
            },
        );
        if !ok {
            failure(
                c,
                i,
                &plan.tag(),
                &format!("pod {} never in the kernel", pod.ips[0]),
            );
            break;
        }
        let mark = monitor.mark();
        let ok = deleted.one(
            agent,
            idle_rate,
            || store.delete_pod(&pod.node, &pod.namespace, &pod.name),
            || {
                monitor
                    .wait(mark, CHANGE_TIMEOUT, |l| {
                        l.starts_with("delete element") && l.contains(&element)
                    })
                    .map(|(at, _)| at)
            },
        );
        if !ok {
            failure(
                c,
                i,
                &plan.tag(),
                &format!("pod {} never left the kernel", pod.ips[0]),
            );
            break;
        }
    }
    println!(
        "RESULT pod-change {} kind=start {}",
        plan.tag(),
        added.summary()
    );
    println!(
        "RESULT pod-change {} kind=stop {}",
        plan.tag(),
        deleted.summary()
    );
}

/// Policies letting an ipBlock reach a local pod are added and deleted, one at a time.
fn policy_changes(
    c: &Cluster,
    i: usize,
    store: &mut fill::Store,
    agent: &Proc,
    monitor: &Monitor,
    plan: &Plan,
    idle_rate: f64,
) {
    let ns = &c.nodes[i].ns.name;
    let (mut added, mut deleted) = (Paced::new(), Paced::new());
    for k in 1..=plan.probes {
        let (pns, name, doc, cidr) = workload::probe_block_policy(&plan.size, k);
        let mark = monitor.mark();
        let ok = added.one(
            agent,
            idle_rate,
            || store.put_policy(&pns, &name, &doc),
            || {
                monitor
                    .wait(mark, CHANGE_TIMEOUT, |l| {
                        l.starts_with("add") && l.contains(&cidr)
                    })
                    .map(|(at, _)| at)
            },
        );
        if !ok {
            failure(
                c,
                i,
                &plan.tag(),
                &format!("policy {name} never in the kernel"),
            );
            break;
        }
        let mark = monitor.mark();
        let ok = deleted.one(
            agent,
            idle_rate,
            || store.delete_policy(&pns, &name),
            || agent_commit_without(monitor, mark, ns, &cidr),
        );
        if !ok {
            failure(
                c,
                i,
                &plan.tag(),
                &format!("policy {name} never left the kernel"),
            );
            break;
        }
    }
    println!(
        "RESULT policy-change {} kind=add {}",
        plan.tag(),
        added.summary()
    );
    println!(
        "RESULT policy-change {} kind=delete {}",
        plan.tag(),
        deleted.summary()
    );
}

/// The first commit after `mark` after which the policy table no longer
/// mentions `needle` (a deleted set or rule is announced without its content).
fn agent_commit_without(
    monitor: &Monitor,
    mut mark: usize,
    ns: &str,
    needle: &str,
) -> Option<Instant> {
    let started = Instant::now();
    while started.elapsed() < CHANGE_TIMEOUT {
        // Only the agent commits in its namespace (the line names the committing thread).
        let (at, next) =
            monitor.wait(mark, CHANGE_TIMEOUT, |l| l.starts_with("# new generation"))?;
        if !observe::table_mentions(ns, "rcni_policy", needle) {
            return Some(at);
        }
        mark = next;
    }
    None
}
