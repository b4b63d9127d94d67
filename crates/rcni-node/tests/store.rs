//! Root-only: the etcd implementation of the store trait against a real etcd (in a throwaway
//! underlay namespace; the client runs on a thread inside it): create-if-absent and
//! unchanged-since claims, renew, revoke, and the watch.

mod harness;

use std::time::Duration;

use cni_etcd::{Access, EtcdOptions};
use harness::*;
use rcni_node::lease::{Lease, LeaseAttrs};
use rcni_node::store::etcd::EtcdStore;
use rcni_node::store::{Claim, LeaseEvent, LeaseWatch, Store};
use serde_json::json;

fn lease(subnet: &str, ip: [u8; 4]) -> Lease {
    Lease {
        subnet: subnet.parse::<ipnet::Ipv4Net>().unwrap().into(),
        attrs: LeaseAttrs {
            public_ip: ip.into(),
            public_ipv6: None,
            backend_type: "host-gw".into(),
            backend_data: None,
            backend_v6_data: None,
            node_name: None,
        },
    }
}

#[test]
fn claims_renewal_revocation_and_watch_against_a_real_etcd() {
    if skip_unless_root() {
        return;
    }
    let c = Cluster::new(json!({"Type": "host-gw"}));
    let underlay = cni_linux::NetNs::open(&c.sb.host().path).unwrap();
    underlay
        .run(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(scenario());
        })
        .unwrap();
}

async fn scenario() {
    let access = Access::new(&EtcdOptions {
        endpoints: vec![format!("http://{UNDERLAY_GW}:2379")],
        ..EtcdOptions::default()
    })
    .unwrap();
    let mut a = EtcdStore::connect(&access, PREFIX).await.unwrap();
    let mut b = EtcdStore::connect(&access, PREFIX).await.unwrap();
    let ttl = Duration::from_secs(30);

    let config = a.network_config().await.unwrap().expect("config present");
    assert!(String::from_utf8(config).unwrap().contains(CLUSTER_NET));

    let first = lease("198.19.5.0/24", [198, 18, 0, 11]);
    let id = a
        .acquire(&first, ttl, Claim::IfAbsent)
        .await
        .unwrap()
        .expect("a free subnet is claimed");
    // The same subnet, claimed by another node: refused.
    let other = lease("198.19.5.0/24", [198, 18, 0, 12]);
    assert_eq!(b.acquire(&other, ttl, Claim::IfAbsent).await.unwrap(), None);

    let from = b.snapshot().await.unwrap().revision;
    let mut watch = b.watch(from).await.unwrap();
    let snap = a.snapshot().await.unwrap();
    assert_eq!(snap.leases.len(), 1);
    assert_eq!(snap.leases[0].lease, first);
    assert_eq!(snap.leases[0].store_lease, id);
    let rev = snap.leases[0].mod_revision;

    // Taking back one's own lease needs the key unchanged since it was read.
    let again = a
        .acquire(&first, ttl, Claim::IfUnchangedSince(rev))
        .await
        .unwrap()
        .expect("unchanged: taken back");
    assert_eq!(
        a.acquire(&first, ttl, Claim::IfUnchangedSince(rev))
            .await
            .unwrap(),
        None,
        "a stale revision loses"
    );
    match watch.next().await.unwrap().as_slice() {
        [LeaseEvent::Put(l)] => assert_eq!(*l, first),
        other => panic!("expected one put, got {other:?}"),
    }

    assert!(a.renew(again).await.unwrap());
    a.revoke(again).await.unwrap();
    match watch.next().await.unwrap().as_slice() {
        [LeaseEvent::Delete(s)] => assert_eq!(*s, first.subnet),
        other => panic!("expected one delete, got {other:?}"),
    }
    assert!(
        !a.renew(again).await.unwrap(),
        "a revoked lease cannot be renewed"
    );
    assert!(a.snapshot().await.unwrap().leases.is_empty());
    let _ = id;
}
