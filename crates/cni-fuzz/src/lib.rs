//! The bodies of rcni's fuzz targets: each takes arbitrary bytes, runs a real decoder of
//! untrusted input, and checks what must hold for every input (no panic; a result that
//! decodes renders in every version and the rendering decodes again). `fuzz/` wraps each one
//! in a cargo-fuzz target; `tests/replay.rs` runs every corpus and regression file through
//! them on the stable toolchain, so CI replays what fuzzing found.

use cni_linux::rtnl::fake::FakeTransport as RtnlFake;
use cni_linux::Handle;
use cni_nft::fake::FakeTransport as NftFake;
use cni_nft::{Family, Nft};
use cni_types::{CniArgs, CniResult, NetConf, NetConfList, SpecVersion};

/// Every target by name, for the replay test and `fuzz/run`.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("net_conf", net_conf),
    ("conf_list", conf_list),
    ("result", result),
    ("prev_result", prev_result),
    ("cni_args", cni_args),
    ("plugin_conf", plugin_conf),
    ("host_local_conf", host_local_conf),
    ("static_conf", static_conf),
    ("lease_owner", lease_owner),
    ("cache_entry", cache_entry),
    ("rtnl_reply", rtnl_reply),
    ("nft_reply", nft_reply),
];

/// A network config (one plugin's stdin).
pub fn net_conf(data: &[u8]) {
    let _ = NetConf::parse(data);
}

/// A `.conflist`, and the version it selects.
pub fn conf_list(data: &[u8]) {
    if let Ok(list) = NetConfList::parse(data) {
        let _ = list.select_version();
    }
}

/// A result in any layout: when it decodes, it renders in every version that has a layout,
/// and each rendering decodes again.
pub fn result(data: &[u8]) {
    if let Ok(parsed) = CniResult::from_slice(data, SpecVersion::V1_1_0) {
        renders_everywhere(&parsed);
    }
}

fn renders_everywhere(parsed: &CniResult) {
    for v in SpecVersion::ALL {
        if let Ok(rendered) = parsed.to_value(v) {
            if let Err(e) = CniResult::parse(&rendered, v) {
                panic!("{v} rendering of a decoded result does not decode: {e}: {rendered}");
            }
        }
    }
}

/// A config carrying a `prevResult`, decoded as a meta plugin decodes it.
pub fn prev_result(data: &[u8]) {
    let Ok(conf) = NetConf::parse(data) else {
        return;
    };
    let version = SpecVersion::parse(&conf.cni_version).unwrap_or(SpecVersion::V1_1_0);
    if let Some(Ok(prev)) = conf
        .prev_result
        .as_ref()
        .map(|v| CniResult::parse(v, version))
    {
        renders_everywhere(&prev);
    }
}

/// `CNI_ARGS`.
pub fn cni_args(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = CniArgs::parse(s);
    }
}

/// Every plugin's own config decoding, on one stdin.
pub fn plugin_conf(data: &[u8]) {
    use cni_plugins::{bandwidth, bridge, firewall, ipvlan, macvlan, portmap, tuning, vlan};
    let Ok(conf) = NetConf::parse(data) else {
        return;
    };
    let args = CniArgs::default();
    let _ = bridge::conf::BridgeConf::parse(&conf, &args);
    let _ = macvlan::conf::MacvlanConf::parse(&conf, &args);
    let _ = ipvlan::conf::IpvlanConf::parse(&conf);
    let _ = vlan::conf::VlanConf::parse(&conf);
    let _ = portmap::conf::PortMapConf::parse(&conf);
    let _ = firewall::conf::FirewallConf::parse(&conf);
    let _ = bandwidth::conf::Bandwidth::parse(&conf);
    let _ = tuning::conf::TuningConf::parse(&conf, data, &args);
}

/// host-local's config.
pub fn host_local_conf(data: &[u8]) {
    let _ = cni_ipam::HostLocalConfig::parse(data, None);
}

/// static's config, with CNI_ARGS overrides.
pub fn static_conf(data: &[u8]) {
    let _ = cni_ipam::StaticConfig::parse(data, None, None);
    let _ = cni_ipam::StaticConfig::parse(data, Some("198.18.0.5/24"), Some("198.18.0.1"));
}

/// A host-local lease file's content.
pub fn lease_owner(data: &[u8]) {
    let _ = cni_ipam::Lease::parse_owner(&String::from_utf8_lossy(data));
}

/// A libcni result cache file.
pub fn cache_entry(data: &[u8]) {
    let _ = cni_runtime::CacheEntry::decode(data);
}

/// A kernel reply to the rtnetlink dumps rcni makes.
pub fn rtnl_reply(data: &[u8]) {
    for dump in 0..3 {
        let fake = RtnlFake::new();
        fake.push_raw(data.to_vec());
        let mut h = Handle::with_transport(Box::new(fake));
        let _ = match dump {
            0 => h.links().map(|_| ()),
            1 => h.addresses(None).map(|_| ()),
            _ => h.routes(false, None).map(|_| ()),
        };
    }
}

/// A kernel reply to the nf_tables dumps rcni makes.
pub fn nft_reply(data: &[u8]) {
    let reply = data.to_vec();
    let mut nft = Nft::with_transport(Box::new(NftFake::with_responder(move |_| {
        vec![reply.clone()]
    })));
    let _ = nft.list_chains(Family::Inet, "t");
    let _ = nft.list_rules(Family::Inet, "t", "c");
    let _ = nft.table_exists(Family::Ip, "t");
}
