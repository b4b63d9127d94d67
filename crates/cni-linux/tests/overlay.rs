//! Root-only: what the node agent programs per remote node (a VXLAN device, permanent
//! neighbour and FDB entries, onlink routes tagged with a protocol) inside a throwaway
//! namespace, read back through the crate and independently through `ip -j` / `bridge -j`.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::overlay::{FdbEntry, NextHopRoute};
use cni_linux::rtnl::vxlan::VxlanSpec;
use cni_linux::{Handle, MacAddr};
use common::TestNs;
use serde_json::Value;

const PROTO: u8 = 0x7c;

/// A namespace with an "underlay" veth `u0` (198.18.10.2/24) up.
fn underlay() -> (TestNs, Handle, u32) {
    let t = TestNs::new();
    let mut h = t.handle();
    h.add_link(&LinkAdd::veth("u0", VethPeer::named("u1")))
        .unwrap();
    let u0 = h.link_by_name("u0").unwrap().index;
    let u1 = h.link_by_name("u1").unwrap().index;
    h.change_link(&LinkChange::of(u0).up()).unwrap();
    h.change_link(&LinkChange::of(u1).up()).unwrap();
    h.add_address(
        u0,
        "198.18.10.2/24".parse().unwrap(),
        AddAddressOptions::default(),
    )
    .unwrap();
    (t, h, u0)
}

/// The device `rcni.7` as the tests make it.
fn vxlan_device(underlay: u32) -> LinkAdd<'static> {
    LinkAdd::vxlan("rcni.7", vxlan_spec(underlay))
        .mtu(1450)
        .mac(MacAddr([0x0e, 0, 0, 0, 0, 7]))
}

fn vxlan_spec(underlay: u32) -> VxlanSpec {
    VxlanSpec {
        vni: 7,
        local: Some(Ipv4Addr::new(198, 18, 10, 2).into()),
        port: Some(8472),
        learning: false,
        underlay: Some(underlay),
    }
}

/// Creates the VXLAN device, or returns `None` (the test then skips) when the kernel has no
/// VXLAN support.
fn vxlan(h: &mut Handle, underlay: u32) -> Option<u32> {
    match h.add_link(&vxlan_device(underlay)) {
        Ok(()) => Some(h.link_by_name("rcni.7").unwrap().index),
        Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
            eprintln!("skipping: this kernel has no VXLAN support (CONFIG_VXLAN): {e}");
            None
        }
        Err(e) => panic!("create vxlan: {e}"),
    }
}

