//! Root-only: routes, neighbours and namespace sysctls inside throwaway namespaces, checked
//! through the crate and independently through `ip -j` / `ip netns exec cat`.

mod common;

use std::net::IpAddr;
use std::process::Command;

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::route::{Route, RouteScope};
use cni_linux::{sysctl, Handle};
use common::TestNs;

/// A namespace with veth `r0`/`r1` up, `r0` holding 198.18.30.2/24 and fd00:30::2/64.
fn setup() -> (TestNs, Handle, u32) {
    let t = TestNs::new();
    let mut h = t.handle();
    h.add_link(&LinkAdd::veth("r0", VethPeer::named("r1")))
        .unwrap();
    let r0 = h.link_by_name("r0").unwrap().index;
    let r1 = h.link_by_name("r1").unwrap().index;
    h.change_link(&LinkChange::of(r0).up()).unwrap();
    h.change_link(&LinkChange::of(r1).up()).unwrap();
    h.add_address(
        r0,
        "198.18.30.2/24".parse().unwrap(),
        AddAddressOptions::default(),
    )
    .unwrap();
    h.add_address(
        r0,
        "fd00:30::2/64".parse().unwrap(),
        AddAddressOptions { nodad: true },
    )
    .unwrap();
    (t, h, r0)
}

fn ip_routes(t: &TestNs, args: &[&str]) -> Vec<serde_json::Value> {
    let mut full = vec!["route", "show"];
    full.extend_from_slice(args);
    t.ip_json(&full).as_array().cloned().unwrap_or_default()
}

#[test]
fn ipv4_routes_append_replace_list_and_delete() {
    let (t, mut h, r0) = setup();
    let mut via1 = Route::to("198.19.40.0/24".parse().unwrap());
    via1.gateway = Some("198.18.30.1".parse().unwrap());
    via1.priority = Some(50);
    h.add_route(&via1).unwrap();
    // Same destination, another gateway: appended, not refused.
    let mut via3 = via1.clone();
    via3.gateway = Some("198.18.30.3".parse().unwrap());
    h.add_route(&via3).unwrap();
    // An identical route is refused.
    assert!(h.add_route(&via1).unwrap_err().is_exists());

    let mine: Vec<Route> = h
        .routes(false, None)
        .unwrap()
        .into_iter()
        .filter(|r| r.dst == via1.dst)
        .collect();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(mine
        .iter()
        .all(|r| r.priority == Some(50) && r.oif == Some(r0)));
    let tool = ip_routes(&t, &["198.19.40.0/24"]);
    let gws: Vec<&str> = tool.iter().filter_map(|r| r["gateway"].as_str()).collect();
    assert!(
        gws.contains(&"198.18.30.1") && gws.contains(&"198.18.30.3"),
        "{tool:?}"
    );
    assert!(tool.iter().all(|r| r["metric"] == 50 && r["dev"] == "r0"));

    // Link-scope device route with MTU and advmss metrics.
    let mut dev_route = Route::to("198.19.50.0/24".parse().unwrap());
    dev_route.oif = Some(r0);
    dev_route.scope = Some(RouteScope::Link);
    dev_route.mtu = Some(1300);
    dev_route.advmss = Some(1260);
    h.add_route(&dev_route).unwrap();
    let back = h
        .routes(false, None)
        .unwrap()
        .into_iter()
        .find(|r| r.dst == dev_route.dst)
        .unwrap();
    assert_eq!((back.mtu, back.advmss), (Some(1300), Some(1260)));
    assert_eq!(back.scope, Some(RouteScope::Link));
    let tool = ip_routes(&t, &["198.19.50.0/24"]);
    assert_eq!(tool[0]["scope"], "link");
    let metrics = tool[0]["metrics"].to_string();
    assert!(
        metrics.contains("1300") && metrics.contains("1260"),
        "{metrics}"
    );

    // Replace the default route's gateway.
    let mut default = Route::to("0.0.0.0/0".parse().unwrap());
    default.gateway = Some("198.18.30.1".parse().unwrap());
    h.replace_route(&default).unwrap();
    default.gateway = Some("198.18.30.3".parse().unwrap());
    h.replace_route(&default).unwrap();
    let tool = ip_routes(&t, &["default"]);
    assert_eq!(tool.len(), 1);
    assert_eq!(tool[0]["gateway"], "198.18.30.3");

    // Another table.
    let mut other = Route::to("198.19.60.0/24".parse().unwrap());
    other.oif = Some(r0);
    other.table = Some(1000);
    h.add_route(&other).unwrap();
    assert!(h
        .routes(false, Some(1000))
        .unwrap()
        .iter()
        .any(|r| r.dst == other.dst && r.table == Some(1000)));
    assert!(!h
        .routes(false, None)
        .unwrap()
        .iter()
        .any(|r| r.dst == other.dst));
    assert_eq!(ip_routes(&t, &["table", "1000"]).len(), 1);

    // Delete one of the two appended routes, then the other; a third delete is "not found".
    h.delete_route(&via1).unwrap();
    let tool = ip_routes(&t, &["198.19.40.0/24"]);
    assert_eq!(tool.len(), 1);
    assert_eq!(tool[0]["gateway"], "198.18.30.3");
    h.delete_route(&via3).unwrap();
    assert!(ip_routes(&t, &["198.19.40.0/24"]).is_empty());
    let err = h.delete_route(&via3).unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[test]
fn ipv6_routes() {
    let (t, mut h, r0) = setup();
    let mut route = Route::to("fd00:40::/48".parse().unwrap());
    route.gateway = Some("fd00:30::1".parse().unwrap());
    route.oif = Some(r0);
    route.priority = Some(10);
    h.add_route(&route).unwrap();
    let back = h
        .routes(true, None)
        .unwrap()
        .into_iter()
        .find(|r| r.dst == route.dst)
        .expect("route listed");
    assert_eq!(back.gateway, route.gateway);
    assert_eq!(back.priority, Some(10));
    let tool = t.ip_json(&["-6", "route", "show", "fd00:40::/48"]);
    assert_eq!(tool[0]["gateway"], "fd00:30::1");
    assert_eq!(tool[0]["metric"], 10);
    h.delete_route(&route).unwrap();
    assert!(!h
        .routes(true, None)
        .unwrap()
        .iter()
        .any(|r| r.dst == route.dst));
}

#[test]
fn permanent_neighbours() {
    let (t, mut h, r0) = setup();
    let ip: IpAddr = "198.18.30.9".parse().unwrap();
    let mac = "02:00:00:00:00:09".parse().unwrap();
    h.add_neighbour(r0, ip, mac).unwrap();
    // Adding again replaces rather than fails.
    h.add_neighbour(r0, ip, mac).unwrap();
    let n = h
        .neighbours(r0)
        .unwrap()
        .into_iter()
        .find(|n| n.ip == ip)
        .expect("neighbour listed");
    assert_eq!(n.mac, Some(mac));
    assert!(n.permanent);
    let tool = t.ip_json(&["neigh", "show", "dev", "r0"]);
    let entry = tool
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["dst"] == "198.18.30.9")
        .expect("ip sees the neighbour");
    assert_eq!(entry["lladdr"], "02:00:00:00:00:09");
}

