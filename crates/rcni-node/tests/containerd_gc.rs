//! Root-only: the agent reclaims what containerd 1.6 (which never sends CNI GC) leaks when it
//! forgets its sandboxes. One simulated node runs a real containerd (see
//! `harness/containerd.rs`) and `rcni-node --cri-socket` on containerd's socket; pods are made
//! through CRI like kubelet's. Skipped, saying why, where containerd, crun or gcc is missing.
//!
//! The socket path changes with every containerd start (`/proc/<pid>/root/...`), so the agent
//! gets a symlink in the node's directory that the test points at the current containerd.

mod harness;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cni_testkit::ping;
use harness::containerd::skip_without_containerd as skip;
use harness::cri::PodSpec;
use harness::kubelet::CriPod;
use harness::*;
use serde_json::{json, Value};

/// Seconds between the agent's GC rounds and the age below which nothing is reclaimed.
const GC_INTERVAL: u64 = 1;
const GC_GRACE: u64 = 4;
/// The hostPort of the first forgotten pod.
const HOST_PORT: u16 = 30090;

/// The symlink the agent's `--cri-socket` names.
fn socket_link(c: &Cluster) -> PathBuf {
    c.nodes[0].dir.join("cri.sock")
}

/// Points the agent's socket link at the running containerd.
fn link_socket(c: &Cluster) {
    let link = socket_link(c);
    let _ = std::fs::remove_file(&link);
    let containerd = c.nodes[0].containerd.as_ref().unwrap();
    std::os::unix::fs::symlink(containerd.socket(), &link).unwrap();
}

fn cni_cache(c: &Cluster) -> PathBuf {
    c.nodes[0].containerd.as_ref().unwrap().cni_cache()
}

/// Which CNI plugins the node's bin dir holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Plugins {
    Rcni,
    /// Debian's Go reference plugins (CNI 1.0.0 at most: no plugin GC, DEL only).
    Go,
}

/// One node with containerd and an agent that reclaims forgotten sandboxes, or `None` when the
/// Go plugins are asked for but missing. The agent starts first (its socket link is made when
/// containerd is up; the agent dials on each round).
fn node_with_gc(plugins: Plugins) -> Option<Cluster> {
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    if plugins == Plugins::Go {
        let Some(go) = cni_testkit::go_plugins_dir() else {
            eprintln!("skipping: Go reference plugins not installed");
            return None;
        };
        c.plugins = go;
    }
    let i = c.add_node();
    let cache = c.nodes[i].dir.join("var-lib/cni");
    c.nodes[i].extra = vec![
        "--cri-socket".into(),
        socket_link(&c).display().to_string(),
        "--cni-cache-dir".into(),
        cache.display().to_string(),
        "--gc-interval".into(),
        GC_INTERVAL.to_string(),
        "--gc-grace".into(),
        GC_GRACE.to_string(),
    ];
    // The agent enforces NetworkPolicy (and is healthy) once it has listed the runtime's pods.
    let published = c.begin_agent(i);
    c.start_containerd(i);
    assert_eq!(cni_cache(&c), cache, "containerd's libcni cache");
    link_socket(&c);
    c.wait_agent_started(i, published);
    conflist_is_readable_by_libcni_1_1(&c);
    let mut cri = c.cri(i);
    let ready = wait_for(Duration::from_secs(30), || {
        cri.network_ready().is_ok_and(|(ready, _)| ready)
    });
    assert!(ready.is_some(), "NetworkReady:\n{}", c.nodes[i].agent_log());
    Some(c)
}

/// containerd 1.6's libcni cannot read 1.1.0 results: the agent's conflist must offer 1.0.0
/// as its `cniVersion` (with `cniVersions` up to 1.1.0, which the agent's own GC negotiates).
fn conflist_is_readable_by_libcni_1_1(c: &Cluster) {
    let path = c.nodes[0].conf_dir().join("10-rcni.conflist");
    let list: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(list["cniVersion"], "1.0.0", "{list}");
}

/// What a pod holds on the node, looked at with independent tools.
#[derive(Debug, PartialEq)]
struct Holdings {
    lease: bool,
    cache_entry: bool,
    /// The host end of its veth.
    veth: bool,
    /// nft rules and set/map elements naming it, its address or its hostPort.
    nft: Vec<String>,
}

