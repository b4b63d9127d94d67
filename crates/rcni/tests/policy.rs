//! Root-only: `rcni policy` against a real etcd in a throwaway namespace, every write
//! checked independently with `etcdctl get --prefix`.

use cni_testkit::PluginOutput;
use serde_json::{json, Value};

const PREFIX: &str = "/rcni.test/network";

mod support;

/// etcd in the sandbox's host namespace, and `rcni policy` run there.
use support::EtcdHost as Env;

impl Env {
    /// `rcni policy VERB --etcd-endpoints <etcd> --prefix PREFIX ARGS` in the namespace.
    fn policy(&self, verb: &str, args: &[&str], stdin: &str) -> PluginOutput {
        self.rcni(&[], &self.etcd.url, verb, args, stdin)
    }

    /// `rcni GLOBAL policy VERB --etcd-endpoints ENDPOINTS --prefix PREFIX ARGS`.
    fn rcni(
        &self,
        global: &[&str],
        endpoints: &str,
        verb: &str,
        args: &[&str],
        stdin: &str,
    ) -> PluginOutput {
        let mut all = global.to_vec();
        all.extend([
            "policy",
            verb,
            "--etcd-endpoints",
            endpoints,
            "--prefix",
            PREFIX,
        ]);
        all.extend(args);
        self.run_rcni(&all, stdin)
    }

    /// What etcdctl sees under the prefix.
    fn stored(&self) -> Vec<(String, String)> {
        self.etcd.entries(&format!("{PREFIX}/")).unwrap()
    }

    fn keys(&self) -> Vec<String> {
        self.stored().into_iter().map(|(k, _)| k).collect()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.sb.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

/// Succeeded: its stdout.
fn ok(out: PluginOutput) -> String {
    assert_eq!(
        out.status, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

/// Failed with status 1, printing nothing on stdout: its stderr.
fn failed(out: PluginOutput) -> String {
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert_eq!(out.stdout, "");
    out.stderr
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {team: shop}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: shop}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-frontend}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: frontend}}}]
    ports: [{protocol: TCP, port: 8080}]
"#;