fn bridge_json(t: &TestNs, args: &[&str]) -> Value {
    let out = Command::new("bridge")
        .arg("-n")
        .arg(&t.name)
        .arg("-j")
        .args(args)
        .output()
        .expect("run bridge");
    assert!(out.status.success(), "bridge {args:?} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&text).unwrap()
}

#[test]
fn vxlan_device_has_vni_vtep_port_learning_off_and_underlay() {
    let (t, mut h, u0) = underlay();
    let Some(index) = vxlan(&mut h, u0) else {
        return;
    };
    let link = t.ip_link("rcni.7");
    let data = &link["linkinfo"]["info_data"];
    assert_eq!(link["linkinfo"]["info_kind"], "vxlan");
    assert_eq!(data["id"], 7);
    assert_eq!(data["local"], "198.18.10.2");
    assert_eq!(data["port"], 8472);
    assert_eq!(data["learning"], false);
    assert_eq!(data["link"], "u0");
    assert_eq!(link["mtu"], 1450);
    assert_eq!(link["address"], "0e:00:00:00:00:07");

    let details = h.vxlan_details(index).unwrap().expect("a vxlan device");
    assert!(details.matches(&vxlan_spec(u0)));
    assert_eq!(h.vxlan_details(u0).unwrap(), None, "a veth is no vxlan");
    // The same name again is refused.
    assert!(h.add_link(&vxlan_device(u0)).unwrap_err().is_exists());
}

#[test]
fn fdb_neighbour_and_onlink_route_are_added_listed_and_removed() {
    let (t, mut h, u0) = underlay();
    let Some(vx) = vxlan(&mut h, u0) else {
        return;
    };
    h.change_link(&LinkChange::of(vx).up()).unwrap();
    h.add_address(
        vx,
        "198.19.1.0/32".parse().unwrap(),
        AddAddressOptions::default(),
    )
    .unwrap();

    let remote_mac = MacAddr([0x0e, 0, 0, 0, 0, 8]);
    let remote_vtep: IpAddr = Ipv4Addr::new(198, 18, 10, 3).into();
    let remote_gw: IpAddr = Ipv4Addr::new(198, 19, 2, 0).into();
    // flannel's order: neighbour, FDB, route.
    h.add_neighbour(vx, remote_gw, remote_mac).unwrap();
    let fdb = FdbEntry {
        mac: remote_mac,
        dst: remote_vtep,
    };
    h.replace_fdb_entry(vx, &fdb).unwrap();
    h.replace_fdb_entry(vx, &fdb).unwrap(); // idempotent
    let route = NextHopRoute {
        dst: "198.19.2.0/24".parse().unwrap(),
        via: remote_gw,
        oif: vx,
        onlink: true,
        protocol: PROTO,
    };
    h.replace_nexthop_route(&route).unwrap();
    h.replace_nexthop_route(&route).unwrap(); // idempotent

    // Independent read-back.
    let fdbs = bridge_json(&t, &["fdb", "show", "dev", "rcni.7"]);
    let entry = fdbs
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mac"] == "0e:00:00:00:00:08")
        .expect("fdb entry present");
    assert_eq!(entry["dst"], "198.18.10.3");
    assert!(entry["state"] == "permanent" || entry["state"].is_null());
    let neigh = t.ip_json(&["neigh", "show", "dev", "rcni.7"]);
    assert_eq!(neigh[0]["dst"], "198.19.2.0");
    assert_eq!(neigh[0]["lladdr"], "0e:00:00:00:00:08");
    assert_eq!(neigh[0]["state"][0], "PERMANENT");
    let routes = t.ip_json(&["route", "show", "198.19.2.0/24"]);
    assert_eq!(routes[0]["gateway"], "198.19.2.0");
    assert_eq!(routes[0]["dev"], "rcni.7");
    assert_eq!(routes[0]["flags"][0], "onlink");
    assert_eq!(routes[0]["protocol"], "124");

    // Through the crate.
    assert_eq!(h.fdb_entries(vx).unwrap(), vec![fdb]);
    assert_eq!(h.nexthop_routes(false, PROTO).unwrap(), vec![route]);
    assert!(h.nexthop_routes(false, PROTO + 1).unwrap().is_empty());

    // Removal, in reverse order.
    h.delete_nexthop_route(&route).unwrap();
    h.delete_fdb_entry(vx, &fdb).unwrap();
    h.delete_neighbour(vx, remote_gw).unwrap();
    assert!(h.nexthop_routes(false, PROTO).unwrap().is_empty());
    assert!(h.fdb_entries(vx).unwrap().is_empty());
    assert!(t
        .ip_json(&["neigh", "show", "dev", "rcni.7"])
        .as_array()
        .unwrap()
        .is_empty());
    assert!(h.delete_fdb_entry(vx, &fdb).unwrap_err().is_not_found());
}

#[test]
fn a_host_gw_route_through_an_underlay_neighbour_is_not_onlink() {
    let (t, mut h, u0) = underlay();
    let route = NextHopRoute {
        dst: "198.19.3.0/24".parse().unwrap(),
        via: Ipv4Addr::new(198, 18, 10, 3).into(),
        oif: u0,
        onlink: false,
        protocol: PROTO,
    };
    h.replace_nexthop_route(&route).unwrap();
    let routes = t.ip_json(&["route", "show", "198.19.3.0/24"]);
    assert_eq!(routes[0]["gateway"], "198.18.10.3");
    assert_eq!(routes[0]["dev"], "u0");
    assert!(routes[0]["flags"].as_array().unwrap().is_empty());
    assert_eq!(h.nexthop_routes(false, PROTO).unwrap(), vec![route]);
    // A gateway that is not on a connected subnet needs onlink.
    let mut far = route;
    far.dst = "198.19.4.0/24".parse().unwrap();
    far.via = Ipv4Addr::new(198, 19, 99, 1).into();
    assert!(h.replace_nexthop_route(&far).is_err());
    far.onlink = true;
    h.replace_nexthop_route(&far).unwrap();
}
