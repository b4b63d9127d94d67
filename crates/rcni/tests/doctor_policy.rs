//! Root-only: `rcni doctor`'s NetworkPolicy check. A real etcd and the node's "host" are in a
//! throwaway namespace; the test plays the node agent: it publishes pod records in etcd and
//! commits `cni_policy::nft::program`'s batch into the namespace, then breaks the table with
//! `nft` and expects doctor to name the pod and what is missing.

use std::collections::BTreeSet;

use cni_policy::effective::Direction;
use cni_policy::nft::{peer_set_name, pod_chain_name, policy_chain_name, program, TABLE};
use cni_policy::stored::{cluster_from, Keys};
use cni_testkit::{run_in, PluginOutput};
use serde_json::{json, Value};

const PREFIX: &str = "/rcni.test/network";
const NODE: &str = "n1";

/// x/a and x/b on this node, y/c on another.
const PODS: [(&str, &str, &str, &str); 3] = [
    (NODE, "x", "a", "198.18.0.10"),
    (NODE, "x", "b", "198.18.0.11"),
    ("n2", "y", "c", "198.18.1.10"),
];

/// x/a takes ingress from x/b only; x/b is open.
const ALLOW_B: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-b, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{port: 80}]
"#;

mod support;

use support::EtcdHost as Env;

impl Env {
    /// etcd in the host namespace, holding the pods of [`PODS`].
    fn with_pods() -> Option<Env> {
        let env = Env::new()?;
        for (node, ns, name, ip) in PODS {
            let key = format!("{PREFIX}/pods/{node}/{ns}/{name}");
            let record = json!({"namespace": ns, "name": name, "node": node,
                                "labels": {"pod": name}, "ips": [ip]});
            let put = env.etcd.etcdctl(&["put", &key, &record.to_string()]);
            assert_eq!(put.unwrap().status, 0);
        }
        Some(env)
    }

    /// `rcni policy apply -f -` with `manifest`.
    fn apply(&self, manifest: &str) {
        let out = self.rcni(
            &["policy", "apply", "-f", "-"],
            &self.etcd_flags(),
            manifest,
        );
        assert_eq!(out.status, 0, "{}", out.stderr);
    }

    fn etcd_flags(&self) -> Vec<String> {
        ["--etcd-endpoints", &self.etcd.url, "--prefix", PREFIX]
            .map(String::from)
            .to_vec()
    }

    /// `rcni ARGS FLAGS` in the host namespace.
    fn rcni(&self, args: &[&str], flags: &[String], stdin: &str) -> PluginOutput {
        let mut all = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        self.run_rcni(&all, stdin)
    }