#[test]
fn apply_get_list_delete_round_trip() {
    let Some(env) = Env::new() else { return };
    let file = env.file("policies.yaml", MANIFEST);
    assert_eq!(
        ok(env.policy("apply", &["-f", &file], "")),
        "namespace/shop created\n\
         networkpolicy.networking.k8s.io/deny-all created\n\
         networkpolicy.networking.k8s.io/web-from-frontend created\n"
    );
    assert_eq!(
        env.keys(),
        [
            format!("{PREFIX}/namespaces/shop"),
            format!("{PREFIX}/policies/default/web-from-frontend"),
            format!("{PREFIX}/policies/shop/deny-all"),
        ]
    );
    let stored: Value = serde_json::from_str(&env.stored()[1].1).unwrap();
    assert_eq!(stored["metadata"]["namespace"], "default", "{stored}");
    assert_eq!(stored["kind"], "NetworkPolicy");
    assert_eq!(stored["spec"]["ingress"][0]["ports"][0]["port"], 8080);

    // The same again: nothing changes, not even the revisions.
    let before = env.etcd.etcdctl(&["get", "--prefix", PREFIX, "-w", "json"]);
    let before: Value = serde_json::from_str(&before.unwrap().stdout).unwrap();
    assert_eq!(
        ok(env.policy("apply", &["-f", &file], "")),
        "namespace/shop unchanged\n\
         networkpolicy.networking.k8s.io/deny-all unchanged\n\
         networkpolicy.networking.k8s.io/web-from-frontend unchanged\n"
    );
    let after = env.etcd.etcdctl(&["get", "--prefix", PREFIX, "-w", "json"]);
    let after: Value = serde_json::from_str(&after.unwrap().stdout).unwrap();
    assert_eq!(before["kvs"], after["kvs"]);

    // A JSON List on stdin: one policy changed, one new.
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "deny-all", "namespace": "shop"},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "db", "namespace": "shop"},
         "spec": {"podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}}},
    ]});
    assert_eq!(
        ok(env.policy("apply", &["-f", "-"], &list.to_string())),
        "networkpolicy.networking.k8s.io/deny-all configured\n\
         networkpolicy.networking.k8s.io/db created\n"
    );
    let deny = env.etcd.etcdctl(&[
        "get",
        "--print-value-only",
        &format!("{PREFIX}/policies/shop/deny-all"),
    ]);
    let deny: Value = serde_json::from_str(&deny.unwrap().stdout).unwrap();
    assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress"]));

    // get: the table row, and the object as stored.
    assert_eq!(
        ok(env.policy("get", &["-n", "shop", "db"], "")),
        "NAME   POD-SELECTOR\ndb     tier in (db)\n"
    );
    let got: Value = serde_json::from_str(&ok(env.policy(
        "get",
        &["-n", "shop", "db", "-o", "json"],
        "",
    )))
    .unwrap();
    let stored = env.etcd.etcdctl(&[
        "get",
        "--print-value-only",
        &format!("{PREFIX}/policies/shop/db"),
    ]);
    assert_eq!(
        got,
        serde_json::from_str::<Value>(&stored.unwrap().stdout).unwrap()
    );
    let yaml = ok(env.policy("get", &["-n", "shop", "db", "-o", "yaml"], ""));
    assert!(
        yaml.contains("kind: NetworkPolicy\n") && yaml.contains("name: db\n"),
        "{yaml}"
    );

    // list: one namespace, all, and an empty one.
    assert_eq!(
        ok(env.policy("list", &["-n", "shop"], "")),
        "NAME       POD-SELECTOR\ndb         tier in (db)\ndeny-all   <none>\n"
    );
    assert_eq!(
        ok(env.policy("list", &["-A"], "")),
        "NAMESPACE   NAME                POD-SELECTOR\n\
         default     web-from-frontend   app=web\n\
         shop        db                  tier in (db)\n\
         shop        deny-all            <none>\n"
    );
    let empty = env.policy("list", &["-n", "nothing"], "");
    assert_eq!(empty.stderr, "No resources found in nothing namespace.\n");
    assert_eq!(ok(empty), "");
    let listed: Value =
        serde_json::from_str(&ok(env.policy("list", &["-A", "-o", "json"], ""))).unwrap();
    assert_eq!(listed["kind"], "List");
    assert_eq!(listed["items"].as_array().unwrap().len(), 3);

    // delete by name, then a missing one, then by file.
    assert_eq!(
        ok(env.policy("delete", &["-n", "shop", "db"], "")),
        "networkpolicy.networking.k8s.io \"db\" deleted\n"
    );
    assert!(!env.keys().contains(&format!("{PREFIX}/policies/shop/db")));
    assert_eq!(
        failed(env.policy("delete", &["-n", "shop", "db"], "")),
        "Error from server (NotFound): networkpolicies.networking.k8s.io \"db\" not found\n"
    );
    assert_eq!(
        failed(env.policy("get", &["db"], "")),
        "Error from server (NotFound): networkpolicies.networking.k8s.io \"db\" not found\n"
    );
    assert_eq!(
        ok(env.policy("delete", &["-f", &file], "")),
        "namespace \"shop\" deleted\n\
         networkpolicy.networking.k8s.io \"deny-all\" deleted\n\
         networkpolicy.networking.k8s.io \"web-from-frontend\" deleted\n"
    );
    assert_eq!(env.keys(), Vec::<String>::new());
}

#[test]
fn an_invalid_policy_is_refused_as_kubectl_says_it_and_nothing_is_stored() {
    let Some(env) = Env::new() else { return };
    let bad = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: fine, namespace: shop}
spec: {podSelector: {}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ports, namespace: shop}
spec:
  podSelector: {}
  ingress: [{ports: [{protocol: TCP, port: 90, endPort: 80}]}]
"#;
    let file = env.file("bad.yaml", bad);
    let stderr = failed(env.policy("apply", &["-f", &file], ""));
    assert_eq!(
        stderr,
        "The NetworkPolicy \"ports\" is invalid: spec.ingress[0].ports[0].endPort: Invalid value: 80: must be greater than or equal to `port`\n"
    );
    assert_eq!(env.keys(), Vec::<String>::new(), "nothing stored");

    // With --json: rcni's CNI error object on stdout instead.
    let out = env.rcni(&["--json"], &env.etcd.url, "apply", &["-f", &file], "");
    assert_eq!(out.status, 1);
    let error: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(error["msg"]
        .as_str()
        .unwrap()
        .starts_with("The NetworkPolicy \"ports\" is invalid"));
    assert_eq!(env.keys(), Vec::<String>::new());
}

fn pod_record(node: &str, ns: &str, name: &str, labels: Value, ip: &str) -> (String, String) {
    let key = format!("{PREFIX}/pods/{node}/{ns}/{name}");
    let value = json!({"namespace": ns, "name": name, "node": node, "labels": labels,
        "ips": [ip], "namedPorts": {"http": {"protocol": "TCP", "port": 8080}}});
    (key, value.to_string())
}

