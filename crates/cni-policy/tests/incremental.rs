//! `nft::Enforcer`'s batches on a real kernel: after every kind of change, the table its
//! batches leave in one throwaway namespace equals the table a fresh full `program()` makes in
//! another (as `nft -j` lists them, handles aside, elements sorted), and a change of one
//! policy's peer selector rewrites that policy's chain only: every other chain keeps its rule
//! handles.

use std::collections::BTreeMap;

use cni_nft::Nft;
use cni_policy::nft::{policy_chain_name, program, Enforcer, TABLE};
use cni_policy::{Cluster, Direction, Pod};
use cni_testkit::{run_in, Sandbox};
use serde_json::Value;

mod common;

fn pod(ns: &str, name: &str, n: u8) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: [("pod".to_string(), name.to_string())].into(),
        ips: vec![format!("198.18.40.{n}").parse().unwrap()],
        named_ports: Default::default(),
    }
}

const FROM_X: &str = "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: x}}}]\n    ports: [{port: 80}, {port: 81, protocol: UDP}]\n";
const FROM_Z: &str = "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: z}}}]\n    ports: [{port: 80}, {port: 81, protocol: UDP}]\n";

fn cluster() -> Cluster {
    const NAMESPACES: [&str; 3] = ["x", "y", "z"];
    let labels = |ns: &str| [("ns".to_string(), ns.to_string())].into();
    let mut c = Cluster {
        namespaces: NAMESPACES.map(|ns| (ns.to_string(), labels(ns))).into(),
        ..Cluster::default()
    };
    // Pods a, b and c of each namespace at 198.18.40.10 and up.
    c.pods = (0..9)
        .map(|i| pod(NAMESPACES[i / 3], ["a", "b", "c"][i % 3], 10 + i as u8))
        .collect();
    c.policies = vec![
        common::network_policy("x", "deny", "  podSelector: {}\n"),
        common::network_policy("y", "from-x", FROM_X),
        common::network_policy(
            "z",
            "egress-b",
            "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to: [{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {}}]\n    ports: [{port: 80, endPort: 90}]\n",
        ),
    ];
    c
}

/// `nft -j list table inet rcni_policy` in `ns`: chains, sets and maps by kind and name
/// (handles removed, elements sorted), and the rules of each chain in order.
#[derive(Debug, PartialEq)]
struct Listing {
    objects: BTreeMap<String, Value>,
    rules: BTreeMap<String, Vec<Value>>,
    /// Rule handles per chain.
    handles: BTreeMap<String, Vec<u64>>,
}

fn listing(sb: &Sandbox, ns: &str) -> Listing {
    let out = sb
        .exec_in(ns, ["nft", "-j", "list", "table", "inet", TABLE])
        .unwrap();
    let json: Value = serde_json::from_str(&out.assert_success().stdout).unwrap();
    let mut l = Listing {
        objects: BTreeMap::new(),
        rules: BTreeMap::new(),
        handles: BTreeMap::new(),
    };
    for item in json["nftables"].as_array().unwrap() {
        let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        let mut body = body.clone();
        let handle = body
            .as_object_mut()
            .and_then(|o| o.remove("handle"))
            .and_then(|h| h.as_u64());
        match kind.as_str() {
            "metainfo" | "table" => {}
            "rule" => {
                let chain = body["chain"].as_str().unwrap().to_string();
                l.handles
                    .entry(chain.clone())
                    .or_default()
                    .push(handle.unwrap());
                l.rules.entry(chain).or_default().push(body);
            }
            _ => {
                if let Some(Value::Array(elem)) = body.get_mut("elem") {
                    elem.sort_by_key(|e| e.to_string());
                }
                let name = body["name"].as_str().unwrap_or_default().to_string();
                l.objects.insert(format!("{kind} {name}"), body);
            }
        }
    }
    l
}

fn commit(ns: &str, batch: cni_nft::Batch) {
    run_in(ns, move || Ok(Nft::new()?.commit(&batch)?)).unwrap();
}