    /// `rcni doctor` with an empty config dir, cache and pod state of the sandbox's own.
    fn doctor(&self, json: bool, policy_flags: &[String]) -> PluginOutput {
        let dir = self.sb.dir();
        let conf = dir.join("net.d");
        std::fs::create_dir_all(&conf).unwrap();
        let mut args = vec![
            "--conf-dir".to_string(),
            conf.display().to_string(),
            "--cache-dir".into(),
            dir.join("cache").display().to_string(),
        ];
        if json {
            args.push("--json".into());
        }
        args.extend(["doctor", "--pod-state-dir"].map(String::from));
        args.push(dir.join("pods").display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.rcni(&args, policy_flags, "");
        assert!(
            !out.stdout.is_empty(),
            "doctor printed nothing: {}",
            out.stderr
        );
        out
    }

    /// The check's JSON section, run for node n1.
    fn check(&self) -> Value {
        let mut flags = self.etcd_flags();
        flags.extend(["--node-name", NODE].map(String::from));
        let out = self.doctor(true, &flags);
        let v: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", out.stdout, out.stderr));
        v["networkPolicy"].clone()
    }

    /// Commits the program of node n1's pods for the cluster as stored, as rcni-node would.
    fn program(&self) {
        let entries = self.etcd.entries(&format!("{PREFIX}/")).unwrap();
        let keys = Keys::new(PREFIX);
        let (cluster, bad) = cluster_from(
            &keys,
            entries.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        );
        assert!(bad.is_empty(), "{bad:?}");
        let local: BTreeSet<String> = PODS
            .iter()
            .filter(|p| p.0 == NODE)
            .map(|p| format!("{}/{}", p.1, p.2))
            .collect();
        let (batch, _) = program(&cluster, |p| local.contains(&p.key())).unwrap();
        run_in(&self.sb.host().name, || {
            Ok(cni_nft::Nft::new()?.commit(&batch)?)
        })
        .unwrap();
    }

    /// `nft ARGS` in the host namespace, which must succeed.
    fn nft(&self, args: &str) {
        let argv: Vec<&str> = ["nft"].into_iter().chain(args.split(' ')).collect();
        let out = self.sb.exec_host(argv).unwrap();
        assert_eq!(out.status, 0, "nft {args}: {}", out.stderr);
    }

    /// Removes the rules of `chain` that jump to `target` (found with `nft -a -j`).
    fn delete_jumps(&self, chain: &str, target: &str) {
        let out = self
            .sb
            .exec_host(["nft", "-a", "-j", "list", "chain", "inet", TABLE, chain])
            .unwrap();
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        let handles: Vec<u64> = v["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o.get("rule"))
            .filter(|r| r["expr"].to_string().contains(target))
            .map(|r| r["handle"].as_u64().unwrap())
            .collect();
        assert!(!handles.is_empty(), "no jump to {target} in {chain}");
        for h in handles {
            self.nft(&format!("delete rule inet {TABLE} {chain} handle {h}"));
        }
    }
}

/// The problems reported for `pod` (`None`: the node's).
fn problems(check: &Value, pod: Option<&str>) -> Vec<String> {
    check["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["pod"].as_str() == pod)
        .map(|d| d["problem"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_consistent_dataplane_is_clean_and_each_removed_piece_is_named() {
    let Some(env) = Env::with_pods() else { return };
    env.apply(ALLOW_B);
    env.program();
    let check = env.check();
    assert_eq!(check["disagreements"], json!([]), "{check:#}");
    assert_eq!(check["localPods"], 2);
    assert_eq!(check["isolatedPods"], 1);
    let mut flags = env.etcd_flags();
    flags.extend(["--node", NODE].map(String::from));
    let text = env.doctor(false, &flags).stdout;
    assert!(
        text.contains("networkpolicy (node n1): 2 local pod(s), 1 isolated; 0 disagreement(s)\n"),
        "{text}"
    );

    // x/a's ingress verdict-map element.
    env.nft(&format!(
        "delete element inet {TABLE} ingress4 {{ 198.18.0.10 }}"
    ));
    let check = env.check();
    assert_eq!(
        problems(&check, Some("x/a")),
        ["ingress: no element for 198.18.0.10 in map ingress4: the pod's ingress is not filtered"]
    );
    assert_eq!(check["disagreements"].as_array().unwrap().len(), 1);
    let text = env.doctor(false, &flags).stdout;
    assert!(
        text.contains("1 disagreement(s)\n  x/a\n      ingress: no element for 198.18.0.10"),
        "{text}"
    );

    // A member of the peer set of x/a's policy (x/b's address).
    env.program();
    assert_eq!(env.check()["disagreements"], json!([]));
    let set = peer_set_name("pods: pod=b in namespace x", false);
    env.nft(&format!(
        "delete element inet {TABLE} {set} {{ 198.18.0.11 }}"
    ));
    assert_eq!(
        problems(&env.check(), Some("x/a")),
        [format!(
            "ingress: peer set {set} (pods: pod=b in namespace x) lacks 198.18.0.11"
        )]
    );

    // The policy's chain (its jump from x/a's chain first: the kernel keeps a chain that
    // is jumped to).
    env.program();
    let pod_chain = pod_chain_name("x/a", Direction::Ingress);
    let policy_chain = policy_chain_name("x/allow-b", Direction::Ingress);
    env.delete_jumps(&pod_chain, &policy_chain);
    env.nft(&format!("delete chain inet {TABLE} {policy_chain}"));
    assert_eq!(
        problems(&env.check(), Some("x/a")),
        [
            format!(
                "ingress: chain {pod_chain} does not jump to {policy_chain} (policy x/allow-b)"
            ),
            format!("ingress: policy chain {policy_chain} (policy x/allow-b) is missing"),
        ]
    );

    // A base chain: the node's, not one pod's.
    env.program();
    env.nft(&format!("flush chain inet {TABLE} ingress"));
    env.nft(&format!("delete chain inet {TABLE} ingress"));
    let check = env.check();
    assert_eq!(
        problems(&check, None),
        ["base chain ingress is missing: the ingress of no pod is filtered"]
    );
    assert_eq!(check["disagreements"].as_array().unwrap().len(), 1);
}

#[test]
fn a_policy_stored_but_not_programmed_is_reported() {
    let Some(env) = Env::with_pods() else { return };
    env.apply(ALLOW_B);
    // Nothing programmed yet: the whole table is missing.
    let check = env.check();
    assert_eq!(
        problems(&check, None),
        [format!(
            "table inet {TABLE} is missing while policies isolate 1 local pod(s) (x/a): none of them is enforced"
        )]
    );
    env.program();
    assert_eq!(env.check()["disagreements"], json!([]));

    // A new policy isolating x/b's egress, stored but not programmed.
    env.apply(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: b-out, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: b}}\n  policyTypes: [Egress]\n",
    );
    let check = env.check();
    assert_eq!(check["isolatedPods"], 2);
    let chain = pod_chain_name("x/b", Direction::Egress);
    assert_eq!(
        problems(&check, Some("x/b")),
        [
            "egress: no element for 198.18.0.11 in map egress4: the pod's egress is not filtered"
                .to_string(),
            format!("egress: pod chain {chain} is missing"),
            format!(
                "egress: policy chain {} (policy x/b-out) is missing",
                policy_chain_name("x/b-out", Direction::Egress)
            ),
        ]
    );
    assert_eq!(problems(&check, Some("x/a")), Vec::<String>::new());

    // Programmed: clean again. Then the policy deleted but still programmed.
    env.program();
    assert_eq!(env.check()["disagreements"], json!([]));
    let out = env.rcni(
        &["policy", "delete", "-n", "x", "b-out"],
        &env.etcd_flags(),
        "",
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(
        problems(&env.check(), Some("x/b")),
        [format!(
            "egress: map egress4 has 198.18.0.11 (jump {chain}) though no policy isolates the pod for egress"
        )]
    );
}

#[test]
fn without_etcd_flags_the_check_is_skipped_and_an_unreachable_etcd_is_a_finding() {
    let Some(env) = Env::with_pods() else { return };
    let text = env.doctor(false, &[]).stdout;
    assert!(
        text.contains("networkpolicy: skipped (no --etcd-endpoints given"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&env.doctor(true, &[]).stdout).unwrap();
    assert!(v["networkPolicy"]["skipped"].is_string(), "{v:#}");

    // Nothing listens on this port in the sandbox.
    let flags = [
        "--etcd-endpoints",
        "http://127.0.0.1:2399",
        "--node-name",
        NODE,
    ]
    .map(String::from);
    let out = env.doctor(false, &flags);
    assert_eq!(out.status, 1);
    assert!(
        out.stdout.contains(
            "  (node)\n      cannot read the datastore: etcd http://127.0.0.1:2399: unreachable ("
        ),
        "{}",
        out.stdout
    );
}