#[test]
fn explain_shows_the_policies_selecting_a_published_pod_and_what_they_allow() {
    let Some(env) = Env::new() else { return };
    let manifest = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-frontend, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: frontend}}}]
    ports: [{protocol: TCP, port: http}]
  - from: [{ipBlock: {cidr: 198.18.0.0/16, except: [198.18.9.0/24]}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: egress-none, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: other, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
"#;
    ok(env.policy("apply", &["-f", "-"], manifest));
    for (key, value) in [
        pod_record(
            "node1",
            "shop",
            "web-1",
            json!({"app": "web"}),
            "198.19.1.5",
        ),
        pod_record(
            "node2",
            "shop",
            "frontend-1",
            json!({"app": "frontend"}),
            "198.19.2.7",
        ),
    ] {
        let put = env.etcd.etcdctl(&["put", &key, &value]).unwrap();
        assert_eq!(put.status, 0, "{}", put.stderr);
    }

    let out = ok(env.policy("explain", &["shop/web-1"], ""));
    assert_eq!(
        out,
        "Pod shop/web-1 on node node1: 198.19.1.5 (labels app=web)\n\
         Policies:\n  \
         shop/egress-none: PodSelector: app=web; Policy Types: Egress\n  \
         shop/web-from-frontend: PodSelector: app=web; Policy Types: Ingress\n\
         Ingress: isolated by shop/web-from-frontend\n  \
         shop/web-from-frontend[0]: from pods: app=frontend in namespace shop (1 address); on TCP/http (named port: pods publish no port names, so it admits nothing)\n  \
         shop/web-from-frontend[1]: from ipBlock 198.18.0.0/16 except 198.18.9.0/24; on any port\n\
         Egress: isolated by shop/egress-none\n  nothing allowed\n"
    );

    let out = env.rcni(&["--json"], &env.etcd.url, "explain", &["shop/web-1"], "");
    let v: Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(v["pod"]["node"], "node1");
    assert_eq!(v["ingress"]["isolated"], true);
    assert_eq!(
        v["ingress"]["rules"][0]["peers"][0]["ips"],
        json!(["198.19.2.7"])
    );
    assert_eq!(v["ingress"]["rules"][0]["ports"][0]["name"], "http");
    assert_eq!(
        v["ingress"]["rules"][0]["peers"][0]["pods"],
        "pods: app=frontend in namespace shop"
    );
    assert_eq!(v["egress"]["rules"], json!([]));
    assert_eq!(v["policies"][0]["policyTypes"], json!(["Egress"]));
    assert_eq!(v["policies"][0]["podSelector"], "app=web");

    // A pod no node published.
    let err = failed(env.policy("explain", &["shop/web-2"], ""));
    assert_eq!(
        err,
        "error: pod shop/web-2 is not known (no node publishes it); pods of namespace shop: frontend-1, web-1\n"
    );
    let err = failed(env.policy("explain", &["empty/x"], ""));
    assert!(
        err.ends_with("no node publishes a pod of namespace empty\n"),
        "{err}"
    );
}

#[test]
fn an_unreachable_etcd_is_one_line_and_status_1() {
    let Some(env) = Env::new() else { return };
    // Nothing listens on this port in the sandbox.
    let out = env.rcni(&[], "http://127.0.0.1:2399", "list", &["-A"], "");
    let err = failed(out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: etcd http://127.0.0.1:2399: unreachable ("),
        "{err}"
    );
    // The input is read before etcd is asked: a missing file is said first.
    let err = failed(env.policy("apply", &["-f", "/nonexistent.yaml"], ""));
    assert_eq!(
        err,
        "error: the path \"/nonexistent.yaml\" does not exist\n"
    );
}

const CLUSTER_MANIFEST: &str = r#"
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: deny-metadata}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {}}
  egress:
  - name: no-metadata
    action: Deny
    to: [{networks: [169.254.169.254/32]}]
---
apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: default-deny}
spec:
  tier: Baseline
  priority: 1000
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
---
apiVersion: v1
kind: Node
metadata: {name: node1, labels: {zone: a}}
"#;

