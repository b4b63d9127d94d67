//! Root-only measurement (ignored by default; `scripts/policy-first-packet` runs it): is a
//! new pod closed from its first packet? Two simulated nodes with a real containerd each
//! (pods through CRI, as kubelet makes them) and an agent listing them with `--cri-socket`.
//! Namespace `shop` has two policies: pods labelled `role=locked` may send and receive
//! nothing, pods labelled `role=open` accept connections from namespace `probers`. On node 1,
//! pods `web-0`..`web-2` of `shop` are replaced again and again (the new pod has the same
//! name and the other role), at most three alive in a /29 node subnet, so a new pod often
//! gets the address a pod of the other role just gave back. From a pod of `probers` on node
//! 2 the prober ([`hammer`]) hammers each new pod from the instant its lease file exists
//! (ingress) and from inside its network namespace from the instant that file exists
//! (egress), until 3 s after RunPodSandbox returned.
//!
//! Printed per backend (`RESULT first-packet backend=…`): SYNs answered by locked pods and
//! connections completed out of them (the policies deny both: the target is 0), how many
//! locked pods let anything through and how many of them took over an open pod's address,
//! the window of those leaks relative to RunPodSandbox's return, and for open pods the time
//! from RunPodSandbox's return to the first connection answered (negative: before it
//! returned). Pods per backend: `RCNI_FIRST_PACKET_PODS` (100).

#[path = "../harness/mod.rs"]
mod harness;

mod hammer;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hammer::{Probe, Target, Watcher};
use harness::containerd::skip_without_containerd;
use harness::cri::PodSpec;
use harness::kubelet::CriPod;
use harness::*;
use serde_json::{json, Value};

/// How long each new pod is hammered after RunPodSandbox returned.
const TAIL: Duration = Duration::from_secs(3);
/// The prober pod's server port (egress target) and the port hammered on new pods.
const SERVER_PORT: u16 = 8080;
const POD_PORT: u16 = 80;
/// Pods alive on node 1 at most (its /29 holds five).
const ALIVE: usize = 3;

fn pods_per_backend() -> usize {
    std::env::var("RCNI_FIRST_PACKET_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

#[test]
#[ignore = "measurement: scripts/policy-first-packet"]
fn new_pods_from_their_first_packet() {
    if skip_without_containerd() {
        return;
    }
    if !br_netfilter_loaded() {
        eprintln!("skipping: NetworkPolicy needs br_netfilter");
        return;
    }
    for backend in ["host-gw", "vxlan"] {
        measure(backend, pods_per_backend());
    }
}

/// Two nodes with containerd, agents on their CRI sockets, converged.
fn cluster(backend: &str) -> Cluster {
    let config = json!({"Network": CLUSTER_NET, "SubnetLen": 29, "Backend": {"Type": backend}});
    let mut c = Cluster::with_config(config);
    for _ in 0..2 {
        c.add_cri_node(&[]);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    c
}

fn put(c: &Cluster, key: &str, doc: Value) {
    c.etcdctl(&["put", &format!("{PREFIX}/{key}"), &doc.to_string()]);
}

/// Namespaces `shop` and `probers`, and the two policies of `shop`.
fn policies(c: &Cluster) {
    for ns in ["shop", "probers"] {
        put(
            c,
            &format!("namespaces/{ns}"),
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}),
        );
    }
    let policy = |name: &str, spec: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
    };
    put(
        c,
        "policies/shop/locked",
        policy(
            "locked",
            json!({
        "podSelector": {"matchLabels": {"role": "locked"}}, "policyTypes": ["Ingress", "Egress"]}),
        ),
    );
    put(
        c,
        "policies/shop/open",
        policy(
            "open",
            json!({
        "podSelector": {"matchLabels": {"role": "open"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "probers"}}}]}]}),
        ),
    );
}

/// One pod start as measured.
struct Started {
    locked: bool,
    ip: IpAddr,
    /// The last pod that held this address before had the other role.
    took_over: bool,
    returned: Instant,
    ingress: Option<Probe>,
    egress: Option<Probe>,
}

fn measure(backend: &str, pods: usize) {
    let c = cluster(backend);
    policies(&c);
    let mut spec = PodSpec::named("prober");
    spec.namespace = "probers".into();
    spec.uid = "uid-prober".into();
    let prober = c.run_pod(1, &spec);
    let _server =
        cni_testkit::serve_tcp_udp(&prober.ns.name, prober.ip.into(), &[SERVER_PORT]).unwrap();
    let leases = Watcher::start(
        c.nodes[0].dir.join("state/ipam/rcni"),
        Target::IntoLease {
            from: prober.ns.path.clone(),
            port: POD_PORT,
        },
    );
    let containerd = c.nodes[0].containerd.as_ref().unwrap();
    let netns = Watcher::start(
        containerd.host_path("/run/netns"),
        Target::OutOf {
            to: SocketAddr::new(prober.ip.into(), SERVER_PORT),
        },
    );
    // (slot, pod, its index in `started`)
    let mut alive: Vec<(usize, CriPod, usize)> = Vec::new();
    let mut holder: HashMap<IpAddr, bool> = HashMap::new();
    let mut started: Vec<Started> = Vec::new();
    for k in 0..pods {
        let slot = k % ALIVE;
        if let Some(at) = alive.iter().position(|(s, _, _)| *s == slot) {
            let (_, pod, index) = alive.remove(at);
            // Each pod is probed for its whole tail; its address may go to the next pod, so
            // its own probes end with it.
            let tail_end = started[index].returned + TAIL;
            std::thread::sleep(tail_end.saturating_duration_since(Instant::now()));
            stop_probes(&started[index], Instant::now());
            c.remove_pod(pod);
        }
        let locked = k % 2 == 0;
        let mut spec = PodSpec::named(&format!("web-{slot}"));
        spec.namespace = "shop".into();
        spec.uid = format!("uid-web-{k}");
        let role = if locked { "locked" } else { "open" };
        spec.labels = [("role".to_string(), role.to_string())].into();
        let (leases_before, netns_before) = (len(&leases), len(&netns));
        let mut cri = c.cri(0);
        let id = cri.run_pod_sandbox(&spec).expect("RunPodSandbox");
        let returned = Instant::now();
        let pod = c.pod_from_status(0, &mut cri, id);
        let ip = IpAddr::V4(pod.ip);
        let ingress = take(&leases, leases_before, |p| p.key == ip.to_string());
        let egress = take(&netns, netns_before, |_| true);
        let took_over = holder.insert(ip, locked) == Some(!locked);
        let s = Started {
            locked,
            ip,
            took_over,
            returned,
            ingress,
            egress,
        };
        stop_probes(&s, returned + TAIL);
        started.push(s);
        alive.push((slot, pod, started.len() - 1));
    }
    std::thread::sleep(TAIL + Duration::from_millis(500));
    report(backend, &started);
}

