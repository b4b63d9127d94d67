//! Root-only: rcni-node against an etcd that demands client certificates
//! (`--client-cert-auth --trusted-ca-file --cert-file --key-file`), certificates made by the
//! test with openssl. Agents with the right client certificate converge and their pods talk
//! across nodes; an agent without a client certificate, with one of another CA, or trusting
//! the wrong CA for the server, or given https without a CA, stops at once with one line
//! naming the endpoint and the cause, having programmed nothing. Then the certificates are
//! rotated under running agents: new files (a bundle of both CAs, a client certificate of
//! the new CA), etcd restarted trusting the new CA only (the old certificates revoked), and
//! the agents keep their leases and routes, and a node started afterwards joins.

mod harness;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use harness::etcd::{self, Ca, Pair};
use harness::*;
use serde_json::json;

/// The underlay gateway's https URL (where the test's etcd listens).
fn url() -> String {
    format!("https://{UNDERLAY_GW}:2379")
}

#[test]
fn client_certificates_are_required_checked_and_rotated_without_restart() {
    if skip_unless_root() {
        return;
    }
    let sb_dir = tempfile::tempdir().unwrap();
    let pki: PathBuf = sb_dir.path().join("pki");
    let ca = Ca::new(&pki, "ca1");
    let other = Ca::new(&pki, "other");
    // Each node's certificate files, as a Secret volume would hold them (rotated in place).
    let node_files = |n: usize| -> (PathBuf, Pair) {
        let dir = pki.join(format!("node{n}"));
        fs::create_dir_all(&dir).unwrap();
        let issued = ca.issue(&format!("node{n}"), &[]);
        let files = Pair {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        fs::copy(&issued.cert, &files.cert).unwrap();
        fs::copy(&issued.key, &files.key).unwrap();
        let bundle = dir.join("ca.crt");
        fs::copy(&ca.pair.cert, &bundle).unwrap();
        (bundle, files)
    };
    let (bundle1, files1) = node_files(1);
    let config = json!({"Network": CLUSTER_NET, "SubnetLen": 24, "Backend": {"Type": "host-gw"}});
    let mut c = Cluster::with_tls_etcd(&config, &ca, &files1);
    for _ in 0..4 {
        c.add_node();
    }
    c.ttl = 9;
    let (bundle2, files2) = node_files(2);
    c.nodes[0].etcd_args = Some(etcd::agent_tls_args(&url(), &bundle1, Some(&files1)));
    c.nodes[1].etcd_args = Some(etcd::agent_tls_args(&url(), &bundle2, Some(&files2)));
    let [a, b] = c.two_talking_pods();

    // Refusals: each stops at start, names the endpoint and the cause, programs nothing.
    let stranger = other.issue("stranger", &[]);
    c.expect_refused(
        2,
        etcd::agent_tls_args(&url(), &ca.pair.cert, None),
        &url(),
        "requires a client certificate",
    );
    c.expect_refused(
        2,
        etcd::agent_tls_args(&url(), &ca.pair.cert, Some(&stranger)),
        &url(),
        "rejected the client certificate",
    );
    c.expect_refused(
        2,
        etcd::agent_tls_args(&url(), &other.pair.cert, Some(&files1)),
        &url(),
        "not signed by --etcd-cafile",
    );
    c.expect_refused(
        2,
        vec!["--etcd-endpoints".into(), url()],
        &url(),
        "https needs --etcd-cafile",
    );
    assert_eq!(etcd::lease_ids(&c).len(), 2, "no lease for a refused agent");

    // Revoked under running agents: etcd restarts trusting another CA only. The agents
    // retry (STATUS 50 with the reason) and `rcni doctor` names the endpoint and the cause;
    // they recover once etcd trusts their CA again.
    let server = ca.issue("server", &[&UNDERLAY_GW.to_string(), "127.0.0.1"]);
    c.stop_etcd();
    c.etcd_server_args = etcd::tls_server_args(&server, &other.pair.cert);
    c.etcdctl_args = etcd::etcdctl_tls_args(&ca.pair.cert, &stranger);
    c.start_etcd();
    let down = wait_for(Duration::from_secs(30), || c.status_code(0) == 50);
    assert!(
        down.is_some(),
        "STATUS 50 once the server refuses the agent"
    );
    // The first failures may be plain closes; the reason is the refusal once it is seen.
    let mut problems = Vec::new();
    let named = wait_for(Duration::from_secs(20), || {
        problems = c.doctor_problems(0);
        problems.iter().any(|p| {
            p.contains("STATUS 50")
                && p.contains(&url())
                && p.contains("rejected the client certificate")
        })
    });
    assert!(
        named.is_some(),
        "rcni doctor names the endpoint and the cause: {problems:?}"
    );
    eprintln!("rcni doctor: {problems:?}");
    assert!(
        c.nodes[0].has_route(&c.nodes[1].subnet().unwrap()),
        "routes kept"
    );
    c.stop_etcd();
    c.etcd_server_args = etcd::tls_server_args(&server, &ca.pair.cert);
    c.etcdctl_args = etcd::etcdctl_tls_args(&ca.pair.cert, &ca.issue("root", &[]));
    c.start_etcd();
    let back = wait_for(Duration::from_secs(30), || {
        c.nodes[..2].iter().all(Node::healthy)
    });
    assert!(back.is_some(), "agents recover when etcd trusts them again");

    // Rotation: a new CA; the nodes' files now hold both CAs and a certificate of the new
    // one; etcd restarts trusting the new CA only, with a server certificate of it.
    let leases = etcd::lease_ids(&c);
    let subnets: Vec<String> = c.nodes[..2].iter().map(|n| n.subnet().unwrap()).collect();
    let ca2 = Ca::new(&pki, "ca2");
    let both = pki.join("both.pem");
    fs::write(
        &both,
        [
            fs::read(&ca.pair.cert).unwrap(),
            fs::read(&ca2.pair.cert).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    for (n, (bundle, files)) in [(1, (&bundle1, &files1)), (2, (&bundle2, &files2))] {
        let fresh = ca2.issue(&format!("node{n}-rotated"), &[]);
        etcd::replace_file(&both, bundle);
        etcd::replace_file(&fresh.key, &files.key);
        etcd::replace_file(&fresh.cert, &files.cert);
    }
    // The agents notice the new files (compared every 5 s, used on the next renewal).
    let noticed = wait_for(Duration::from_secs(30), || {
        c.nodes[..2]
            .iter()
            .all(|n| n.agent_log().contains("TLS files changed: reconnected"))
    });
    assert!(
        noticed.is_some(),
        "agents did not take the new files:\n{}",
        c.nodes[0].agent_log()
    );
    c.stop_etcd();
    let server2 = ca2.issue("server", &[&UNDERLAY_GW.to_string(), "127.0.0.1"]);
    let root2 = ca2.issue("root", &[]);
    c.etcd_server_args = etcd::tls_server_args(&server2, &ca2.pair.cert);
    c.etcdctl_args = etcd::etcdctl_tls_args(&ca2.pair.cert, &root2);
    c.start_etcd();
    // The old certificate is revoked: etcdctl with it is refused now.
    let old_root = ca.issue("old-root", &[]);
    let with_old = std::process::Command::new("ip")
        .args(["netns", "exec", &c.sb.host().name, "etcdctl"])
        .args(etcd::etcdctl_tls_args(&both, &old_root))
        .args(["--endpoints", &url(), "--command-timeout=2s", "get", "x"])
        .output()
        .unwrap();
    assert!(
        !with_old.status.success(),
        "the old CA is no longer trusted"
    );

    // A third node with a certificate of the new CA joins; everyone converges.
    let files3 = ca2.issue("node3", &[]);
    c.nodes[3].etcd_args = Some(etcd::agent_tls_args(&url(), &both, Some(&files3)));
    c.start_agent(3);
    c.wait_converged(Duration::from_secs(30))
        .expect("converged after the rotation");
    for (i, subnet) in subnets.iter().enumerate() {
        assert_eq!(
            c.nodes[i].subnet().as_ref(),
            Some(subnet),
            "node{} kept its subnet",
            i + 1
        );
        assert!(c.nodes[i].healthy(), "node{} healthy", i + 1);
    }
    let after = etcd::lease_ids(&c);
    for lease in &leases {
        assert!(
            after.contains(lease),
            "lease {lease:?} kept through the rotation: {after:?}"
        );
    }
    every_pair_talks(&[(&a.ns, a.ip), (&b.ns, b.ip)]);
}