#[test]
fn cluster_network_policies_and_nodes_apply_get_list_delete() {
    let Some(env) = Env::new() else { return };
    let file = env.file("cluster.yaml", CLUSTER_MANIFEST);
    assert_eq!(
        ok(env.policy("apply", &["-f", &file], "")),
        "clusternetworkpolicy.policy.networking.k8s.io/deny-metadata created\n\
         clusternetworkpolicy.policy.networking.k8s.io/default-deny created\n\
         node/node1 created\n"
    );
    assert_eq!(
        env.keys(),
        [
            format!("{PREFIX}/clusterpolicies/default-deny"),
            format!("{PREFIX}/clusterpolicies/deny-metadata"),
            format!("{PREFIX}/nodes/node1"),
        ]
    );
    let stored: Value = serde_json::from_str(&env.stored()[0].1).unwrap();
    assert_eq!(stored["apiVersion"], "policy.networking.k8s.io/v1beta1");
    assert_eq!(stored["spec"]["tier"], "Baseline");
    assert_eq!(
        ok(env.policy("apply", &["-f", &file], "")),
        "clusternetworkpolicy.policy.networking.k8s.io/deny-metadata unchanged\n\
         clusternetworkpolicy.policy.networking.k8s.io/default-deny unchanged\n\
         node/node1 unchanged\n"
    );

    // get and list by kubectl's resource names.
    assert_eq!(
        ok(env.policy("get", &["cnp/deny-metadata"], "")),
        "NAME            TIER    PRIORITY\ndeny-metadata   Admin   10\n"
    );
    let got: Value = serde_json::from_str(&ok(env.policy(
        "get",
        &["clusternetworkpolicy/deny-metadata", "-o", "json"],
        "",
    )))
    .unwrap();
    let stored = env.etcd.etcdctl(&[
        "get",
        "--print-value-only",
        &format!("{PREFIX}/clusterpolicies/deny-metadata"),
    ]);
    assert_eq!(
        got,
        serde_json::from_str::<Value>(&stored.unwrap().stdout).unwrap()
    );
    assert_eq!(
        ok(env.policy("list", &["clusternetworkpolicies"], "")),
        "NAME            TIER       PRIORITY\n\
         default-deny    Baseline   1000\n\
         deny-metadata   Admin      10\n"
    );
    // A node is known from its lease (its address, kubelet's labels) and its object.
    let lease =
        json!({"PublicIP": "198.18.7.1", "BackendType": "host-gw", "rcniNodeName": "node1"});
    let lease2 =
        json!({"PublicIP": "198.18.7.2", "BackendType": "host-gw", "rcniNodeName": "node2"});
    for (key, value) in [("198.19.1.0-24", &lease), ("198.19.2.0-24", &lease2)] {
        let put = env.etcd.etcdctl(&[
            "put",
            &format!("{PREFIX}/subnets/{key}"),
            &value.to_string(),
        ]);
        assert_eq!(put.unwrap().status, 0);
    }
    assert_eq!(
        ok(env.policy("list", &["nodes"], "")),
        "NAME    ADDRESSES    LABELS\n\
         node1   198.18.7.1   kubernetes.io/hostname=node1,kubernetes.io/os=linux,zone=a\n\
         node2   198.18.7.2   kubernetes.io/hostname=node2,kubernetes.io/os=linux\n"
    );
    let node: Value =
        serde_json::from_str(&ok(env.policy("get", &["node/node2", "-o", "json"], ""))).unwrap();
    assert_eq!(node["status"]["addresses"][0]["address"], "198.18.7.2");
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert_eq!(
        failed(env.policy("get", &["pods/x"], "")),
        "error: the server doesn't have a resource type \"pods\" (rcni policy knows networkpolicies, clusternetworkpolicies and nodes)\n"
    );

    // delete by name, a missing one, then by file.
    assert_eq!(
        ok(env.policy("delete", &["cnp/deny-metadata"], "")),
        "clusternetworkpolicy.policy.networking.k8s.io \"deny-metadata\" deleted\n"
    );
    assert_eq!(
        failed(env.policy("get", &["cnp/deny-metadata"], "")),
        "Error from server (NotFound): clusternetworkpolicies.policy.networking.k8s.io \"deny-metadata\" not found\n"
    );
    assert_eq!(
        failed(env.policy("delete", &["node/node2"], "")),
        "Error from server (NotFound): nodes \"node2\" not found\n",
        "node2 has a lease but no stored object"
    );
    let out = env.policy("delete", &["-f", &file], "");
    assert_eq!(out.status, 1);
    assert_eq!(
        out.stdout,
        "clusternetworkpolicy.policy.networking.k8s.io \"default-deny\" deleted\nnode \"node1\" deleted\n"
    );
    assert_eq!(
        env.keys(),
        [
            format!("{PREFIX}/subnets/198.19.1.0-24"),
            format!("{PREFIX}/subnets/198.19.2.0-24"),
        ]
    );
    let empty = env.policy("list", &["cnp"], "");
    assert_eq!(empty.stderr, "No resources found\n");
    assert_eq!(ok(empty), "");
}

