//! Root-only: macvlan, ipvlan, vlan and dummy creation in throwaway namespaces, created from
//! one namespace straight into another, checked through the crate and through `ip -j -d`.
//! Kinds this kernel lacks are skipped with a message naming the missing feature.

mod common;

use cni_linux::rtnl::link_add::{LinkAdd, LinkKind, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::virt::{IpvlanFlag, IpvlanMode, MacvlanMode};
use cni_linux::MacAddr;
use common::TestNs;

/// A parent namespace with a veth `parent0` (peer `parent0p`), and a target namespace.
fn parent_and_target() -> (TestNs, TestNs, u32) {
    let parent = TestNs::new();
    let target = TestNs::new();
    let mut h = parent.handle();
    h.add_link(&LinkAdd::veth("parent0", VethPeer::named("parent0p")))
        .unwrap();
    let index = h.link_by_name("parent0").unwrap().index;
    (parent, target, index)
}

/// Creates `kind` from `parent` into `target` as `tmp0`, or `None` (skipped) on EOPNOTSUPP.
fn create_or_skip(
    parent: &TestNs,
    target: &TestNs,
    kind: LinkKind<'static>,
    index: u32,
    feature: &str,
) -> Option<()> {
    let mut h = parent.handle();
    let parent_index = kind.needs_parent().then_some(index);
    let what = kind.kind_name();
    let request = LinkAdd::new("tmp0", kind)
        .parent(parent_index)
        .netns(&target.ns);
    match h.add_link(&request) {
        Ok(()) => Some(()),
        Err(e) if e.errno() == Some(95) => {
            eprintln!("SKIPPED: kernel lacks {feature} ({e})");
            None
        }
        Err(e) => panic!("creating {what}: {e}"),
    }
}

#[test]
fn macvlan_into_another_namespace_then_renamed() {
    let (parent, target, index) = parent_and_target();
    let kind = LinkKind::Macvlan {
        mode: MacvlanMode::Private,
        bc_queue_len: 0,
    };
    let mut h = parent.handle();
    let request = LinkAdd::new("tmp0", kind.clone())
        .mtu(1400)
        .mac(MacAddr([2, 0, 0, 0, 0, 0x42]))
        .parent(index)
        .netns(&target.ns);
    h.add_link(&request).unwrap();
    // Never visible in the parent namespace.
    assert!(h.link_by_name("tmp0").unwrap_err().is_not_found());

    let mut t = target.handle();
    let link = t.link_by_name("tmp0").unwrap();
    assert_eq!(link.kind.as_deref(), Some("macvlan"));
    assert_eq!(link.mtu, 1400);
    assert_eq!(link.mac.unwrap().to_string(), "02:00:00:00:00:42");
    assert_eq!(
        t.virt_details(link.index).unwrap().macvlan_mode,
        Some(MacvlanMode::Private)
    );
    t.change_link(&LinkChange::of(link.index).name("eth0"))
        .unwrap();
    let j = target.ip_link("eth0");
    assert_eq!(j["linkinfo"]["info_kind"], "macvlan");
    assert_eq!(j["linkinfo"]["info_data"]["mode"], "private");
    assert_eq!(j["address"], "02:00:00:00:00:42");

    // A second one with the same name in the target is EEXIST.
    let err = h
        .add_link(&LinkAdd::new("eth0", kind).parent(index).netns(&target.ns))
        .unwrap_err();
    assert!(err.is_exists(), "{err}");
}

#[test]
fn every_macvlan_mode_reads_back() {
    let (parent, target, index) = parent_and_target();
    let mut h = parent.handle();
    for (i, mode) in [MacvlanMode::Bridge, MacvlanMode::Private, MacvlanMode::Vepa]
        .into_iter()
        .enumerate()
    {
        let name = format!("mv{i}");
        let kind = LinkKind::Macvlan {
            mode,
            bc_queue_len: 0,
        };
        h.add_link(&LinkAdd::new(&name, kind).parent(index).netns(&target.ns))
            .unwrap();
        let mut t = target.handle();
        let link = t.link_by_name(&name).unwrap();
        assert_eq!(t.virt_details(link.index).unwrap().macvlan_mode, Some(mode));
    }
}

#[test]
fn ipvlan_when_the_kernel_has_it() {
    let (parent, target, index) = parent_and_target();
    let kind = LinkKind::Ipvlan {
        mode: IpvlanMode::L3,
        flag: IpvlanFlag::Bridge,
    };
    if create_or_skip(
        &parent,
        &target,
        kind,
        index,
        "the ipvlan module (CONFIG_IPVLAN)",
    )
    .is_none()
    {
        return;
    }
    let mut t = target.handle();
    let link = t.link_by_name("tmp0").unwrap();
    assert_eq!(link.kind.as_deref(), Some("ipvlan"));
    assert_eq!(
        t.virt_details(link.index).unwrap().ipvlan_mode,
        Some(IpvlanMode::L3)
    );
}

#[test]
fn vlan_when_the_kernel_has_it() {
    let (parent, target, index) = parent_and_target();
    let kind = LinkKind::Vlan { id: 42 };
    if create_or_skip(
        &parent,
        &target,
        kind,
        index,
        "802.1Q VLAN support (CONFIG_VLAN_8021Q)",
    )
    .is_none()
    {
        return;
    }
    let mut t = target.handle();
    let link = t.link_by_name("tmp0").unwrap();
    assert_eq!(link.kind.as_deref(), Some("vlan"));
    assert_eq!(t.virt_details(link.index).unwrap().vlan_id, Some(42));
}

#[test]
fn dummy_when_the_kernel_has_it() {
    let (parent, target, index) = parent_and_target();
    if create_or_skip(
        &parent,
        &target,
        LinkKind::Dummy,
        index,
        "the dummy module (CONFIG_DUMMY)",
    )
    .is_none()
    {
        return;
    }
    let link = target.handle().link_by_name("tmp0").unwrap();
    assert_eq!(link.kind.as_deref(), Some("dummy"));
}
