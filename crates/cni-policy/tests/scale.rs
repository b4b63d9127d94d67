//! The incremental enforcer at cluster scale, without a kernel (an ignored measurement: run
//! `cargo test --release -p cni-policy --test scale -- --ignored --nocapture`; it prints
//! `RESULT` lines and asserts no time). A synthetic cluster of `RCNI_SCALE_NODES` nodes
//! (default 5,000, and 500 and 1,500 for the curve) × 30 pods in 1,000 namespaces, with
//! labels as workloads carry them (app, tier, version, a ReplicaSet's pod-template-hash),
//! namespaces labelled by team and environment, and 2,000 policies of the shapes clusters
//! write (a namespace's default deny, same-namespace allows, allows from a team's
//! namespaces, from monitoring in any namespace, egress to DNS, ipBlocks); 30 of the pods
//! are this node's. Measured: the first program (every change taken and the first batch
//! made), the process RSS it added per pod, and the CPU time of one change with its batch:
//! a remote pod added, removed or relabelled, as the datastore's records decode (the
//! node agent's view does the same decoding), a policy edited.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cni_policy::compact::{Interner, PodInfo};
use cni_policy::nft::{Change, Enforcer, PodId};
use cni_policy::stored::{decode, Keys, PodRecord, Stored};
use cni_policy::Pod;

mod common;

const NAMESPACES: usize = 1000;
const PODS_PER_NODE: usize = 30;
const TEAMS: usize = 10;
const APPS: usize = 15;

fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The process's resident set, from `/proc/self/statm`.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

fn pod_ip(n: usize) -> IpAddr {
    IpAddr::from((0x0a00_0000u32 + n as u32 + 1).to_be_bytes())
}

/// Pod `n` of the cluster (namespace `n % NAMESPACES`), as its node publishes it.
fn pod(n: usize, generation: usize) -> Pod {
    let ns = n % NAMESPACES;
    let app = (n / NAMESPACES) % APPS;
    let labels = [
        ("app".to_string(), format!("app-{app}")),
        (
            "tier".to_string(),
            ["front", "back", "db"][app % 3].to_string(),
        ),
        ("version".to_string(), format!("v{}", generation % 3)),
        (
            "pod-template-hash".to_string(),
            format!("{:08x}", (ns * 131 + app * 7 + generation) as u32),
        ),
    ];
    Pod {
        namespace: format!("ns-{ns}"),
        name: format!("app-{app}-{n}"),
        labels: labels.into(),
        ips: vec![pod_ip(n)],
        named_ports: Default::default(),
    }
}

/// The 2,000 policies: two per namespace, the second of one of five shapes.
fn policies() -> Vec<(String, k8s_openapi::api::networking::v1::NetworkPolicy)> {
    let mut out = Vec::new();
    for ns in 0..NAMESPACES {
        let name = format!("ns-{ns}");
        out.push((
            format!("{name}/default-deny"),
            common::network_policy(
                &name,
                "default-deny",
                "  podSelector: {}\n  policyTypes: [Ingress]\n",
            ),
        ));
        let app = ns % APPS;
        let spec = match ns % 5 {
            0 => format!("  podSelector: {{matchLabels: {{app: app-{app}}}}}\n  ingress:\n  - from: [{{podSelector: {{matchLabels: {{tier: front}}}}}}]\n    ports: [{{port: 8080}}]\n"),
            1 => format!("  podSelector: {{}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchLabels: {{team: team-{}}}}}}}]\n", ns % TEAMS),
            2 => "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {}, podSelector: {matchLabels: {app: app-0}}}]\n    ports: [{port: 9090}]\n".to_string(),
            3 => "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns-0}}}]\n    ports: [{port: 53, protocol: UDP}]\n  - to: [{podSelector: {}}]\n".to_string(),
            _ => format!("  podSelector: {{matchExpressions: [{{key: tier, operator: In, values: [front, back]}}]}}\n  ingress:\n  - from: [{{namespaceSelector: {{matchExpressions: [{{key: env, operator: NotIn, values: [dev]}}]}}, podSelector: {{matchLabels: {{app: app-{app}}}}}}}, {{ipBlock: {{cidr: 10.128.0.0/9}}}}]\n"),
        };
        out.push((
            format!("{name}/allow"),
            common::network_policy(&name, "allow", &spec),
        ));
    }
    out
}