#[test]
fn an_invalid_cluster_network_policy_is_refused_as_kubectl_says_it_and_nothing_is_stored() {
    let Some(env) = Env::new() else { return };
    let bad = r#"
apiVersion: v1
kind: Node
metadata: {name: node1}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: bad}
spec:
  tier: Middle
  priority: 1001
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    from: [{namespaces: {}}]
    protocols: [{tcp: {destinationPort: {range: {start: 90, end: 80}}}}]
"#;
    assert_eq!(
        failed(env.policy("apply", &["-f", "-"], bad)),
        "The ClusterNetworkPolicy \"bad\" is invalid: [\
         spec.tier: Unsupported value: \"Middle\": supported values: \"Admin\", \"Baseline\", \
         spec.priority: Invalid value: 1001: spec.priority in body should be less than or equal to 1000, \
         spec.ingress[0].protocols[0].tcp.destinationPort.range: Invalid value: \"object\": Start port must be less than End port]\n"
    );
    let undeclared = "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: typo}\nspec: {tier: Admin, priority: 1, subject: {namespaces: {}}, ingres: []}\n";
    assert_eq!(
        failed(env.policy("apply", &["-f", "-"], undeclared)),
        "error: document 0 (ClusterNetworkPolicy): ClusterNetworkPolicy in version \"policy.networking.k8s.io/v1alpha2\" cannot be handled as a ClusterNetworkPolicy: strict decoding error: unknown field \"spec.ingres\"\n"
    );
    let old = "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: ClusterNetworkPolicy\nmetadata: {name: old}\n";
    assert!(failed(env.policy("apply", &["-f", "-"], old))
        .starts_with("error: document 0: no matches for kind \"ClusterNetworkPolicy\" in version \"policy.networking.k8s.io/v1alpha1\""));
    assert_eq!(env.keys(), Vec::<String>::new(), "nothing stored");
}

#[test]
fn explain_shows_the_tiers_in_evaluation_order_and_which_tier_decides_a_connection() {
    let Some(env) = Env::new() else { return };
    let manifest = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-frontend, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: frontend}}}]
    ports: [{protocol: TCP, port: 8080}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: tenants-apart}
spec:
  tier: Admin
  priority: 20
  subject: {namespaces: {matchLabels: {team: shop}}}
  ingress:
  - {name: own-team, action: Pass, from: [{namespaces: {matchLabels: {team: shop}}}]}
  - {action: Deny, from: [{namespaces: {}}]}
  egress:
  - {name: no-metadata, action: Deny, to: [{networks: [169.254.169.254/32]}]}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: default-deny}
spec:
  tier: Baseline
  priority: 1000
  subject: {namespaces: {}}
  egress: [{action: Deny, to: [{nodes: {}}]}]
