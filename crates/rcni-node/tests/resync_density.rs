//! Root-only measurement (ignored by default; `scripts/node-convergence` runs it): what one
//! host-gw resync costs with 1,000 remote nodes as the node fills with local pods (0, 110,
//! 500 and 1,000: a veth on the bridge and a per-pod host route each, as bridge and ptp
//! leave them). The resync reads only the agent's own routes (the kernel filters the route
//! dump by protocol), so its cost should follow the remote nodes, not the local pods.
//! Everything happens in one throwaway namespace; the measuring thread stays in its own.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Instant;

use cni_linux::{Handle, NetNs};
use cni_testkit::{is_root, Sandbox};
use ipnet::Ipv4Net;
use rcni_node::backend::host_gw::HostGw;
use rcni_node::backend::Backend;
use rcni_node::lease::{Lease, LeaseAttrs, Subnets};

const REMOTES: usize = 1000;
const ROUNDS: usize = 25;

/// Runs `commands` through one `ip -batch` in namespace `ns`.
fn ip_batch(ns: &str, commands: &str) {
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("ip runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(commands.as_bytes())
        .expect("batch written");
    assert!(
        child.wait().expect("ip waited").success(),
        "ip -batch failed"
    );
}

/// Remote node `i`: a /26 of 198.19.0.0/16 behind 198.18.(1 + i/250).(1 + i%250).
fn remote(i: usize) -> Lease {
    let base = u32::from(Ipv4Addr::new(198, 19, 0, 0)) + (i as u32) * 64;
    Lease {
        subnet: Subnets {
            v4: Some(Ipv4Net::new(base.into(), 26).expect("a /26")),
            v6: None,
        },
        attrs: LeaseAttrs {
            public_ip: Ipv4Addr::new(198, 18, 1 + (i / 250) as u8, 1 + (i % 250) as u8),
            public_ipv6: None,
            backend_type: "host-gw".into(),
            backend_data: None,
            backend_v6_data: None,
            node_name: None,
        },
    }
}

/// Adds local pods `from..to`: a veth on the bridge and a host route to the pod's address.
fn add_pods(ns: &str, from: usize, to: usize) {
    let mut batch = String::new();
    for i in from..to {
        let pod = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 128, 0)) + i as u32);
        batch.push_str(&format!(
            "link add rdp{i}a type veth peer name rdp{i}b\n\
             link set rdp{i}a master cni0 up\n\
             link set rdp{i}b up\n\
             route add {pod}/32 dev rdp{i}b scope link\n"
        ));
    }
    ip_batch(ns, &batch);
}

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "measurement: run with --ignored as root"]
fn host_gw_resync_with_1000_remotes_as_local_pods_grow() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let sb = Sandbox::new().expect("sandbox");
    let ns = sb.host().name.clone();
    ip_batch(
        &ns,
        "link add ul0 type veth peer name ul1\n\
         addr add 198.18.0.1/17 dev ul0\n\
         link set ul0 up\nlink set ul1 up\n\
         link add cni0 type bridge\n\
         addr add 198.18.192.1/18 dev cni0\nlink set cni0 up\n",
    );
    let netns = NetNs::open(&sb.host().path).expect("netns");
    let mut nl = Handle::in_netns(&netns).expect("netlink in the namespace");
    let underlay = nl.link_by_name("ul0").expect("underlay").index;
    let mut backend = HostGw::new(nl, underlay);
    let remotes: Vec<Lease> = (0..REMOTES).map(remote).collect();
    let first = backend.resync(&remotes).expect("first resync");
    assert_eq!(first.programmed, REMOTES);
    let mut pods = 0;
    for target in [0, 110, 500, 1000] {
        add_pods(&ns, pods, target);
        pods = target;
        let times: Vec<f64> = (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                let r = backend.resync(&remotes).expect("resync");
                assert_eq!(
                    (r.restored, r.removed),
                    (0, 0),
                    "a steady resync changes nothing"
                );
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        println!(
            "RESULT host-gw resync, {REMOTES} remotes, {pods} local pods: median {:.2} ms over {ROUNDS}",
            median_ms(times)
        );
    }
}
