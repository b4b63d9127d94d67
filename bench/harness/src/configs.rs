//! The config lists benchmarked, one copy per implementation with its own bridge, subnet and
//! lease directory so the two never share state. Addresses come from the benchmarking range
//! 198.18.0.0/15 (one /20 per slot) and exist only inside the bench namespaces.

use std::path::Path;

use serde_json::{json, Value};

/// The chains of figure 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainKind {
    Loopback,
    Bridge,
    BridgeMasq,
    BridgeMasqPortmap,
}

impl ChainKind {
    pub const ALL: [ChainKind; 4] = [
        ChainKind::Loopback,
        ChainKind::Bridge,
        ChainKind::BridgeMasq,
        ChainKind::BridgeMasqPortmap,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ChainKind::Loopback => "loopback",
            ChainKind::Bridge => "bridge+host-local",
            ChainKind::BridgeMasq => "bridge+host-local+ipMasq",
            ChainKind::BridgeMasqPortmap => "bridge+host-local+ipMasq+portmap",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            ChainKind::Loopback => "lo",
            ChainKind::Bridge => "br",
            ChainKind::BridgeMasq => "brm",
            ChainKind::BridgeMasqPortmap => "brmp",
        }
    }
}

/// `slot` separates implementations (0 = rcni, 1 = Go) and runs (churn uses its own slots).
pub fn conflist(kind: ChainKind, label: &str, slot: u8, data_dir: &Path) -> Value {
    let name = format!("bench-{}-{label}-{slot}", kind.slug());
    if kind == ChainKind::Loopback {
        return json!({"cniVersion": "1.0.0", "name": name, "plugins": [{"type": "loopback"}]});
    }
    let bridge = json!({
        "type": "bridge",
        "bridge": format!("rcnib{slot}"),
        "isGateway": true,
        "ipMasq": kind != ChainKind::Bridge,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": slot_subnet(slot).to_string()}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": data_dir.display().to_string()
        }
    });
    let mut plugins = vec![bridge];
    if kind == ChainKind::BridgeMasqPortmap {
        plugins.push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

/// The /20 of 198.18.0.0/15 that belongs to `slot` (slots 0..=30; 31 is the kernel floor's).
pub fn slot_subnet(slot: u8) -> ipnet::Ipv4Net {
    let base = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + u32::from(slot) * 4096;
    ipnet::Ipv4Net::new(base.into(), 20).expect("a /20 is a valid prefix")
}

/// One host port mapping for attachment `i`.
pub fn port_mapping(i: usize) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(
        "portMappings".into(),
        json!([{"hostPort": 20000 + (i % 20000), "containerPort": 80, "protocol": "tcp"}]),
    );
    m
}
