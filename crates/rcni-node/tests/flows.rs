//! Root-only: every policy verdict visible. Two simulated nodes (host-gw, dual-stack) whose
//! agents enforce NetworkPolicy and read the program's flow log; pods made with `rcni pod
//! run`; real TCP connections and UDP datagrams between them; the flows read back with
//! `rcni flows --json` over each agent's socket, `/metrics`, `rcni policy explain` and
//! `rcni doctor`, and the page in a real headless browser. The kernel is read with `nft -j`
//! and the node's `/proc/net/netfilter/nfnetlink_log` besides.

mod harness;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use cni_testkit::browser::Browser;
use cni_testkit::{run_in, tcp_connects, udp_echoes};
use harness::netpol::*;
use harness::*;
use serde_json::{json, Value};

/// The group the program logs to (`cni_policy::nft::flow_log::FLOW_LOG_GROUP`).
const GROUP: u16 = 7700;
const PROBE: Duration = Duration::from_millis(400);

/// Every pod of `x` admits nothing (a `podSelector: {}` policy).
const X_DENY: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny, namespace: x}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n";
/// x/c admits y/a on TCP/80.
const C_FROM_A: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: c-from-a, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: c}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n      podSelector: {matchLabels: {pod: a}}\n    ports: [{protocol: TCP, port: 80}]\n";
/// x/a admits y/b on TCP/80 (`ingress[0]`).
const A_FROM_B: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a-from-b, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n      podSelector: {matchLabels: {pod: b}}\n    ports: [{protocol: TCP, port: 80}]\n";

fn skip() -> bool {
    if skip_unless_root() {
        return true;
    }
    if !br_netfilter_loaded() {
        eprintln!("skipping: the br_netfilter module is not loaded (/proc/sys/net/bridge)");
        return true;
    }
    false
}

/// Two dual-stack host-gw nodes; node `i`'s agent gets `extra[i]`; pods x/a and y/b on
/// node1, y/a on node2 (namespaces labelled `ns=<name>`).
fn cluster(extra: [&[&str]; 2]) -> (Cluster, World) {
    let config = json!({
        "Network": CLUSTER_NET, "SubnetLen": 24,
        "EnableIPv6": true, "IPv6Network": "fd52:18::/48", "IPv6SubnetLen": 64,
        "Backend": {"Type": "host-gw"}
    });
    let mut c = Cluster::with_config(config);
    let multi = cni_testkit::bin_path("rcni-plugins").unwrap();
    std::os::unix::fs::symlink(multi, c.plugins.join("loopback")).unwrap();
    for args in extra {
        let i = c.add_node();
        c.nodes[i].extra = args.iter().map(|a| a.to_string()).collect();
        c.start_agent(i);
    }
    c.wait_converged(Duration::from_secs(30))
        .expect("converged");
    let mut w = World::empty();
    for ns in ["x", "y"] {
        w.label_namespace(&c, ns, &[("ns", ns)]);
    }
    w.add_pod(&c, 0, "x", "a");
    w.add_pod(&c, 0, "y", "b");
    w.add_pod(&c, 1, "y", "a");
    (c, w)
}

/// `rcni <args>` on node `i` (where etcd is reachable), its output.
fn rcni(c: &Cluster, i: usize, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &c.nodes[i].ns.name])
        .arg(cni_testkit::bin_path("rcni").unwrap())
        .args(args)
        .output()
        .unwrap()
}

