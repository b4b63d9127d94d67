//! The iproute2 floor of figure "pods": one pod's network made by `ip` alone, at the same
//! concurrency, in the same rounds and beside as many resident pods as `rcni pod run` (see
//! `pods.rs`), so the growth of rcni's figure from an empty node to a full one can be set
//! against the growth of the kernel's own work. A floor pod is a named namespace with `lo` up
//! (`ip netns add` + `ip link set lo up`), a veth made with its peer in that namespace as
//! `eth0` and the host end a port of the node's bridge, then the pod's address, `eth0` up and
//! a default route: four `ip` processes. Neither end gets an IPv6 link-local address
//! (`addrgenmode none`), as with rcni's bridge on an IPv4-only network; with them, each new
//! pod's MLD reports and router solicitations flood every port, and the floor's own time grew
//! with the pods beside it (docs/performance.md, "Pod sandboxes at scale"). A floor pod has
//! no record, no lease file, no port mapping and no gratuitous ARP (`arp_notify`, which
//! rcni's bridge and Go's write, floods one to every port of the bridge): those are the
//! plugins' work, so they stay out of the floor.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::churn::parallel;
use crate::configs::slot_subnet;
use crate::ns::{ip_batch, NamedNs};
use crate::report::{Report, Row};
use crate::stats::{ms, quantile};

/// The floor's bridge, in a node namespace of its own.
const BRIDGE: &str = "rcnipodfl";
/// The /20 the floor's pods take their addresses from (slot 30, unused by any plugin config).
const SLOT: u8 = 30;

/// Address `i` of the floor's subnet (`1` is the gateway on the bridge).
fn address(i: usize) -> Ipv4Addr {
    let base = u32::from(slot_subnet(SLOT).network());
    Ipv4Addr::from(base + u32::try_from(i).unwrap_or(u32::MAX))
}

/// The node: a namespace holding the bridge with the pods' gateway.
fn node() -> Result<NamedNs> {
    let node = NamedNs::create("pfn")?;
    ip_batch(
        Some(&node.name),
        &format!(
            "link add {BRIDGE} type bridge\naddr add {}/20 dev {BRIDGE}\nlink set {BRIDGE} up\n",
            address(1)
        ),
    )?;
    Ok(node)
}

/// Floor pod number `n`; removing its namespace (the guard's drop) removes its veth too.
fn pod(node: &NamedNs, n: usize) -> Result<NamedNs> {
    let pod = NamedNs::create("pf")?;
    let host = format!("pfl{n}");
    ip_batch(
        Some(&node.name),
        &format!(
            "link add {host} type veth peer name eth0 netns {}\nlink set {host} addrgenmode none\n\
             link set {host} master {BRIDGE}\nlink set {host} up\n",
            pod.name
        ),
    )?;
    ip_batch(
        Some(&pod.name),
        &format!(
            "link set eth0 addrgenmode none\naddr add {}/20 dev eth0\nlink set eth0 up\n\
             route add default via {}\n",
            address(n + 2),
            address(1)
        ),
    )?;
    Ok(pod)
}

/// `count` floor pods numbered from `first`, `workers` at a time, the latency of each one made
/// pushed onto `latencies`. Returns the pods made and how many failed.
fn make(
    node: &NamedNs,
    (first, count): (usize, usize),
    workers: usize,
    latencies: &Mutex<Vec<f64>>,
) -> (Vec<NamedNs>, usize) {
    let made = Mutex::new(Vec::new());
    let failures = AtomicUsize::new(0);
    parallel(count, workers, |i| {
        let started = Instant::now();
        match pod(node, first + i) {
            Ok(p) => {
                let took = ms(started.elapsed());
                if let (Ok(mut l), Ok(mut m)) = (latencies.lock(), made.lock()) {
                    l.push(took);
                    m.push(p);
                }
            }
            Err(_) => {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (
        made.into_inner().unwrap_or_default(),
        failures.load(Ordering::Relaxed),
    )
}

/// The latencies of `n` floor pods made `workers` at a time in rounds of `round` (each round
/// removed off the clock before the next, then a pause of `settle`, as in `pods.rs`) beside
/// `resident` floor pods made first; and how many pods failed.
fn batch(
    (n, workers, resident): (usize, usize, usize),
    round: usize,
    settle: Duration,
) -> Result<(Vec<f64>, usize)> {
    let node = node()?;
    let off_the_clock = Mutex::new(Vec::new());
    // The resident pods take the numbers after the measured ones.
    let (residents, mut failures) = make(&node, (n, resident), workers, &off_the_clock);
    if resident > 0 {
        std::thread::sleep(settle);
    }
    let latencies = Mutex::new(Vec::new());
    for first in (0..n).step_by(round.max(1)) {
        let (made, failed) = make(&node, (first, round.min(n - first)), workers, &latencies);
        failures += failed;
        drop(made);
        std::thread::sleep(settle);
    }
    drop(residents);
    Ok((latencies.into_inner().unwrap_or_default(), failures))
}

/// The floor's rows: the batch on an empty node and beside `resident` pods, in rounds of
/// `round` with a pause of `settle` after the resident pods are made and after each round is
/// removed (the pauses of `pods.rs`).
pub fn measure(
    report: &mut Report,
    (n, workers, resident): (usize, usize, usize),
    round: usize,
    settle: Duration,
) -> Result<()> {
    let mut empty_p50 = None;
    for beside in [0, resident] {
        let (latencies, failures) = batch((n, workers, beside), round, settle)?;
        let p50 = quantile(&latencies, 0.5);
        let growth = match (beside, p50, empty_p50) {
            (0, ..) => String::new(),
            (_, Some(now), Some(then)) if then > 0.0 => {
                format!("; p50 over the empty node's: {:.2}x", now / then)
            }
            _ => "; p50 over the empty node's: n/a".to_string(),
        };
        if beside == 0 {
            empty_p50 = p50;
        }
        let item = format!(
            "{n} pods made by ip alone (iproute2 floor), concurrency {workers}, {round} per round, \
             {beside} resident"
        );
        let note = format!(
            "no CNI: netns, lo, veth on a bridge without IPv6 link-local, address, route \
             (4 ip processes a pod); \
             {failures} failed{growth}"
        );
        for (what, q) in [("p50", 0.5), ("p99", 0.99)] {
            report.add_row(Row {
                figure: "pods",
                item: format!("{item}: {what} setup latency"),
                unit: "ms",
                rcni: quantile(&latencies, q),
                go: None,
                note: note.clone(),
            });
        }
    }
    Ok(())
}
