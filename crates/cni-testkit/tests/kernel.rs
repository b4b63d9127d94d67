//! The iproute2/nft readers see what `ip` created (run as root).

use cni_testkit::{addrs, bridge_vlans, link, links, nft_json, qdiscs, routes, IpFamily, Sandbox};

#[test]
fn readers_see_links_addresses_and_routes() {
    let sb = Sandbox::new().unwrap();
    let ns = sb.host().name.clone();
    for argv in [
        vec!["ip", "link", "add", "br0", "type", "bridge"],
        vec![
            "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ],
        vec!["ip", "link", "set", "v0", "master", "br0"],
        vec!["ip", "addr", "add", "198.18.0.1/16", "dev", "br0"],
        vec![
            "ip",
            "addr",
            "add",
            "2001:2:0:88::1/64",
            "dev",
            "br0",
            "nodad",
        ],
        vec!["ip", "link", "set", "br0", "up"],
    ] {
        sb.exec_host(argv).unwrap().assert_success();
    }

    let names: Vec<String> = links(&ns)
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    let br = link(&ns, "br0").unwrap().unwrap();
    assert_eq!(br["linkinfo"]["info_kind"], "bridge");
    assert_eq!(link(&ns, "v0").unwrap().unwrap()["master"], "br0");
    assert!(link(&ns, "nope").unwrap().is_none());

    let br_addrs = addrs(&ns)
        .unwrap()
        .into_iter()
        .find(|l| l["ifname"] == "br0")
        .unwrap();
    let locals: Vec<&str> = br_addrs["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["local"].as_str())
        .collect();
    assert!(
        locals.contains(&"198.18.0.1") && locals.contains(&"2001:2:0:88::1"),
        "{locals:?}"
    );

    let v4 = routes(&ns, IpFamily::V4).unwrap();
    assert!(
        v4.iter()
            .any(|r| r["dst"] == "198.18.0.0/16" && r["dev"] == "br0"),
        "{v4:?}"
    );
    assert!(
        v4.iter().any(|r| r["table"] == "local"),
        "table all includes local"
    );
    assert!(v4.iter().all(|r| r["dst"] != "2001:2:0:88::/64"));
    let v6 = routes(&ns, IpFamily::V6).unwrap();
    assert!(v6.iter().any(|r| r["dst"] == "2001:2:0:88::/64"), "{v6:?}");

    sb.exec_host([
        "tc", "qdisc", "add", "dev", "v0", "root", "tbf", "rate", "1mbit", "burst", "32kbit",
        "latency", "400ms",
    ])
    .unwrap()
    .assert_success();
    let qd = qdiscs(&ns).unwrap();
    assert!(
        qd.iter().any(|q| q["dev"] == "v0" && q["kind"] == "tbf"),
        "{qd:?}"
    );
}

#[test]
fn bridge_vlans_of_a_port() {
    let sb = Sandbox::new().unwrap();
    let ns = sb.host().name.clone();
    let filtering = sb
        .exec_host([
            "ip",
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "vlan_filtering",
            "1",
        ])
        .unwrap();
    if !filtering.success() {
        eprintln!(
            "skipped: kernel lacks bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING): {}",
            filtering.stderr.trim()
        );
        return;
    }
    for argv in [
        vec![
            "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ],
        vec!["ip", "link", "set", "v0", "master", "br0"],
        vec!["bridge", "vlan", "add", "dev", "v0", "vid", "42"],
    ] {
        sb.exec_host(argv).unwrap().assert_success();
    }
    let vlans = bridge_vlans(&ns).unwrap();
    let v0 = vlans.iter().find(|p| p["ifname"] == "v0").unwrap();
    let vids = v0["vlans"].as_array().unwrap();
    assert!(vids.iter().any(|v| v["vlan"] == 42), "{v0}");
}

#[test]
fn empty_namespace_reads_empty() {
    let sb = Sandbox::new().unwrap();
    let c = sb.add_container().unwrap();
    assert_eq!(links(&c.name).unwrap().len(), 1);
    assert!(routes(&c.name, IpFamily::V4).unwrap().is_empty());
    assert!(bridge_vlans(&c.name).unwrap().is_empty());
}

#[test]
fn nft_ruleset_of_the_namespace() {
    let sb = Sandbox::new().unwrap();
    let ns = sb.host().name.clone();
    let Some(empty) = nft_json(&ns).unwrap() else {
        eprintln!("skipped: nft is not installed");
        return;
    };
    let has_table = |v: &serde_json::Value| {
        v["nftables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["table"]["name"] == "rcnit")
    };
    assert!(!has_table(&empty));
    sb.exec_host(["nft", "add", "table", "inet", "rcnit"])
        .unwrap()
        .assert_success();
    assert!(has_table(&nft_json(&ns).unwrap().unwrap()));
    // another namespace does not see it
    let c = sb.add_container().unwrap();
    assert!(!has_table(&nft_json(&c.name).unwrap().unwrap()));
}