impl Holdings {
    fn none() -> Holdings {
        Holdings {
            lease: false,
            cache_entry: false,
            veth: false,
            nft: Vec::new(),
        }
    }
}

/// A pod the test watches: its host veth and hostPort noted while it runs.
struct Watched {
    pod: CriPod,
    host_veth: String,
    port: Option<u16>,
}

impl Watched {
    fn new(c: &Cluster, pod: CriPod, port: Option<u16>) -> Watched {
        let eth0 = ip_json(&pod.ns.name, &["link", "show", "eth0"]);
        let peer = eth0[0]["link_index"].as_u64().expect("eth0 is a veth");
        let host_veth = ip_json(&c.nodes[0].ns.name, &["link", "show"])
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["ifindex"].as_u64() == Some(peer))
            .and_then(|l| l["ifname"].as_str())
            .expect("the host end of the pod's veth")
            .to_string();
        Watched {
            pod,
            host_veth,
            port,
        }
    }

    /// What it holds now, looked at with `ip -j`, `nft -j` and the files.
    fn holdings(&self, c: &Cluster) -> Holdings {
        let node = &c.nodes[0];
        let (id, ip) = (&self.pod.id, self.pod.ip);
        let veth = ip_json(&node.ns.name, &["link", "show"])
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["ifname"] == self.host_veth.as_str());
        Holdings {
            lease: node.dir.join(format!("state/ipam/rcni/{ip}")).exists(),
            cache_entry: cni_cache(c)
                .join(format!("results/rcni-{id}-eth0"))
                .exists(),
            veth,
            nft: nft_naming(&node.ns.name, ip, id, self.port),
        }
    }
}

/// The nft rules and set or map elements of `ns` (as `nft -j` prints them) that name `ip`,
/// the container `id` or `port` (portmap keeps a pod's mappings as map and set elements).
fn nft_naming(ns: &str, ip: Ipv4Addr, id: &str, port: Option<u16>) -> Vec<String> {
    let text = sh(&["ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"]);
    let ruleset: Value = serde_json::from_str(&text).unwrap();
    let quoted_ip = format!("\"{ip}\"");
    let names = |text: &str| {
        text.contains(&quoted_ip)
            || text.contains(id)
            || port.is_some_and(|p| {
                [format!(",{p}]"), format!(":{p},"), format!(":{p}}}")]
                    .iter()
                    .any(|form| text.contains(form))
            })
    };
    let mut found = Vec::new();
    for item in ruleset["nftables"].as_array().unwrap() {
        if let Some(rule) = item.get("rule") {
            found.push(rule["expr"].to_string());
        }
        for kind in ["set", "map"] {
            let elems = item.get(kind).and_then(|s| s["elem"].as_array());
            found.extend(elems.into_iter().flatten().map(Value::to_string));
        }
    }
    found.retain(|text| names(text));
    found
}

fn all_held(h: &Holdings) -> bool {
    h.lease && h.cache_entry && h.veth
}

/// A bystander of another network in containerd's libcni cache: attached with `rcni add`
/// under a container ID containerd never knew. Returns its namespace, ID and address.
fn attach_bystander(c: &Cluster) -> (cni_testkit::Netns, String, Ipv4Addr) {
    let node = &c.nodes[0];
    let conf_dir = node.dir.join("other-net.d");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let list = json!({
        "cniVersion": "1.0.0",
        "name": "bystander",
        "plugins": [{
            "type": "bridge",
            "bridge": "rcnib0",
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": node.dir.join("bystander-ipam"),
                "ranges": [[{"subnet": "198.18.250.0/24"}]]
            }
        }]
    });
    std::fs::write(conf_dir.join("10-bystander.conflist"), list.to_string()).unwrap();
    let ns = c.sb.add_container().unwrap();
    let id = "bystander0000000000000000000000000000000000000000000000000000001".to_string();
    let out = sh(&[
        "ip",
        "netns",
        "exec",
        &node.ns.name,
        cni_testkit::bin_path("rcni").unwrap().to_str().unwrap(),
        "add",
        "bystander",
        ns.path.to_str().unwrap(),
        "--conf-dir",
        conf_dir.to_str().unwrap(),
        "--bin-dir",
        c.plugins.to_str().unwrap(),
        "--cache-dir",
        cni_cache(c).to_str().unwrap(),
        "--container-id",
        &id,
        "--json",
    ]);
    let result: Value = serde_json::from_str(&out).unwrap();
    let ip: ipnet::Ipv4Net = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (ns, id, ip.addr())
}