fn sandbox() -> Option<(Sandbox, String)> {
    if !cni_testkit::is_root() {
        eprintln!("skipping: needs root");
        return None;
    }
    let sb = Sandbox::new().expect("sandbox");
    let fresh = sb.add_container().unwrap().name;
    Some((sb, fresh))
}

#[test]
fn after_every_update_the_kernel_holds_what_a_full_program_makes() {
    let Some((sb, fresh_ns)) = sandbox() else {
        return;
    };
    let host = sb.host().name.clone();
    let all = |_: &Pod| true;
    let mut c = cluster();
    let mut e = Enforcer::new();
    commit(&host, e.update(&c, all).unwrap().0);

    type Step = (&'static str, fn(&mut Cluster));
    let steps: [Step; 9] = [
        ("policy added", |c| {
            let spec = "  podSelector: {matchLabels: {pod: c}}\n  policyTypes: [Ingress, Egress]\n  egress:\n  - to: [{podSelector: {matchLabels: {pod: a}}}]\n";
            c.policies.push(common::network_policy("y", "c-to-a", spec))
        }),
        ("peer selector changed", |c| {
            c.policies[1] = common::network_policy("y", "from-x", FROM_Z)
        }),
        ("pod selector changed", |c| {
            c.policies[1] = common::network_policy(
                "y",
                "from-x",
                &FROM_Z.replace("{}", "{matchLabels: {pod: a}}"),
            )
        }),
        ("port removed", |c| {
            c.policies[1] = common::network_policy(
                "y",
                "from-x",
                &FROM_Z
                    .replace("{}", "{matchLabels: {pod: a}}")
                    .replace(", {port: 81, protocol: UDP}", ""),
            )
        }),
        ("policy deleted", |c| {
            c.policies.remove(0);
        }),
        ("pod added", |c| c.pods.push(pod("z", "d", 40))),
        ("pod removed", |c| c.pods.retain(|p| p.key() != "z/c")),
        ("pod relabelled", |c| {
            c.pods[0].labels = [("pod".into(), "b".into())].into()
        }),
        ("namespace relabelled", |c| {
            c.namespaces
                .insert("x".into(), [("ns".into(), "z".into())].into());
        }),
    ];
    for (step, change) in steps {
        change(&mut c);
        let (delta, _) = e.update(&c, all).unwrap();
        commit(&host, delta);
        commit(&fresh_ns, program(&c, all).unwrap().0);
        let (got, want) = (listing(&sb, &host), listing(&sb, &fresh_ns));
        assert_eq!(got.objects, want.objects, "{step}: chains, sets and maps");
        assert_eq!(got.rules, want.rules, "{step}: rules");
    }
}

#[test]
fn a_peer_selector_change_rewrites_only_that_policys_chain() {
    let Some((sb, _)) = sandbox() else { return };
    let host = sb.host().name.clone();
    let all = |_: &Pod| true;
    let mut c = cluster();
    let mut e = Enforcer::new();
    commit(&host, e.update(&c, all).unwrap().0);
    let before = listing(&sb, &host);

    c.policies[1] = common::network_policy("y", "from-x", FROM_Z);
    commit(&host, e.update(&c, all).unwrap().0);
    let after = listing(&sb, &host);

    let changed = policy_chain_name("y/from-x", Direction::Ingress);
    assert_ne!(before.handles[&changed], after.handles[&changed]);
    assert_eq!(before.handles.len(), after.handles.len());
    for (chain, handles) in &before.handles {
        if *chain != changed {
            assert_eq!(
                &after.handles[chain], handles,
                "chain {chain} was rewritten"
            );
        }
    }
    // The old peer's set went, the new one's came; nothing else changed.
    let names = |l: &Listing| l.objects.keys().cloned().collect::<Vec<_>>();
    let (b, a) = (names(&before), names(&after));
    assert_eq!(
        b.iter().filter(|n| !a.contains(n)).count(),
        1,
        "{b:?} {a:?}"
    );
    assert_eq!(
        a.iter().filter(|n| !b.contains(n)).count(),
        1,
        "{b:?} {a:?}"
    );
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

const SPECS: [&str; 6] = [
    "  podSelector: {}\n",
    "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {pod: b}}}]\n",
    FROM_X,
    "  podSelector: {matchExpressions: [{key: pod, operator: NotIn, values: [c]}]}\n  policyTypes: [Egress]\n  egress:\n  - to: [{namespaceSelector: {}, podSelector: {matchLabels: {pod: a}}}]\n",
    "  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: Exists}]}, podSelector: {}}]\n    ports: [{port: 80}]\n",
    "  podSelector: {matchLabels: {pod: b}}\n  policyTypes: [Ingress, Egress]\n  egress:\n  - ports: [{port: 53, protocol: UDP}]\n",
];

/// One random change of `c`: a pod added, removed, relabelled or moved to another address
/// (IPv6 ones too), a policy written or deleted, a namespace relabelled. Pods of namespace
/// `w` are on another node.
fn random_change(rng: &mut Rng, c: &mut Cluster) {
    const NS: [&str; 4] = ["x", "y", "z", "w"];
    match rng.below(8) {
        0 | 1 => {
            let ns = NS[rng.below(3)];
            let name = format!("p{}", rng.below(3));
            let key = (ns.to_string(), name.clone());
            c.policies.retain(|p| {
                (
                    p.metadata.namespace.clone().unwrap_or_default(),
                    p.metadata.name.clone().unwrap_or_default(),
                ) != key
            });
            if rng.below(4) != 0 {
                c.policies.push(common::network_policy(
                    ns,
                    &name,
                    SPECS[rng.below(SPECS.len())],
                ));
            }
        }
        2 => {
            let ns = NS[rng.below(4)];
            let labels = [("ns".to_string(), NS[rng.below(4)].to_string())].into();
            c.namespaces.insert(ns.into(), labels);
        }
        _ => {
            let ns = NS[rng.below(4)];
            let name = ["a", "b", "c", "d"][rng.below(4)];
            c.pods.retain(|p| p.key() != format!("{ns}/{name}"));
            if rng.below(5) == 0 {
                return;
            }
            // An address no other pod has.
            let mut n = 10 + rng.below(40) as u8;
            while c.pods.iter().any(|p| {
                p.ips[0]
                    == format!("198.18.40.{n}")
                        .parse::<std::net::IpAddr>()
                        .unwrap()
            }) {
                n = 10 + (n - 9) % 40;
            }
            let mut p = pod(ns, name, n);
            p.labels = [("pod".to_string(), ["a", "b", "c"][rng.below(3)].to_string())].into();
            if rng.below(3) == 0 {
                p.ips.push(format!("fd00:40::{n}").parse().unwrap());
            }
            c.pods.push(p);
        }
    }
}

#[test]
fn random_changes_leave_the_kernel_where_a_full_program_puts_it() {
    let Some((sb, fresh_ns)) = sandbox() else {
        return;
    };
    let host = sb.host().name.clone();
    let local = |p: &Pod| p.namespace != "w";
    for seed in [7u64, 1_000_003] {
        let mut rng = Rng(seed);
        let mut c = cluster();
        let mut e = Enforcer::new();
        commit(&host, e.update(&c, local).unwrap().0);
        for step in 0..40 {
            for _ in 0..1 + rng.below(3) {
                random_change(&mut rng, &mut c);
            }
            let (delta, _) = e.update(&c, local).unwrap();
            commit(&host, delta);
            commit(&fresh_ns, program(&c, local).unwrap().0);
            let (got, want) = (listing(&sb, &host), listing(&sb, &fresh_ns));
            assert_eq!(
                got.objects, want.objects,
                "seed {seed} step {step}: chains, sets and maps"
            );
            assert_eq!(got.rules, want.rules, "seed {seed} step {step}: rules");
        }
    }
}