fn cat_in_ns(t: &TestNs, path: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &t.name, "cat", path])
        .output()
        .expect("run ip netns exec");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn sysctls_are_written_inside_the_namespace_only() {
    let (t, _h, _) = setup();
    let host_forward = sysctl::read("net.ipv4.ip_forward").unwrap();

    t.ns.run(|| sysctl::enable_ip_forwarding(true, true))
        .unwrap()
        .unwrap();
    assert_eq!(cat_in_ns(&t, "/proc/sys/net/ipv4/ip_forward"), "1");
    assert_eq!(cat_in_ns(&t, "/proc/sys/net/ipv6/conf/all/forwarding"), "1");
    // Already 1: the second call reads and does not write.
    let wrote =
        t.ns.run(|| sysctl::ensure("net.ipv4.ip_forward", "1"))
            .unwrap()
            .unwrap();
    assert!(!wrote);

    let key = sysctl::iface_key("ipv6", "r0", "accept_ra");
    let wrote = t.ns.run(|| sysctl::ensure(&key, "0")).unwrap().unwrap();
    assert!(wrote);
    assert_eq!(cat_in_ns(&t, "/proc/sys/net/ipv6/conf/r0/accept_ra"), "0");
    assert_eq!(t.ns.run(|| sysctl::read(&key)).unwrap().unwrap(), "0");

    // The host namespace was not touched.
    assert_eq!(sysctl::read("net.ipv4.ip_forward").unwrap(), host_forward);
}

#[test]
fn kernel_extended_ack_text_reaches_the_error() {
    let (_t, mut h, _) = setup();
    let mut route = Route::to("198.19.70.0/24".parse().unwrap());
    route.gateway = Some("198.19.99.1".parse().unwrap());
    let err = h.add_route(&route).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENETUNREACH));
    let cni_linux::NetlinkError::Kernel(kernel) = &err else {
        panic!("not a kernel error: {err}")
    };
    let text = kernel.message.as_deref().unwrap_or_default();
    assert!(text.to_lowercase().contains("gateway"), "{err}");
    assert!(err.to_string().contains(text), "{err}");
}