fn bystander_intact(c: &Cluster, ns: &str, id: &str, ip: Ipv4Addr) -> bool {
    let node = &c.nodes[0];
    let lease = node
        .dir
        .join(format!("bystander-ipam/bystander/{ip}"))
        .exists();
    let entry = cni_cache(c)
        .join(format!("results/bystander-{id}-eth0"))
        .exists();
    let veth = ip_json(ns, &["link", "show", "eth0"])
        .as_array()
        .is_some_and(|a| !a.is_empty());
    lease && entry && veth
}

/// The agent's counter `name` from /metrics.
fn metric(c: &Cluster, name: &str) -> u64 {
    let text = c.nodes[0].health_get("/metrics").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// Kills containerd with its shims and pods and wipes its metadata (`/var/lib/containerd`;
/// its `/run` is a fresh tmpfs at every start).
fn stop_containerd_and_wipe_its_state(c: &mut Cluster) {
    let containerd = c.nodes[0].containerd.as_mut().unwrap();
    containerd.kill();
    let var_lib: PathBuf = containerd.cni_cache().parent().unwrap().to_path_buf();
    std::fs::remove_dir_all(var_lib.join("containerd")).unwrap();
}

/// Starts the node's containerd again, imports the pause image and points the agent's socket
/// link at it.
fn start_containerd_again(c: &mut Cluster) {
    c.nodes[0].containerd.as_mut().unwrap().restart();
    let pause = c.sb.dir().join("pause.tar");
    c.nodes[0].containerd.as_ref().unwrap().import(&pause);
    link_socket(c);
}

fn gateway_reachable(pod: &CriPod) -> bool {
    let gw = Ipv4Addr::from(u32::from(pod.ip) & 0xffff_ff00 | 1);
    ping(&pod.ns.name, gw)
}

/// containerd loses its state while two pods (one with a hostPort) are attached. While it is
/// down nothing is reclaimed (every round fails, counted); once it is back the forgotten pods'
/// leases, host veths, portmap rules and cache entries are gone within a round; pods made
/// after the restart (one before the sweep, two during it) and another network's attachment
/// are untouched, also once they are older than the grace.
///
/// With rcni's plugins the dead pods' namespaces are kept (the test holds them), so their
/// veths outlive the pods and only the plugins' GC can reach them: libcni 1.1 caches no netns
/// path, so the chain DEL has none. Debian's Go plugins have no GC; there the namespaces go
/// with the pods, as on a node where nothing else holds them, and the kernel takes the veths.
fn forgotten_sandboxes_are_reclaimed(plugins: Plugins) {
    let Some(mut c) = node_with_gc(plugins) else {
        return;
    };
    let (by_ns, by_id, by_ip) = attach_bystander(&c);
    let mut mapped = PodSpec::named("forgotten-0");
    mapped.host_ports.push((HOST_PORT, 8080));
    let forgotten = [
        Watched::new(&c, c.run_pod(0, &mapped), Some(HOST_PORT)),
        Watched::new(&c, c.run_pod(0, &PodSpec::named("forgotten-1")), None),
    ];
    for w in &forgotten {
        let h = w.holdings(&c);
        assert!(all_held(&h), "{} before the wipe: {h:?}", w.pod.id);
    }
    assert!(
        !forgotten[0].holdings(&c).nft.is_empty(),
        "no nft rule or element names the hostPort pod"
    );
    assert_eq!(metric(&c, "rcni_node_gc_reclaimed_total"), 0);
    let errors_before = metric(&c, "rcni_node_gc_errors_total");

    // While containerd is down the forgotten pods grow older than the grace, and every round
    // fails without reclaiming anything.
    stop_containerd_and_wipe_its_state(&mut c);
    if plugins == Plugins::Go {
        for w in &forgotten {
            c.sb.remove_container(&w.pod.ns).unwrap();
        }
    }
    std::thread::sleep(Duration::from_secs(GC_GRACE + 2 * GC_INTERVAL));
    for w in &forgotten {
        let h = w.holdings(&c);
        let held = h.lease && h.cache_entry && (h.veth || plugins == Plugins::Go);
        assert!(held, "{} with containerd down: {h:?}", w.pod.id);
    }
    assert!(!forgotten[0].holdings(&c).nft.is_empty());
    let errors_down = metric(&c, "rcni_node_gc_errors_total");
    assert!(
        errors_down > errors_before,
        "rounds failed while containerd was down"
    );
    assert_eq!(metric(&c, "rcni_node_gc_reclaimed_total"), 0);

    start_containerd_again(&mut c);
    let restarted = Instant::now();
    let listed = c.cri(0).list_pod_sandbox().unwrap();
    assert!(
        listed.is_empty(),
        "containerd forgot its sandboxes: {listed:?}"
    );
    let live = Watched::new(&c, c.run_pod(0, &PodSpec::named("live")), None);

    // Two more pods while the agent sweeps every second; the forgotten ones are watched.
    let (during, reclaim_took) = std::thread::scope(|s| {
        let maker = s.spawn(|| {
            (0..2)
                .map(|k| c.run_pod(0, &PodSpec::named(&format!("during-{k}"))))
                .collect::<Vec<_>>()
        });
        let took = wait_for(Duration::from_secs(GC_INTERVAL + GC_GRACE + 20), || {
            forgotten.iter().all(|w| w.holdings(&c) == Holdings::none())
        });
        let since_restart = restarted.elapsed();
        (maker.join().unwrap(), took.map(|_| since_restart))
    });
    // The round logs its reclaims when it ends, a moment after the last object is gone.
    let logged = |log: &str| {
        forgotten
            .iter()
            .all(|w| log.contains(&format!("reclaimed {} eth0", w.pod.id)))
    };
    let _ = wait_for(Duration::from_secs(10), || logged(&c.nodes[0].agent_log()));
    let log = c.nodes[0].agent_log();
    let Some(took) = reclaim_took else {
        let left: Vec<_> = forgotten.iter().map(|w| w.holdings(&c)).collect();
        panic!("forgotten pods not reclaimed: {left:#?}\n{log}");
    };
    eprintln!(
        "{plugins:?} plugins: reclaim of 2 forgotten pods (older than gc-grace): gone {took:?} \
         after containerd came back (gc-interval {GC_INTERVAL} s)"
    );
    for line in log.lines().filter(|l| l.contains("GC")) {
        eprintln!("agent: {line}");
    }
    for w in &forgotten {
        assert!(
            log.contains(&format!("reclaimed {} eth0", w.pod.id)),
            "{log}"
        );
    }
    assert_eq!(metric(&c, "rcni_node_gc_reclaimed_total"), 2);

    // The live pods outlive the grace and more rounds, untouched and reachable; no round fails.
    let during: Vec<Watched> = during
        .into_iter()
        .map(|pod| Watched::new(&c, pod, None))
        .collect();
    let runs = metric(&c, "rcni_node_gc_runs_total");
    let errors_up = metric(&c, "rcni_node_gc_errors_total");
    std::thread::sleep(Duration::from_secs(GC_GRACE + 3 * GC_INTERVAL));
    assert!(metric(&c, "rcni_node_gc_runs_total") > runs, "{log}");
    for w in std::iter::once(&live).chain(&during) {
        let h = w.holdings(&c);
        assert!(all_held(&h), "live pod {} touched: {h:?}", w.pod.id);
        assert!(
            gateway_reachable(&w.pod),
            "live pod {} unreachable",
            w.pod.id
        );
    }
    assert!(
        bystander_intact(&c, &by_ns.name, &by_id, by_ip),
        "the other network's attachment was touched"
    );
    assert_eq!(metric(&c, "rcni_node_gc_reclaimed_total"), 2);
    assert_eq!(
        metric(&c, "rcni_node_gc_errors_total"),
        errors_up,
        "{}",
        c.nodes[0].agent_log()
    );
}

#[test]
fn forgotten_sandboxes_are_reclaimed_with_rcni_plugins() {
    if skip() {
        return;
    }
    forgotten_sandboxes_are_reclaimed(Plugins::Rcni);
}

#[test]
fn forgotten_sandboxes_are_reclaimed_with_go_plugins() {
    if skip() {
        return;
    }
    forgotten_sandboxes_are_reclaimed(Plugins::Go);
}

/// A node reboot: containerd, its shims and pods and the agent killed, the node's `/run`
/// emptied (the agent's state with the host-local leases; containerd's state and the pods'
/// namespaces), `/var/lib` kept (containerd's metadata, the libcni cache). containerd and the
/// agent start again; the kubelet stand-in stops and removes the NOTREADY sandboxes and makes
/// new ones: nothing of the old pods is left, the new pods are reachable.
#[test]
fn a_node_reboot_leaves_no_lease_or_rule_of_the_old_pods() {
    if skip() {
        return;
    }
    let Some(mut c) = node_with_gc(Plugins::Rcni) else {
        return;
    };
    let mut mapped = PodSpec::named("before-0");
    mapped.host_ports.push((HOST_PORT, 8080));
    let old = [
        c.run_pod(0, &mapped),
        c.run_pod(0, &PodSpec::named("before-1")),
    ];
    let old_ids: Vec<String> = old.iter().map(|p| p.id.clone()).collect();
    // The checks below find the hostPort pod's nft elements by its ID and by its hostPort.
    let node_ns = c.nodes[0].ns.name.clone();
    let none = Ipv4Addr::UNSPECIFIED;
    assert!(!nft_naming(&node_ns, none, &old_ids[0], None).is_empty());
    assert!(!nft_naming(&node_ns, none, "no such ID", Some(HOST_PORT)).is_empty());

    c.nodes[0].containerd.as_mut().unwrap().kill();
    c.nodes[0].agent.kill();
    for pod in &old {
        c.sb.remove_container(&pod.ns).unwrap();
    }
    std::fs::remove_dir_all(c.nodes[0].dir.join("state")).unwrap();
    let published = c.begin_agent(0);
    c.nodes[0].containerd.as_mut().unwrap().restart();
    link_socket(&c);
    c.wait_agent_started(0, published);
    conflist_is_readable_by_libcni_1_1(&c);

    let mut cri = c.cri(0);
    let ready = wait_for(Duration::from_secs(30), || {
        cri.network_ready().is_ok_and(|(ready, _)| ready)
    });
    assert!(ready.is_some(), "NetworkReady after the reboot");
    // The agent's GC runs while the NOTREADY sandboxes are older than the grace: they are
    // known to the runtime, so it leaves them to kubelet.
    let runs = metric(&c, "rcni_node_gc_runs_total");
    std::thread::sleep(Duration::from_secs(GC_GRACE + 2 * GC_INTERVAL));
    assert!(
        metric(&c, "rcni_node_gc_runs_total") > runs,
        "GC rounds ran"
    );
    let old_id_strs: Vec<&str> = old_ids.iter().map(String::as_str).collect();
    c.remove_notready_sandboxes(0, &old_id_strs);
    let new = [
        c.run_pod(0, &PodSpec::named("after-0")),
        c.run_pod(0, &PodSpec::named("after-1")),
    ];
    let new_ids: Vec<&str> = new.iter().map(|p| p.id.as_str()).collect();

    let node = &c.nodes[0];
    let mut leases = Vec::new();
    for entry in std::fs::read_dir(node.dir.join("state/ipam/rcni")).unwrap() {
        let entry = entry.unwrap();
        if entry
            .file_name()
            .to_string_lossy()
            .parse::<Ipv4Addr>()
            .is_ok()
        {
            leases.push(std::fs::read_to_string(entry.path()).unwrap());
        }
    }
    assert_eq!(
        leases.len(),
        new.len(),
        "leases after the reboot: {leases:?}"
    );
    for owner in &leases {
        assert!(
            new_ids.iter().any(|id| owner.starts_with(id)),
            "a lease of an old pod: {owner:?}"
        );
    }
    let results = cni_cache(&c).join("results");
    for id in &old_ids {
        assert!(
            !results.join(format!("rcni-{id}-eth0")).exists(),
            "cache entry of {id}"
        );
        let nft = nft_naming(&node.ns.name, Ipv4Addr::UNSPECIFIED, id, Some(HOST_PORT));
        assert!(nft.is_empty(), "nft of the old pod {id}: {nft:#?}");
    }
    for pod in &new {
        assert!(gateway_reachable(pod), "new pod {} unreachable", pod.id);
    }
    assert!(ping(&new[0].ns.name, new[1].ip), "new pod to new pod");
    assert_eq!(metric(&c, "rcni_node_gc_reclaimed_total"), 0);
}