/// Ends the probes of `s` at `at` (or earlier, when they were to end earlier).
fn stop_probes(s: &Started, at: Instant) {
    for probe in s.ingress.iter().chain(s.egress.iter()) {
        probe.stop_at(at);
    }
}

fn len(w: &Watcher) -> usize {
    w.probes.lock().unwrap().len()
}

/// The first probe after `from` that matches, taken out of the watcher's list.
fn take(w: &Watcher, from: usize, matches: impl Fn(&Probe) -> bool) -> Option<Probe> {
    let mut probes = w.probes.lock().unwrap();
    let at = probes.iter().skip(from).position(matches)?;
    Some(probes.remove(from + at))
}

/// Milliseconds from `origin` to `at` (negative when before).
fn ms(at: Instant, origin: Instant) -> f64 {
    if at >= origin {
        (at - origin).as_secs_f64() * 1e3
    } else {
        -((origin - at).as_secs_f64() * 1e3)
    }
}

fn hits(p: &Option<Probe>) -> Vec<Instant> {
    p.as_ref()
        .map(|p| p.hits.lock().unwrap().clone())
        .unwrap_or_default()
}

/// One line per pod on stderr: role, address, and each probe's attempts, answers and the
/// first and last answer from RunPodSandbox's return.
fn detail(backend: &str, started: &[Started]) {
    for (k, s) in started.iter().enumerate() {
        let probe = |p: &Option<Probe>| match p {
            None => "unprobed".to_string(),
            Some(p) => {
                let h = p.hits.lock().unwrap().clone();
                format!(
                    "{}/{} answered (from {} to {} ms)",
                    h.len(),
                    p.attempts.load(Ordering::Relaxed),
                    h.first()
                        .map_or("-".into(), |a| format!("{:.0}", ms(*a, s.returned))),
                    h.last()
                        .map_or("-".into(), |a| format!("{:.0}", ms(*a, s.returned))),
                )
            }
        };
        eprintln!(
            "{backend} pod {k} {} {}: in {}; out {}",
            if s.locked { "locked" } else { "open" },
            s.ip,
            probe(&s.ingress),
            probe(&s.egress)
        );
    }
}

fn report(backend: &str, started: &[Started]) {
    detail(backend, started);
    let locked: Vec<&Started> = started.iter().filter(|s| s.locked).collect();
    let (mut answered, mut completed, mut leaky, mut leaky_taken_over) = (0, 0, 0, 0);
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut unprobed = 0;
    for s in &locked {
        let (i, e) = (hits(&s.ingress), hits(&s.egress));
        unprobed += usize::from(s.ingress.is_none()) + usize::from(s.egress.is_none());
        answered += i.len();
        completed += e.len();
        if !i.is_empty() || !e.is_empty() {
            leaky += 1;
            leaky_taken_over += usize::from(s.took_over);
        }
        for at in i.iter().chain(e.iter()) {
            first = first.min(ms(*at, s.returned));
            last = last.max(ms(*at, s.returned));
        }
    }
    let attempts: u64 = locked
        .iter()
        .flat_map(|s| s.ingress.iter().chain(s.egress.iter()))
        .map(|p| p.attempts.load(Ordering::Relaxed))
        .sum();
    let taken_over = locked.iter().filter(|s| s.took_over).count();
    let open_taken_over = started.iter().filter(|s| !s.locked && s.took_over).count();
    let mut allowed: Vec<f64> = started
        .iter()
        .filter(|s| !s.locked)
        .filter_map(|s| hits(&s.ingress).first().map(|at| ms(*at, s.returned)))
        .collect();
    allowed.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if allowed.is_empty() {
            return f64::NAN;
        }
        allowed[((p / 100.0) * (allowed.len() - 1) as f64).round() as usize]
    };
    let open = started.len() - locked.len();
    println!(
        "RESULT first-packet backend={backend} locked_pods={} attempts={attempts} syns_answered={answered} \
         conns_completed={completed} leaky_pods={leaky} locked_on_an_open_pods_address={taken_over} \
         leaky_among_those={leaky_taken_over} leak_window_ms_from_return={}..{} unprobed={unprobed}",
        locked.len(),
        if leaky > 0 { format!("{first:.0}") } else { "-".into() },
        if leaky > 0 { format!("{last:.0}") } else { "-".into() },
    );
    println!(
        "RESULT first-packet-allowed backend={backend} open_pods={open} \
         open_on_a_locked_pods_address={open_taken_over} answered={} \
         first_allowed_after_return_ms_p50={:.0} p99={:.0} max={:.0}",
        allowed.len(),
        pct(50.0),
        pct(99.0),
        pct(100.0)
    );
}
