//! Figure "density": one fresh attachment's ADD and DEL on a node that already holds N
//! attachments, for rcni, Go and the iproute2 floor alternating in the same rounds.
//!
//! The node is a namespace of its own (entered by the thread that runs the figure, so every
//! process it starts lives there) with N live filler pairs made by `ip -batch` as rcni makes an
//! IPv4-only attachment: a host veth without IPv6 on the bridge (bridge) or with a /32 route
//! (ptp), its peer up with an address in one filler namespace (see [`add_fillers`]). The counts rise
//! 0 → 250 → 500 → 1,000, fillers being added between them. The floor is the same attachment
//! made by iproute2 alone: `ip -batch` in the node (veth with its peer created in the pod,
//! bridge port or host address and route, up) and `ip -n POD -batch` (address, up, default
//! route), neither end with an IPv6 link-local (`ip` cannot turn IPv6 off on a link), and on
//! the bridge its ADD ends once the port is up, as rcni's and Go's do (see [`wait_oper_up`]);
//! its DEL is `ip -n POD link del eth0`. Every DEL comes [`SETTLE`] after its ADD. Plugins are
//! executed directly, each implementation with its own subnet and lease directory.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::chain::Impl;
use crate::exec::{run, Call};
use crate::ns::{self, ip_batch, NamedNs};
use crate::report::{Report, Series};
use crate::stats::{median, ms};
use crate::stop;

pub const FIGURE: &str = "density";
const BRIDGE: &str = "rcnibd";
/// The fillers' pod ends (ptp routes to them).
const FILLER_BASE: Ipv4Addr = Ipv4Addr::new(198, 19, 128, 0);
/// The one subnet and gateway of the measured attachments. rcni, Go and the floor share the
/// bridge (a bridge takes one IPv4 gateway address) and the subnet; only one attachment exists
/// at a time, and each implementation keeps its own leases.
const SUBNET: &str = "198.18.64.0/20";
const GATEWAY: &str = "198.18.64.1";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bridge,
    Ptp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Bridge => "bridge",
            Kind::Ptp => "ptp",
        }
    }
}

/// Attachment counts per plugin and timed rounds per count.
fn plan(quick: bool) -> (Vec<(Kind, Vec<usize>)>, usize) {
    if quick {
        (
            vec![(Kind::Bridge, vec![0, 250]), (Kind::Ptp, vec![0, 250])],
            3,
        )
    } else {
        (
            vec![
                (Kind::Bridge, vec![0, 250, 500, 1_000]),
                (Kind::Ptp, vec![0, 1_000]),
            ],
            // DEL swings by several ms with the kernel's RCU waits on veth removal, even at one
            // density, so a median of few rounds still moves between runs; 101 rounds narrow
            // that at the cost of about a minute more.
            101,
        )
    }
}

/// The pause after each round's pods are removed (see [`rounds_at`]).
const TEARDOWN_PAUSE: std::time::Duration = std::time::Duration::from_millis(150);

/// The pause between an attachment's ADD and its DEL, for every implementation alike. A DEL
/// right on the heels of its ADD found the RCU grace period the ADD's exit had started still
/// running, and the deletion's wait for RCU callbacks then took that one and a whole next one:
/// the sooner a DEL reached its deletion, the more of it it waited out (rcni's within half a
/// millisecond of exec, `ip`'s and Go's later). A short pause before rcni's deletion left its
/// DEL time unchanged and a longer one added about its own length, so one pause for everyone
/// keeps the comparison fair. No runtime deletes an attachment within milliseconds of making it.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);

fn filler_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(FILLER_BASE) + 2 + i as u32)
}