/// A stored pod record decoded as the node agent's view decodes it.
fn decoded(keys: &Keys, interner: &mut Interner, node: usize, pod: &Pod) -> (PodId, Arc<PodInfo>) {
    let key = keys.pod(&format!("node-{node}"), &pod.namespace, &pod.name);
    let value = serde_json::to_vec(&PodRecord::of(pod, &format!("node-{node}"))).unwrap();
    let Ok(Some(Stored::Pod { record, .. })) = decode(keys, &key, &value) else {
        panic!("not a pod record")
    };
    let labels = interner.labels(record.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let info = PodInfo {
        namespace: interner.sym(&record.namespace),
        name: record.name.into_boxed_str(),
        labels: Some(labels),
        ips: record.ips.into_boxed_slice(),
        named_ports: None,
    };
    (PodId::from(key.as_str()), Arc::new(info))
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p) as usize]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn measure(nodes: usize) {
    let keys = Keys::new("/rcni.io/network");
    let mut interner = Interner::default();
    let pods = nodes * PODS_PER_NODE;
    let local = |n: usize| n < PODS_PER_NODE;
    let mut e = Enforcer::with_hold(vec!["10.0.0.0/27".parse().unwrap()]);
    let rss0 = rss_bytes();
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    for ns in 0..NAMESPACES {
        let mut labels = cni_policy::selector::Labels::new();
        labels.insert("team".into(), format!("team-{}", ns % TEAMS));
        labels.insert("env".into(), ["prod", "stage", "dev"][ns % 3].into());
        e.apply(Change::Namespace {
            name: format!("ns-{ns}"),
            labels: Some(labels),
        })
        .unwrap();
    }
    for n in 0..pods {
        let p = pod(n, 0);
        let change = if local(n) {
            Change::Pod {
                id: p.key().into(),
                pod: Some(Arc::new(PodInfo::of(&p, &mut interner))),
                local: true,
            }
        } else {
            let (id, info) = decoded(&keys, &mut interner, n / PODS_PER_NODE, &p);
            Change::Pod {
                id,
                pod: Some(info),
                local: false,
            }
        };
        e.apply(change).unwrap();
    }
    for (key, policy) in policies() {
        e.apply(Change::Policy {
            key,
            policy: Some(Arc::new(policy)),
        })
        .unwrap();
    }
    let first = e.batch().unwrap();
    let (cpu_first, wall_first) = (cpu_time() - cpu0, wall0.elapsed());
    let rss = rss_bytes().saturating_sub(rss0);
    println!(
        "RESULT {nodes} nodes, {pods} pods, 2000 policies: first program {:.0} ms CPU ({:.0} ms wall), {} messages; {:?}; RSS +{:.0} MiB ({:.0} B per pod)",
        cpu_first.as_secs_f64() * 1e3,
        wall_first.as_secs_f64() * 1e3,
        first.batch.len(),
        first.summary,
        rss as f64 / (1 << 20) as f64,
        rss as f64 / pods as f64,
    );

    let mut rng = Rng(nodes as u64 * 7919 + 1);
    let mut samples = Vec::new();
    let mut touched = 0usize;
    for round in 0..3000 {
        let n = PODS_PER_NODE + rng.below(pods - PODS_PER_NODE);
        let node = n / PODS_PER_NODE;
        let start = cpu_time();
        let p = pod(n, round + 1);
        let (id, info) = decoded(&keys, &mut interner, node, &p);
        let gone = rng.below(4) == 0;
        e.apply(Change::Pod {
            id,
            pod: (!gone).then_some(info),
            local: false,
        })
        .unwrap();
        let delta = e.batch().unwrap();
        samples.push(cpu_time() - start);
        touched += usize::from(!delta.batch.is_empty());
        if gone {
            // Back, for the next rounds.
            let (id, info) = decoded(&keys, &mut interner, node, &pod(n, round));
            e.apply(Change::Pod {
                id,
                pod: Some(info),
                local: false,
            })
            .unwrap();
            e.batch().unwrap();
        }
    }
    let (p50, p99) = (
        percentile(&mut samples, 0.5),
        percentile(&mut samples, 0.99),
    );
    let max = *samples.last().unwrap();
    println!(
        "RESULT {nodes} nodes: one remote pod change (decode, enforcer, batch): CPU p50 {}, p99 {}, max {}; {touched} of 3000 changed the program",
        us(p50),
        us(p99),
        us(max)
    );

    let mut policy_samples = Vec::new();
    let all = policies();
    for round in 0..200 {
        let (key, mut policy) = all[rng.below(all.len())].clone();
        let spec = policy.spec.as_mut().unwrap();
        spec.ingress
            .get_or_insert_with(Vec::new)
            .push(Default::default());
        let start = cpu_time();
        e.apply(Change::Policy {
            key: key.clone(),
            policy: Some(Arc::new(policy)),
        })
        .unwrap();
        e.batch().unwrap();
        policy_samples.push(cpu_time() - start);
        let (key, original) = all.iter().find(|(k, _)| *k == key).unwrap().clone();
        e.apply(Change::Policy {
            key,
            policy: Some(Arc::new(original)),
        })
        .unwrap();
        e.batch().unwrap();
        let _ = round;
    }
    println!(
        "RESULT {nodes} nodes: one policy edited: CPU p50 {}, p99 {}",
        us(percentile(&mut policy_samples, 0.5)),
        us(percentile(&mut policy_samples, 0.99))
    );
}

#[test]
#[ignore = "measurement"]
fn cost_per_change_does_not_grow_with_the_cluster() {
    let sizes: Vec<usize> = match std::env::var("RCNI_SCALE_NODES") {
        Ok(v) => v.split(',').map(|n| n.parse().unwrap()).collect(),
        Err(_) => vec![500, 1500, 5000],
    };
    for nodes in sizes {
        measure(nodes);
    }
}
