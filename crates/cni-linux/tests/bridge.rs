//! Root-only: bridges, bridge ports and bridge VLANs inside a throwaway namespace, checked
//! through the crate and independently through `ip -j -d link` and `bridge -j vlan`.

mod common;

use std::process::Command;

use cni_linux::rtnl::link::{BridgePortOptions, VlanFlags};
use cni_linux::rtnl::link_add::{LinkAdd, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use common::TestNs;

/// `bridge -n <ns> -j vlan show dev <dev>`: the (vid, pvid, untagged) entries.
fn bridge_vlans(t: &TestNs, dev: &str) -> Vec<(u64, bool, bool)> {
    let out = Command::new("bridge")
        .args(["-n", &t.name, "-j", "vlan", "show", "dev", dev])
        .output()
        .expect("run bridge");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut entries = Vec::new();
    for port in json.as_array().into_iter().flatten() {
        for v in port["vlans"].as_array().into_iter().flatten() {
            let flags: Vec<&str> = v["flags"]
                .as_array()
                .map(|f| f.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            entries.push((
                v["vlan"].as_u64().unwrap(),
                flags.contains(&"PVID"),
                flags.contains(&"Egress Untagged"),
            ));
        }
    }
    entries.sort();
    entries
}

/// Creates a VLAN-filtering bridge, or returns `None` (after saying why) when the kernel was
/// built without CONFIG_BRIDGE_VLAN_FILTERING.
fn vlan_filtering_bridge(h: &mut cni_linux::Handle, name: &str) -> Option<u32> {
    match h.add_link(&LinkAdd::bridge(name).vlan_filtering(true)) {
        Ok(()) => Some(h.link_by_name(name).unwrap().index),
        Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
            eprintln!(
                "SKIPPED: kernel lacks bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING): {e}"
            );
            None
        }
        Err(e) => panic!("create VLAN-filtering bridge: {e}"),
    }
}

#[test]
fn bridge_creation_and_port_configuration() {
    let t = TestNs::new();
    let mut h = t.handle();
    let bridge = LinkAdd::bridge("cni0").mtu(1400);
    h.add_link(&bridge).unwrap();
    assert!(h.add_link(&bridge).unwrap_err().is_exists());
    let br = h.link_by_name("cni0").unwrap();
    assert_eq!(br.kind.as_deref(), Some("bridge"));
    assert_eq!(br.vlan_filtering, Some(false));
    assert_eq!(br.mtu, 1400);
    let json = t.ip_link("cni0");
    assert_eq!(json["linkinfo"]["info_kind"], "bridge");
    assert_eq!(json["mtu"], 1400);

    h.add_link(&LinkAdd::veth("p0", VethPeer::named("p0peer")))
        .unwrap();
    let port = h.link_by_name("p0").unwrap();
    h.change_link(&LinkChange::of(port.index).master(br.index))
        .unwrap();
    let port = h.link_by_index(port.index).unwrap();
    assert_eq!(port.master, Some(br.index));
    assert_eq!(t.ip_link("p0")["master"], "cni0");

    h.set_bridge_port(
        port.index,
        &BridgePortOptions {
            hairpin: Some(true),
            isolated: Some(true),
            learning: Some(false),
        },
    )
    .unwrap();
    let info = h.link_by_index(port.index).unwrap().bridge_port.unwrap();
    assert!(info.hairpin && info.isolated && !info.learning);
    let slave = &t.ip_link("p0")["linkinfo"]["info_slave_data"];
    assert_eq!(slave["hairpin"], true);
    assert_eq!(slave["isolated"], true);
    assert_eq!(slave["learning"], false);

    h.set_bridge_port(
        port.index,
        &BridgePortOptions {
            hairpin: Some(false),
            ..Default::default()
        },
    )
    .unwrap();
    let info = h.link_by_index(port.index).unwrap().bridge_port.unwrap();
    assert!(!info.hairpin && info.isolated);

    h.change_link(&LinkChange::of(br.index).promisc(true))
        .unwrap();
    assert!(h.link_by_index(br.index).unwrap().promisc);

    h.change_link(&LinkChange::of(port.index).nomaster())
        .unwrap();
    assert_eq!(h.link_by_index(port.index).unwrap().master, None);
    assert!(t.ip_link("p0").get("master").is_none());
}

#[test]
fn bridge_vlans_on_ports_and_on_the_bridge() {
    let t = TestNs::new();
    let mut h = t.handle();
    let Some(br) = vlan_filtering_bridge(&mut h, "cni0") else {
        return;
    };
    assert_eq!(h.link_by_index(br).unwrap().vlan_filtering, Some(true));
    assert_eq!(
        t.ip_link("cni0")["linkinfo"]["info_data"]["vlan_filtering"],
        1
    );
    h.add_link(&LinkAdd::veth("p0", VethPeer::named("p0peer")))
        .unwrap();
    let port = h.link_by_name("p0").unwrap();
    h.change_link(&LinkChange::of(port.index).master(br))
        .unwrap();
    // VLANs on the port: the default VLAN 1 is there; add 100 as PVID/untagged and 200 tagged.
    h.add_bridge_vlan(
        port.index,
        100,
        VlanFlags {
            pvid: true,
            untagged: true,
        },
        false,
    )
    .unwrap();
    h.add_bridge_vlan(port.index, 200, VlanFlags::default(), false)
        .unwrap();
    let tool = bridge_vlans(&t, "p0");
    assert!(tool.contains(&(100, true, true)), "{tool:?}");
    assert!(tool.contains(&(200, false, false)), "{tool:?}");
    let mine = h.bridge_vlans(port.index).unwrap();
    let mine_pvid = mine.iter().find(|v| v.vid == 100).unwrap();
    assert!(mine_pvid.flags.pvid && mine_pvid.flags.untagged);
    assert_eq!(mine.len(), tool.len());

    for v in &mine {
        h.del_bridge_vlan(port.index, v.vid, false).unwrap();
    }
    assert!(bridge_vlans(&t, "p0").is_empty());
    assert!(h.bridge_vlans(port.index).unwrap().is_empty());
    // The link survived the AF_BRIDGE deletes.
    assert!(h.link_by_index(port.index).is_ok());

    // A VLAN on the bridge device itself.
    h.add_bridge_vlan(br, 300, VlanFlags::default(), true)
        .unwrap();
    assert!(bridge_vlans(&t, "cni0").iter().any(|v| v.0 == 300));
    h.del_bridge_vlan(br, 300, true).unwrap();
    assert!(!bridge_vlans(&t, "cni0").iter().any(|v| v.0 == 300));
}