/// `rcni flows --json` of node `i`'s agent, over its socket.
fn flows(c: &Cluster, i: usize, extra: &[&str]) -> Vec<Value> {
    let state = c.nodes[i].dir.join("state");
    let mut args = vec!["flows", "--json", "--state-dir", state.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = rcni(c, i, &args);
    assert!(
        out.status.success(),
        "rcni flows: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Whether flow `f` is `verdict` over `protocol` from pod `src` to pod `dst`'s address `ip`
/// and `port`.
fn is(
    f: &Value,
    verdict: &str,
    protocol: &str,
    src: &str,
    dst: &str,
    ip: IpAddr,
    port: u16,
) -> bool {
    let pod = |e: &Value| {
        format!(
            "{}/{}",
            e["namespace"].as_str().unwrap_or("?"),
            e["pod"].as_str().unwrap_or("?")
        )
    };
    f["verdict"] == verdict
        && f["protocol"] == protocol
        && pod(&f["src"]) == src
        && pod(&f["dst"]) == dst
        && f["dst"]["ip"] == ip.to_string()
        && f["dst"]["port"] == port
}

/// Waits (10 s) for a flow of node `i` that `want` picks; that flow.
fn wait_flow(c: &Cluster, i: usize, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let mut last = Vec::new();
    let found = wait_for(Duration::from_secs(10), || {
        last = flows(c, i, &[]);
        last.iter().any(&want)
    });
    assert!(
        found.is_some(),
        "{what}: not in {last:#?}\n{}",
        c.nodes[i].agent_log()
    );
    last.into_iter().find(want).unwrap()
}

/// The groups bound in node `i`'s namespace (the kernel's own list).
fn bound_groups(c: &Cluster, i: usize) -> Vec<u16> {
    let out = Command::new("ip")
        .args(["netns", "exec", &c.nodes[i].ns.name])
        .args(["cat", "/proc/net/netfilter/nfnetlink_log"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The value of the metric line starting with `series` on node `i`.
fn metric(c: &Cluster, i: usize, series: &str) -> Option<f64> {
    let text = c.nodes[i].health_get("/metrics").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// Waits until pod `from` no longer reaches `to` on TCP (the policy is in force).
fn wait_denied(w: &World, from: (&str, &str), to: SocketAddr) {
    let ns = &w.pod(from.0, from.1).netns.name;
    let denied = wait_for(Duration::from_secs(20), || !tcp_connects(ns, to, PROBE));
    assert!(denied.is_some(), "{from:?} still reaches {to}");
}

#[test]
fn denied_tcp_and_udp_over_both_families_name_the_isolating_policy() {
    if skip() {
        return;
    }
    let (c, mut w) = cluster([&[], &[]]);
    w.apply(&c, X_DENY);
    let a = w.pod("x", "a").pod.ips.clone();
    wait_denied(&w, ("y", "b"), SocketAddr::new(a[0], 80));
    for ip in &a {
        // Same node (y/b) and across nodes (y/a); TCP SYNs and UDP datagrams.
        for src in ["b", "a"] {
            let ns = &w.pod("y", src).netns.name;
            assert!(!tcp_connects(ns, SocketAddr::new(*ip, 80), PROBE));
            assert!(!udp_echoes(ns, SocketAddr::new(*ip, 81), PROBE));
        }
    }
    // x/a's ingress is decided on its node: every verdict is node1's.
    for ip in &a {
        for src in ["y/b", "y/a"] {
            for (proto, port) in [("TCP", 80), ("UDP", 81)] {
                let what = format!("{proto} {src} -> x/a {ip}:{port}");
                let f = wait_flow(&c, 0, &what, |f| {
                    is(f, "denied", proto, src, "x/a", *ip, port)
                });
                assert_eq!(f["direction"], "ingress", "{what}: {f}");
                assert_eq!(f["policies"], json!(["x/deny"]), "{what}: {f}");
                assert!(f["count"].as_u64() >= Some(1));
                assert!(f["time"].as_str().unwrap().ends_with('Z'));
            }
        }
    }
    // The other node gave no verdict on them.
    assert!(flows(&c, 1, &[])
        .iter()
        .all(|f| f["dst"]["pod"] != "a" || f["dst"]["namespace"] != "x"));
    // --denied and --pod pick; --since 1h keeps them, a pod without flows has none.
    assert!(!flows(&c, 0, &["--denied", "--pod", "x/a", "--since", "1h"]).is_empty());
    assert!(flows(&c, 0, &["--pod", "y/zz"]).is_empty());

    // The verdict counters name the policy.
    let series = "rcni_node_policy_verdicts_total{direction=\"ingress\",verdict=\"denied\",namespace=\"x\",policy=\"deny\"}";
    assert!(
        metric(&c, 0, series) >= Some(8.0),
        "{:?}",
        c.nodes[0].health_get("/metrics")
    );
    assert!(metric(&c, 0, "rcni_node_flow_memory_bytes") > Some(0.0));

    // explain shows the pair's recent flows, doctor the most frequent denied pairs.
    let state = c.nodes[0].dir.join("state");
    let explain = rcni(
        &c,
        0,
        &[
            "policy",
            "explain",
            "x/a",
            "--from",
            "y/b",
            "--port",
            "80",
            "--etcd-endpoints",
            &c.etcd_url,
            "--prefix",
            PREFIX,
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        explain.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&explain.stderr)
    );
    assert!(text.contains(": denied\n"), "{text}");
    assert!(
        text.contains("Recent flows seen by the node agent"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("denied")
            && l.contains("y/b:")
            && l.contains("x/a:80")
            && l.contains("x/deny")),
        "{text}"
    );
    let doctor = rcni(
        &c,
        0,
        &[
            "doctor",
            "--conf-dir",
            c.nodes[0].conf_dir().to_str().unwrap(),
        ],
    );
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains("denied connections (last 10 minutes"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("y/b -> x/a TCP/80") && l.contains("denied by x/deny")),
        "{text}"
    );

    // --agent reads the same flows from the agent's HTTP address.
    let url = format!("http://{}:9477", c.nodes[0].ip);
    let over_http = flows(&c, 0, &["--agent", &url, "--denied", "--pod", "x/a"]);
    let over_socket = flows(&c, 0, &["--denied", "--pod", "x/a"]);
    let keys = |v: &[Value]| {
        let mut k: Vec<String> = v
            .iter()
            .map(|f| format!("{} {} {}", f["protocol"], f["src"]["ip"], f["dst"]))
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(&over_http), keys(&over_socket));
    assert!(!over_http.is_empty());
    follow_sees_a_new_denial(&c, &w, a[0]);
}

/// `rcni flows --follow` prints a denial that happens after it started.
fn follow_sees_a_new_denial(c: &Cluster, w: &World, to: IpAddr) {
    use std::io::BufRead;
    let state = c.nodes[0].dir.join("state");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &c.nodes[0].ns.name])
        .arg(cni_testkit::bin_path("rcni").unwrap())
        .args(["flows", "--follow", "--json", "--pod", "x/a", "--state-dir"])
        .arg(&state)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Port 82 was never tried before the follower started.
    let ns = &w.pod("y", "b").netns.name;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = None;
    while seen.is_none() && std::time::Instant::now() < deadline {
        assert!(!udp_echoes(ns, SocketAddr::new(to, 82), PROBE));
        while let Ok(line) = rx.try_recv() {
            let f: Value = serde_json::from_str(&line).unwrap();
            if is(&f, "denied", "UDP", "y/b", "x/a", to, 82) {
                seen = Some(f);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let f = seen.expect("rcni flows --follow printed the new denial");
    assert_eq!(f["policies"], json!(["x/deny"]), "{f}");
}

#[test]
fn an_allowed_connection_is_listed_with_its_rule_under_all_and_not_under_denied() {
    if skip() {
        return;
    }
    // node1 logs every verdict, node2 the denied ones.
    let (c, mut w) = cluster([&["--flow-log", "all"], &[]]);
    w.add_pod(&c, 1, "x", "c");
    w.apply(&c, X_DENY);
    w.apply(&c, A_FROM_B);
    w.apply(&c, C_FROM_A);
    let a = w.pod("x", "a").pod.ips[0];
    let xc = w.pod("x", "c").pod.ips[0];
    wait_denied(&w, ("y", "a"), SocketAddr::new(a, 80));
    let b = &w.pod("y", "b").netns.name;
    let allowed = wait_for(Duration::from_secs(20), || {
        tcp_connects(b, SocketAddr::new(a, 80), PROBE)
    });
    assert!(allowed.is_some(), "y/b reaches x/a:80");
    let f = wait_flow(&c, 0, "allowed y/b -> x/a:80", |f| {
        is(f, "allowed", "TCP", "y/b", "x/a", a, 80)
    });
    assert_eq!(f["policies"], json!(["x/a-from-b"]));
    assert_eq!(
        f["rule"],
        "ingress[0]: from pods: pod=b in namespaces: ns=y; on TCP/80"
    );
    assert_eq!(f["direction"], "ingress");
    // y/b leaves no egress record: no policy isolates it (it is dispatched, not judged).
    assert!(flows(&c, 0, &[]).iter().all(|f| f["direction"] != "egress"));

    // Under `denied`, allowed connections leave nothing; denied ones do.
    let ya = &w.pod("y", "a").netns.name;
    let reached = wait_for(Duration::from_secs(20), || {
        tcp_connects(ya, SocketAddr::new(xc, 80), PROBE)
    });
    assert!(reached.is_some(), "y/a reaches x/c:80");
    assert!(!tcp_connects(b, SocketAddr::new(xc, 80), PROBE));
    wait_flow(&c, 1, "denied y/b -> x/c:80", |f| {
        is(f, "denied", "TCP", "y/b", "x/c", xc, 80)
    });
    assert!(
        flows(&c, 1, &[]).iter().all(|f| f["verdict"] != "allowed"),
        "{:#?}",
        flows(&c, 1, &[])
    );
    // The kernel has the allowed log rules on node1 only.
    let all = policy_table(&c.nodes[0].ns.name).unwrap().to_string();
    let denied = policy_table(&c.nodes[1].ns.name).unwrap().to_string();
    assert!(all.contains("rcni:allow:pol-i-"), "{all}");
    assert!(
        !denied.contains("rcni:allow:") && denied.contains("rcni:deny:pod-i-"),
        "{denied}"
    );
}

#[test]
fn a_flood_of_denied_packets_is_rate_limited_and_counted_while_allowed_traffic_flows() {
    if skip() {
        return;
    }
    let (c, mut w) = cluster([&[], &[]]);
    w.apply(&c, X_DENY);
    let a = w.pod("x", "a").pod.ips[0];
    wait_denied(&w, ("y", "b"), SocketAddr::new(a, 80));
    // 30,000 datagrams to x/a: each is a new connection the program denies.
    let flooder = w.pod("y", "b").netns.name.clone();
    let flood = std::thread::spawn(move || {
        run_in(&flooder, move || {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            for _ in 0..30_000 {
                s.send_to(b"flood", SocketAddr::new(a, 81))?;
            }
            Ok(())
        })
        .unwrap()
    });
    // Allowed traffic beside it (y has no policy).
    let ya = w.pod("y", "a").pod.ips[0];
    let b = w.pod("y", "b").netns.name.clone();
    let mut allowed = 0;
    while !flood.is_finished() || allowed < 10 {
        assert!(
            tcp_connects(&b, SocketAddr::new(ya, 80), Duration::from_secs(2)),
            "allowed traffic stopped"
        );
        allowed += 1;
    }
    flood.join().unwrap();
    let suppressed = "rcni_node_flow_records_suppressed_total{verdict=\"denied\"}";
    let held_back = wait_for(Duration::from_secs(10), || {
        metric(&c, 0, suppressed) >= Some(10_000.0)
    });
    assert!(
        held_back.is_some(),
        "{:?}",
        c.nodes[0].health_get("/metrics")
    );
    let f = wait_flow(&c, 0, "the flood's flow", |f| {
        is(f, "denied", "UDP", "y/b", "x/a", a, 81)
    });
    let count = f["count"].as_u64().unwrap();
    let suppressed = metric(&c, 0, suppressed).unwrap() as u64;
    assert!(
        count >= 1 && count + suppressed <= 30_010,
        "count {count}, suppressed {suppressed}"
    );
    assert!(count < 10_000, "the rate limit let {count} records through");
    assert_eq!(
        metric(&c, 0, "rcni_node_flow_records_lost_total"),
        Some(0.0)
    );
}

#[test]
fn a_restarted_agent_releases_the_group_and_its_flows_resume() {
    if skip() {
        return;
    }
    let (mut c, mut w) = cluster([&[], &[]]);
    w.apply(&c, X_DENY);
    let a = w.pod("x", "a").pod.ips[0];
    wait_denied(&w, ("y", "b"), SocketAddr::new(a, 80));
    assert_eq!(bound_groups(&c, 0), [GROUP]);
    let socket = c.nodes[0].dir.join("state/flows.sock");
    assert!(socket.exists());

    // Killed: the kernel releases the group with the socket.
    c.nodes[0].agent.kill();
    assert!(wait_for(Duration::from_secs(5), || bound_groups(&c, 0).is_empty()).is_some());
    c.restart_agent(0);
    assert!(wait_for(Duration::from_secs(10), || bound_groups(&c, 0) == [GROUP]).is_some());
    let b = &w.pod("y", "b").netns.name;
    assert!(!tcp_connects(b, SocketAddr::new(a, 80), PROBE));
    wait_flow(&c, 0, "after the kill", |f| {
        is(f, "denied", "TCP", "y/b", "x/a", a, 80)
    });

    // Stopped: it unbinds and removes its socket.
    c.nodes[0].agent.terminate();
    assert!(bound_groups(&c, 0).is_empty());
    assert!(!socket.exists());
    let out = rcni(
        &c,
        0,
        &[
            "flows",
            "--state-dir",
            c.nodes[0].dir.join("state").to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the node agent"));
    c.restart_agent(0);
    assert!(!tcp_connects(b, SocketAddr::new(a, 81), PROBE));
    wait_flow(&c, 0, "after the stop", |f| {
        is(f, "denied", "TCP", "y/b", "x/a", a, 81)
    });
}

#[test]
fn flow_log_off_programs_no_log_rule_and_serves_no_flows() {
    if skip() {
        return;
    }
    let (c, mut w) = cluster([&["--flow-log", "off"], &[]]);
    w.apply(&c, X_DENY);
    let a = w.pod("x", "a").pod.ips[0];
    wait_denied(&w, ("y", "b"), SocketAddr::new(a, 80));
    let table = policy_table(&c.nodes[0].ns.name).unwrap().to_string();
    assert!(table.contains("\"drop\""), "{table}");
    assert!(
        !table.contains("\"log\"") && !table.contains("flowlog"),
        "{table}"
    );
    assert!(bound_groups(&c, 0).is_empty());
    assert!(!c.nodes[0].dir.join("state/flows.sock").exists());
    assert!(c.nodes[0].health_get("/flows").is_err(), "no /flows");
    // The other node (default: denied) has them.
    let table = policy_table(&c.nodes[1].ns.name).unwrap().to_string();
    assert!(
        table.contains("\"log\"") && table.contains("flowlog-denied"),
        "{table}"
    );
}

#[test]
fn the_page_shows_the_pods_and_a_denied_flow_naming_its_policy_in_a_real_browser() {
    if skip() {
        return;
    }
    if !Browser::available() {
        eprintln!(
            "skipping: chromium is not installed ({})",
            cni_testkit::browser::CHROMIUM
        );
        return;
    }
    let (c, mut w) = cluster([&["--flow-log", "all"], &[]]);
    w.apply(&c, X_DENY);
    w.apply(&c, A_FROM_B);
    let a = w.pod("x", "a").pod.ips[0];
    wait_denied(&w, ("y", "a"), SocketAddr::new(a, 80));
    let node = &c.nodes[0];
    let url = format!("http://{}:9477/ui", node.ip);
    let mut browser = Browser::open(&node.ns.name, &url, 1400, 1000).unwrap();
    // The page is open before the traffic: the rows come live, without a reload.
    browser
        .wait_for(
            "document.getElementById('status')?.textContent === 'live'",
            Duration::from_secs(20),
        )
        .unwrap();
    let ya = &w.pod("y", "a").netns.name;
    let yb = &w.pod("y", "b").netns.name;
    assert!(!tcp_connects(ya, SocketAddr::new(a, 80), PROBE));
    assert!(tcp_connects(yb, SocketAddr::new(a, 80), PROBE));
    let policies = browser
        .wait_for(
            "[...document.querySelectorAll('#flows tr.flow[data-verdict=denied]')].map(r => r.querySelector('td.policies').textContent + ' ' + r.querySelector('td.src').textContent).join('\\n')",
            Duration::from_secs(20),
        )
        .unwrap();
    let policies = policies.as_str().unwrap();
    assert!(
        policies.contains("x/deny") && policies.contains("y/a:"),
        "{policies}"
    );
    let rule = browser
        .wait_for(
            "document.querySelector('#flows tr.flow[data-verdict=allowed] td.rule')?.textContent",
            Duration::from_secs(20),
        )
        .unwrap();
    assert!(
        rule.as_str()
            .unwrap()
            .starts_with("ingress[0]: from pods: pod=b"),
        "{rule}"
    );
    // The node's pods with their labels and isolation, and the picture's denied edge.
    let pods = browser
        .wait_for(
            "document.querySelector('#pods tr.pod[data-pod=\"x/a\"]')?.textContent",
            Duration::from_secs(20),
        )
        .unwrap();
    let pods = pods.as_str().unwrap();
    assert!(
        pods.contains("pod=a") && pods.contains("isolated by x/a-from-b, x/deny"),
        "{pods}"
    );
    let edges = browser
        .eval("document.querySelectorAll('#picture line.edge-denied').length")
        .unwrap();
    assert!(edges.as_u64() >= Some(1), "{edges}");
    // The same flows as `rcni flows` prints them (README, NetworkPolicy).
    let state = node.dir.join("state");
    let table = rcni(&c, 0, &["flows", "--state-dir", state.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("x/deny") && table.contains("ingress[0]"),
        "{table}"
    );
    println!("{table}");
    let json = rcni(
        &c,
        0,
        &[
            "flows",
            "--denied",
            "--pod",
            "x/a",
            "--since",
            "5m",
            "--json",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    println!("{}", String::from_utf8_lossy(&json.stdout));
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("flows/ui.png");
    browser.screenshot(&shot).unwrap();
    println!("screenshot: {}", shot.display());
}