"#;
    ok(env.policy("apply", &["-f", "-"], manifest));
    let lease =
        json!({"PublicIP": "198.18.7.1", "BackendType": "host-gw", "rcniNodeName": "node1"});
    let mut puts = vec![(format!("{PREFIX}/subnets/198.19.1.0-24"), lease.to_string())];
    puts.push(pod_record(
        "node1",
        "shop",
        "web-1",
        json!({"app": "web"}),
        "198.19.1.5",
    ));
    puts.push(pod_record(
        "node1",
        "shop",
        "frontend-1",
        json!({"app": "frontend"}),
        "198.19.1.7",
    ));
    puts.push(pod_record(
        "node1",
        "other",
        "x-1",
        json!({"app": "x"}),
        "198.19.1.9",
    ));
    for (key, value) in puts {
        let put = env.etcd.etcdctl(&["put", &key, &value]).unwrap();
        assert_eq!(put.status, 0, "{}", put.stderr);
    }

    assert_eq!(
        ok(env.policy("explain", &["shop/web-1"], "")),
        "Pod shop/web-1 on node node1: 198.19.1.5 (labels app=web)\n\
         Policies:\n  \
         shop/web-from-frontend: PodSelector: app=web; Policy Types: Ingress\n\
         Cluster network policies:\n  \
         Admin tenants-apart (priority 20): subject namespaces: team=shop\n  \
         Baseline default-deny (priority 1000): subject namespaces: any\n\
         Ingress, in evaluation order:\n  \
         Admin tier:\n    \
         tenants-apart (priority 20)[0] \"own-team\": Pass from namespaces: team=shop (2 addresses); all traffic\n    \
         tenants-apart (priority 20)[1]: Deny from namespaces: any (3 addresses); all traffic\n  \
         NetworkPolicy tier: isolated by shop/web-from-frontend\n    \
         shop/web-from-frontend[0]: from pods: app=frontend in namespace shop (1 address); on TCP/8080\n  \
         Baseline tier: not reached (NetworkPolicies isolate the pod)\n\
         Egress, in evaluation order:\n  \
         Admin tier:\n    \
         tenants-apart (priority 20)[0] \"no-metadata\": Deny to networks: 169.254.169.254/32; all traffic\n  \
         NetworkPolicy tier: not isolated (no policy selects the pod): all allowed\n  \
         Baseline tier:\n    \
         default-deny (priority 1000)[0]: Deny to nodes: any (1 address); all traffic\n  \
         Otherwise: allowed\n"
    );

    // Which tier decides: the NetworkPolicy after the Admin Pass, an Admin Deny, the Baseline.
    let out = ok(env.policy(
        "explain",
        &["shop/web-1", "--from", "shop/frontend-1", "--port", "8080"],
        "",
    ));
    assert!(
        out.ends_with(
            "Connection shop/frontend-1 (198.19.1.7) -> shop/web-1 (198.19.1.5) TCP/8080: allowed\n  \
             Egress of shop/frontend-1: allowed by default (no tier decides it)\n  \
             Ingress of shop/web-1: allowed by the NetworkPolicy tier: shop/web-from-frontend[0], after the Admin tier passed it at tenants-apart[0] \"own-team\" (priority 20, Pass)\n"
        ),
        "{out}"
    );
    let out = ok(env.policy(
        "explain",
        &[
            "shop/web-1",
            "--from",
            "other/x-1",
            "--protocol",
            "udp",
            "--port",
            "53",
        ],
        "",
    ));
    assert!(
        out.ends_with(
            "Connection other/x-1 (198.19.1.9) -> shop/web-1 (198.19.1.5) UDP/53: denied\n  \
             Egress of other/x-1: allowed by default (no tier decides it)\n  \
             Ingress of shop/web-1: denied by the Admin tier: tenants-apart[1] (priority 20, Deny)\n"
        ),
        "{out}"
    );
    let out = ok(env.policy(
        "explain",
        &["shop/web-1", "--to", "198.18.7.1", "--port", "10250"],
        "",
    ));
    assert!(
        out.ends_with(
            "Connection shop/web-1 (198.19.1.5) -> 198.18.7.1 TCP/10250: denied\n  \
             Egress of shop/web-1: denied by the Baseline tier: default-deny[0] (priority 1000, Deny)\n"
        ),
        "{out}"
    );

    let out = env.rcni(
        &["--json"],
        &env.etcd.url,
        "explain",
        &["shop/web-1", "--to", "169.254.169.254", "--port", "80"],
        "",
    );
    let v: Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(v["clusterNetworkPolicies"][0]["name"], "tenants-apart");
    assert_eq!(v["ingress"]["admin"][1]["action"], "Deny");
    assert_eq!(
        v["ingress"]["admin"][0]["peers"][0]["ips"],
        json!(["198.19.1.5", "198.19.1.7"])
    );
    assert_eq!(
        v["egress"]["baseline"][0]["peers"][0]["ips"],
        json!(["198.18.7.1"])
    );
    assert_eq!(v["connection"]["allowed"], false);
    assert_eq!(v["connection"]["egress"]["decidedBy"]["tier"], "Admin");
    assert_eq!(
        v["connection"]["egress"]["decidedBy"]["rule"]["name"],
        "no-metadata"
    );
    assert_eq!(v["connection"]["ingress"], Value::Null);

    // A usage error: clap's status 2, naming the missing flag.
    let out = env.policy("explain", &["shop/web-1", "--from", "nowhere"], "");
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("--port"), "{}", out.stderr);
    let err = failed(env.policy(
        "explain",
        &["shop/web-1", "--from", "nowhere", "--port", "1"],
        "",
    ));
    assert_eq!(
        err,
        "error: \"nowhere\": give a pod as NAMESPACE/NAME or an address\n"
    );
}