/// Adds fillers `from..to`, each a live attachment as rcni makes one on an IPv4-only network:
/// host veth `dfI` with IPv6 off (turned off before it comes up), on the bridge (bridge) or
/// with a /32 route to its pod address (ptp), up; its peer `pI` in `filler_ns` with an address,
/// no IPv6 link-local, up. With their peers up the ports have carrier and forward, so each new
/// port's state walks, floods and route walks go through them as through running pods (a port
/// whose peer is down is disabled and skipped by most of that).
fn add_fillers(kind: Kind, filler_ns: &str, from: usize, to: usize) -> Result<()> {
    if from >= to {
        return Ok(());
    }
    let (mut made, mut up, mut pods) = (String::new(), String::new(), String::new());
    let mut sysctls = Command::new("sysctl");
    sysctls.arg("-q");
    for i in from..to {
        made += &format!(
            "link add df{i} type veth peer name p{i} netns {filler_ns}
"
        );
        if kind == Kind::Bridge {
            made += &format!(
                "link set df{i} master {BRIDGE}
"
            );
        }
        sysctls.args(["-w", &format!("net.ipv6.conf.df{i}.disable_ipv6=1")]);
        up += &format!(
            "link set df{i} up
"
        );
        if kind == Kind::Ptp {
            // After the up: a route needs its device up.
            up += &format!(
                "route add {}/32 dev df{i}
",
                filler_addr(i)
            );
        }
        pods += &format!(
            "link set p{i} addrgenmode none
addr add {}/32 dev p{i}
link set p{i} up
",
            filler_addr(i)
        );
    }
    ip_batch(None, &made)?;
    // A child of this thread, so in the node namespace, whose /proc/sys/net it sees.
    let out = sysctls.output()?;
    if !out.status.success() {
        bail!("sysctl: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    ip_batch(None, &up)?;
    ip_batch(Some(filler_ns), &pods)?;
    Ok(())
}

/// The plugin config of slot 0 (rcni) or 1 (Go), each with its own lease directory.
fn config(kind: Kind, slot: u32, data_dir: &Path) -> Value {
    let ipam = json!({
        "type": "host-local",
        "subnet": SUBNET,
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": data_dir.join(format!("{}-{slot}", kind.name())).display().to_string(),
    });
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": format!("density-{}-{slot}", kind.name()),
        "type": kind.name(),
        "ipam": ipam,
    });
    if kind == Kind::Bridge {
        conf["bridge"] = json!(BRIDGE);
        conf["isGateway"] = json!(true);
    }
    conf
}

/// One plugin run of `imp`; its time in ms.
fn plugin(
    imp: &Impl,
    kind: Kind,
    command: &str,
    cid: &str,
    pod: &NamedNs,
    conf: &[u8],
) -> Result<f64> {
    let bin = imp.plugin(kind.name());
    let path = imp.dir.display().to_string();
    let out = run(&Call {
        bin: &bin,
        command,
        container_id: cid,
        netns: &pod.path,
        ifname: "eth0",
        path: &path,
        stdin: conf,
    })?;
    if !out.ok {
        bail!(
            "{} {} {command} failed: {}",
            imp.label,
            kind.name(),
            out.describe()
        );
    }
    Ok(ms(out.elapsed))
}

