//! Root-only: rcni-node against an etcd with authentication enabled (`etcdctl user add`, a
//! role with read and write on the agents' key prefix only, `auth enable`). Agents with the
//! right user converge (the password from a file on one node, from RCNI_ETCD_PASSWORD on the
//! other) and never show the password in their log or /metrics; a wrong password, a user
//! with read permission only, and no user at all are each refused at start with one line
//! naming the endpoint and the cause, nothing programmed. After an etcd restart (which voids
//! every token) the agents authenticate again and learn a node that joins.

mod harness;

use std::fs;

use harness::*;
use serde_json::json;

const PASSWORD: &str = "pw-of-rcni-7f3a";

#[test]
fn users_roles_and_wrong_credentials() {
    if skip_unless_root() {
        return;
    }
    let mut c = Cluster::new(json!({"Type": "host-gw"}));
    let prefix = format!("{PREFIX}/");
    for cmd in [
        vec!["user", "add", "root:rootpw"],
        vec!["user", "grant-role", "root", "root"],
        vec!["role", "add", "rcni-node"],
        vec![
            "role",
            "grant-permission",
            "rcni-node",
            "--prefix=true",
            "readwrite",
            &prefix,
        ],
        vec!["user", "add", &format!("rcni:{PASSWORD}")],
        vec!["user", "grant-role", "rcni", "rcni-node"],
        vec!["role", "add", "reader"],
        vec![
            "role",
            "grant-permission",
            "reader",
            "--prefix=true",
            "read",
            &prefix,
        ],
        vec!["user", "add", "reader:readerpw"],
        vec!["user", "grant-role", "reader", "reader"],
        vec!["auth", "enable"],
    ] {
        c.etcdctl(&cmd);
    }
    c.etcdctl_args = vec!["--user=root:rootpw".into()];
    let endpoints = || vec!["--etcd-endpoints".to_string(), c_url()];
    let user = |name: &str| vec!["--etcd-username".to_string(), name.to_string()];
    for _ in 0..3 {
        c.add_node();
    }
    let pw_file = c.nodes[0].dir.join("etcd-password");
    fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    c.nodes[0].etcd_args = Some(
        [
            endpoints(),
            user("rcni"),
            vec!["--etcd-password-file".into(), pw_file.display().to_string()],
        ]
        .concat(),
    );
    c.nodes[1].etcd_args = Some([endpoints(), user("rcni")].concat());
    c.nodes[1]
        .env
        .push(("RCNI_ETCD_PASSWORD".into(), PASSWORD.into()));
    c.two_talking_pods();
    for n in &c.nodes[..2] {
        assert!(!n.agent_log().contains(PASSWORD), "password in the log");
        assert!(!n.health_get("/metrics").unwrap().contains(PASSWORD));
    }

    let with_password = |pw: &str| vec!["--etcd-password".to_string(), pw.to_string()];
    c.expect_refused(
        2,
        [endpoints(), user("rcni"), with_password("wrong")].concat(),
        &c_url(),
        "authentication failed",
    );
    c.expect_refused(
        2,
        [endpoints(), user("reader"), with_password("readerpw")].concat(),
        &c_url(),
        "permission denied",
    );
    c.expect_refused(2, endpoints(), &c_url(), "authentication enabled");
    assert_eq!(
        harness::etcd::lease_ids(&c).len(),
        2,
        "no lease for a refused agent"
    );

    // etcd restarts: every token it gave is void; the agents authenticate again, and a node
    // joining afterwards is learned through their new watches.
    c.stop_etcd();
    c.start_etcd();
    c.nodes[2].etcd_args = c.nodes[1].etcd_args.clone();
    c.nodes[2].env = c.nodes[1].env.clone();
    c.start_agent(2);
    c.wait_converged(std::time::Duration::from_secs(30))
        .expect("a node joining after an etcd restart is learned");
    assert!(c.nodes.iter().all(Node::healthy));
}

fn c_url() -> String {
    format!("http://{UNDERLAY_GW}:2379")
}