/// The floor's ADD and DEL of attachment `n` into `pod`; their times in ms.
fn floor(kind: Kind, n: usize, pod: &NamedNs) -> Result<(f64, f64)> {
    let host = format!("fl{n}");
    let slot = n % 1_000;
    let pod_ip = Ipv4Addr::new(198, 18, 64 + (slot / 250) as u8, (slot % 250 + 2) as u8);
    let (node_lines, pod_lines) = match kind {
        Kind::Bridge => (
            format!(
                "link add {host} type veth peer name eth0 netns {}\nlink set {host} addrgenmode none\nlink set {host} master {BRIDGE}\nlink set {host} up\n",
                pod.name
            ),
            format!(
                "link set eth0 addrgenmode none\naddr add {pod_ip}/20 dev eth0\nlink set eth0 up\nroute add default via {GATEWAY}\n"
            ),
        ),
        Kind::Ptp => (
            format!(
                "link add {host} type veth peer name eth0 netns {}\nlink set {host} addrgenmode none\nlink set {host} up\naddr add {GATEWAY}/32 dev {host}\nroute add {pod_ip}/32 dev {host}\n",
                pod.name
            ),
            format!(
                "link set eth0 addrgenmode none\naddr add {pod_ip}/20 dev eth0\nlink set eth0 up\nroute add {GATEWAY}/32 dev eth0\nroute add default via {GATEWAY}\n"
            ),
        ),
    };
    let started = Instant::now();
    ip_batch(None, &node_lines)?;
    ip_batch(Some(&pod.name), &pod_lines)?;
    if kind == Kind::Bridge {
        wait_oper_up(&host)?;
    }
    let add = ms(started.elapsed());
    std::thread::sleep(SETTLE);
    let started = Instant::now();
    let out = Command::new("ip")
        .args(["-n", &pod.name, "link", "del", "eth0"])
        .output()?;
    let del = ms(started.elapsed());
    if !out.status.success() {
        bail!(
            "ip link del: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((add, del))
}

/// Waits, polling over netlink in the calling thread's namespace (the node's), until the
/// floor's host end `name` is operationally up: rcni's and Go's bridge ADDs end only once their
/// port is, and a port the bridge has not yet enabled is a different thing to delete. Deleting
/// it at once, before the kernel's link watcher has run, skips the port's enabling, and such a
/// DEL is cheaper than one of a port that is up: the floor would not be the same work.
fn wait_oper_up(name: &str) -> Result<()> {
    let mut h = cni_linux::rtnl::Handle::new()?;
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if h.link_by_name(name)?.oper_up {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("floor port {name} not up after 5 s");
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Samples of one count: [ADD, DEL] × [rcni, Go, floor].
type Samples = [[Vec<f64>; 3]; 2];

/// `rounds` rounds at the node's current count, the three alternating in order.
fn rounds_at(
    kind: Kind,
    impls: [&Impl; 2],
    confs: &[Vec<u8>; 2],
    count: usize,
    rounds: usize,
) -> Result<Samples> {
    let mut s: Samples = Default::default();
    for r in 0..rounds {
        stop::check()?;
        // The round's pods are made before and removed after its samples, then the kernel is
        // left to finish their teardown: a namespace removed just before a sample would have
        // its RCU-heavy cleanup running under that sample's DEL (whose wall time is mostly
        // waiting for RCU callbacks), adding tens of ms to some samples and none to others.
        let pods = [
            NamedNs::create("dp")?,
            NamedNs::create("dp")?,
            NamedNs::create("dp")?,
        ];
        for (k, pod) in pods.iter().enumerate() {
            let which = (k + r) % 3;
            let (add, del) = if which == 2 {
                floor(kind, count * 100 + r, pod)?
            } else {
                let cid = format!("dens-{count}-{r}");
                let conf = &confs[which];
                let add = plugin(impls[which], kind, "ADD", &cid, pod, conf)?;
                std::thread::sleep(SETTLE);
                let del = plugin(impls[which], kind, "DEL", &cid, pod, conf)?;
                (add, del)
            };
            s[0][which].push(add);
            s[1][which].push(del);
        }
        drop(pods);
        std::thread::sleep(TEARDOWN_PAUSE);
    }
    Ok(s)
}

/// Adds the rows and series of one plugin's counts; returns the note on growth.
fn report_kind(report: &mut Report, kind: Kind, counts: &[usize], all: Vec<Samples>) -> String {
    let mut growth = Vec::new();
    let mut own0 = [None, None];
    for (&count, samples) in counts.iter().zip(all) {
        for (op, [r, g, f]) in ["ADD", "DEL"].iter().zip(samples) {
            let item = format!("{} {op} at {count} attachments", kind.name());
            let (mr, mg, mf) = (median(&r), median(&g), median(&f));
            let of = |v: Option<f64>| match (v, mf) {
                (Some(v), Some(f)) if f > 0.0 => format!("{:.2}x", v / f),
                _ => "n/a".into(),
            };
            let own = mr.zip(mf).map(|(r, f)| r - f);
            let i = usize::from(*op == "DEL");
            if own0[i].is_none() {
                own0[i] = own;
            }
            if let (Some(o), Some(o0), true) = (own, own0[i], count != counts[0]) {
                growth.push(format!("{op} at {count}: {:+.2} ms", o - o0));
            }
            let note = format!(
                "floor {} ms; rcni {} of the floor, Go {}; rcni's own part {} ms",
                mf.map_or("n/a".into(), |f| format!("{f:.2}")),
                of(mr),
                of(mg),
                own.map_or("n/a".into(), |o| format!("{o:.2}")),
            );
            report.add_pair(FIGURE, &item, "ms", r, g, &note);
            report.series.push(Series {
                figure: FIGURE,
                item,
                implementation: "floor",
                unit: "ms",
                samples: f,
            });
        }
    }
    format!(
        "{} growth of rcni's own part (rcni minus floor) from {} attachments: {}",
        kind.name(),
        counts[0],
        growth.join(", ")
    )
}

/// One plugin's counts on a fresh node namespace, entered by the calling thread.
fn measure_kind(
    kind: Kind,
    counts: &[usize],
    rounds: usize,
    impls: [&Impl; 2],
    work: &Path,
) -> Result<Vec<Samples>> {
    let node = NamedNs::create("node")?;
    let fillers = NamedNs::create("fill")?;
    ns::enter(&node)?;
    if kind == Kind::Bridge {
        ip_batch(
            None,
            &format!("link add {BRIDGE} type bridge\nlink set {BRIDGE} up\naddr add {GATEWAY}/20 dev {BRIDGE}\n"),
        )?;
    }
    let confs =
        [0, 1].map(|slot| serde_json::to_vec(&config(kind, slot, work)).unwrap_or_default());
    let mut out = Vec::new();
    let mut have = 0;
    for &count in counts {
        add_fillers(kind, &fillers.name, have, count)?;
        have = count;
        // Untimed warm-up at this count: page cache, lease directories, the bridge's state.
        rounds_at(kind, impls, &confs, count + 50_000, 1)?;
        out.push(rounds_at(kind, impls, &confs, count, rounds)?);
    }
    // The fillers' host ends go synchronously here, not in the kernel's deferred namespace
    // cleanup while the next figure runs.
    let dels: String = (0..have).map(|i| format!("link del df{i}\n")).collect();
    ip_batch(None, &dels)?;
    Ok(out)
}

pub fn measure(
    report: &mut Report,
    rcni: &Impl,
    go: &Impl,
    quick: bool,
    work: &Path,
) -> Result<()> {
    let (plan, rounds) = plan(quick);
    for (kind, counts) in plan {
        let (impls, work) = ([rcni.clone(), go.clone()], work.to_path_buf());
        let counts2 = counts.clone();
        // A thread of its own enters the node namespace; the harness's threads stay put.
        let samples = std::thread::spawn(move || {
            measure_kind(kind, &counts2, rounds, [&impls[0], &impls[1]], &work)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("density thread panicked"))??;
        let note = report_kind(report, kind, &counts, samples);
        report.notes.push(note);
    }
    report.notes.push(format!(
        "density: one fresh attachment's ADD and DEL with N attachments already on the node \
         (live iproute2-made veth pairs as rcni makes them: bridge ports or ptp-style host \
         routes, IPv6 off on the host end, pod end up with an address), {rounds} rounds per \
         count, rcni, Go and the iproute2 floor (ip -batch, peer created in the pod, no IPv6 \
         link-local; its bridge ADD ends once the port is up, as rcni's and Go's do) alternating \
         in each round, each DEL {} ms after its ADD; plugins executed directly, times spawn \
         to exit.",
        SETTLE.as_millis()
    ));
    Ok(())
}
