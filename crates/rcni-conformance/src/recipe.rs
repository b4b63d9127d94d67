//! How to run each reference plugin for real: its kind, a config that works inside the
//! suite's throwaway namespaces, the kernel fixture it needs (a master link for macvlan,
//! ipvlan and vlan, veth ends for host-device to move, an existing interface for the meta
//! plugins) and the kernel feature it needs, probed first so a kernel without it makes the
//! lifecycle checks "n/a: kernel lacks CONFIG_…" instead of failures. Addresses come from
//! 198.18.0.0/15.

use std::path::Path;

use serde_json::{json, Value};

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link_add::{LinkAdd, LinkKind, VethPeer};
use cni_linux::rtnl::link_change::LinkChange;
use cni_linux::rtnl::virt::{IpvlanFlag, IpvlanMode, MacvlanMode};
use cni_linux::{Handle, NetNs};

/// What a plugin does to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Makes the pod's interface (`interfaces[].sandbox` is the pod's netns).
    Interface,
    /// Hands out addresses, changes no namespace.
    Ipam,
    /// Works on the interfaces of `prevResult`.
    Meta,
}

/// What a plugin's ADD needs in the host namespace before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixture {
    None,
    /// A master link to stack on (macvlan, ipvlan, vlan).
    Master,
    /// Veth ends for host-device to move into pods, `rconfhd0`..`rconfhd{DEVICES-1}`.
    Devices,
}

/// The kernel feature a plugin's ADD needs.
#[derive(Debug, Clone, Copy)]
enum Feature {
    /// A link kind, probed by creating one; the kernel option that provides it.
    Link(fn() -> LinkKind<'static>, &'static str),
    /// `/dev/net/tun`.
    Tun,
}

/// A plugin the suite knows how to run.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub kind: Kind,
    /// The interface name the plugin is run with.
    pub ifname: &'static str,
    /// A /24 of 198.18.0.0/15 for this plugin's addresses.
    subnet: u8,
    fixture: Fixture,
    needs: Option<Feature>,
}

/// The recipe for a plugin name, if the suite has one.
pub fn for_plugin(name: &str) -> Option<Recipe> {
    let r = |kind, subnet, fixture, needs| Recipe {
        kind,
        ifname: "eth0",
        subnet,
        fixture,
        needs,
    };
    let link = |kind: fn() -> LinkKind<'static>, config| Some(Feature::Link(kind, config));
    Some(match name {
        "loopback" => Recipe {
            ifname: "lo",
            ..r(Kind::Interface, 0, Fixture::None, None)
        },
        "bridge" => r(Kind::Interface, 240, Fixture::None, None),
        "ptp" => r(Kind::Interface, 241, Fixture::None, None),
        "macvlan" => r(
            Kind::Interface,
            242,
            Fixture::Master,
            link(
                || LinkKind::Macvlan {
                    mode: MacvlanMode::Bridge,
                    bc_queue_len: 0,
                },
                "CONFIG_MACVLAN",
            ),
        ),
        "ipvlan" => r(
            Kind::Interface,
            246,
            Fixture::Master,
            link(
                || LinkKind::Ipvlan {
                    mode: IpvlanMode::L2,
                    flag: IpvlanFlag::Bridge,
                },
                "CONFIG_IPVLAN",
            ),
        ),
        "vlan" => r(
            Kind::Interface,
            247,
            Fixture::Master,
            link(|| LinkKind::Vlan { id: VLAN_ID }, "CONFIG_VLAN_8021Q"),
        ),
        "dummy" => r(
            Kind::Interface,
            248,
            Fixture::None,
            link(|| LinkKind::Dummy, "CONFIG_DUMMY"),
        ),
        "host-device" => r(Kind::Interface, 249, Fixture::Devices, None),
        "tap" => r(Kind::Interface, 250, Fixture::None, Some(Feature::Tun)),
        "host-local" => r(Kind::Ipam, 243, Fixture::None, None),
        "static" => r(Kind::Ipam, 244, Fixture::None, None),
        "portmap" | "firewall" | "tuning" | "bandwidth" | "sbr" => {
            r(Kind::Meta, 245, Fixture::None, None)
        }
        "vrf" => r(
            Kind::Meta,
            245,
            Fixture::None,
            link(|| LinkKind::Vrf { table: VRF_TABLE }, "CONFIG_NET_VRF"),
        ),
        _ => return None,
    })
}

/// EOPNOTSUPP: what the kernel answers for a link kind it was built without.
const EOPNOTSUPP: i32 = 95;

/// The name of the master link macvlan, ipvlan and vlan attach to.
pub const MASTER: &str = "rconfmaster0";
const VLAN_ID: u16 = 100;
const VRF_TABLE: u32 = 4242;
/// How many devices host-device gets: the main attachment's and one per result version.
const DEVICES: usize = 5;

/// The host device the `n`-th attachment of host-device moves.
pub fn host_device(n: usize) -> String {
    format!("rconfhd{n}")
}

impl Recipe {
    pub fn uses_host_local(&self, plugin: &str) -> bool {
        matches!(
            plugin,
            "bridge" | "ptp" | "macvlan" | "ipvlan" | "vlan" | "dummy" | "host-local"
        )
    }

    /// Config keys of the `n`-th attachment (0 is the main one): host-device needs a device
    /// of its own for each attachment that exists at the same time.
    pub fn attachment_keys(&self, plugin: &str, n: usize) -> Value {
        match plugin {
            "host-device" => json!({"device": host_device(n)}),
            _ => json!({}),
        }
    }

    /// `Some(why)` when the kernel lacks what ADD needs: the lifecycle checks are then not
    /// applicable. Probed in the host namespace after [`Recipe::host_fixture`].
    pub fn missing_kernel_feature(&self, host: &NetNs) -> Result<Option<String>, String> {
        match self.needs {
            None => Ok(None),
            Some(Feature::Tun) => Ok((!Path::new("/dev/net/tun").exists())
                .then(|| "kernel lacks CONFIG_TUN (no /dev/net/tun)".to_string())),
            Some(Feature::Link(kind, config)) => {
                let kind = kind();
                let mut h = Handle::in_netns(host).map_err(|e| e.to_string())?;
                let parent = if kind.needs_parent() {
                    Some(h.link_by_name(MASTER).map_err(|e| e.to_string())?.index)
                } else {
                    None
                };
                let probe = "rconfprobe0";
                let what = kind.kind_name();
                match h.add_link(&LinkAdd::new(probe, kind).parent(parent)) {
                    Ok(()) => {
                        h.delete_link_by_name(probe).map_err(|e| e.to_string())?;
                        Ok(None)
                    }
                    Err(e) if e.errno() == Some(EOPNOTSUPP) => Ok(Some(format!(
                        "kernel lacks {config} (creating a link of kind {what}: {e})"
                    ))),
                    Err(e) => Err(format!("probing {what} links: {e}")),
                }
            }
        }
    }

    /// host-local's data directory for `plugin`.
    pub fn data_dir(scratch: &Path, plugin: &str) -> String {
        scratch.join("ipam").join(plugin).display().to_string()
    }

    fn host_local(&self, scratch: &Path, plugin: &str) -> Value {
        json!({
            "type": "host-local",
            "ranges": [[{"subnet": format!("198.18.{}.0/24", self.subnet)}]],
            "dataDir": Self::data_dir(scratch, plugin),
        })
    }

    /// The network config of one call at `version`, with `extra` keys merged in (prevResult,
    /// valid attachments).
    pub fn config(&self, plugin: &str, version: &str, scratch: &Path, extra: &Value) -> Value {
        let name = format!("conformance-{plugin}");
        let mut c = json!({"cniVersion": version, "name": name, "type": plugin});
        let body = match plugin {
            "bridge" => {
                json!({"bridge": "rconfbr0", "isGateway": true, "ipam": self.host_local(scratch, plugin)})
            }
            "ptp" => json!({"ipam": self.host_local(scratch, plugin)}),
            "macvlan" => {
                json!({"master": MASTER, "mode": "bridge", "ipam": self.host_local(scratch, plugin)})
            }
            "ipvlan" => json!({"master": MASTER, "ipam": self.host_local(scratch, plugin)}),
            "vlan" => {
                json!({"master": MASTER, "vlanId": VLAN_ID, "ipam": self.host_local(scratch, plugin)})
            }
            "dummy" => json!({"ipam": self.host_local(scratch, plugin)}),
            "host-device" => {
                // rcni keeps what DEL restores in a state dir: the scratch one, never the host's.
                let mut keys = self.attachment_keys(plugin, 0);
                keys["dataDir"] = json!(scratch.join("host-device").display().to_string());
                keys
            }
            "tap" | "sbr" => json!({}),
            "vrf" => json!({"vrfname": "rconfvrf", "table": VRF_TABLE}),
            "host-local" => {
                let ipam = self.host_local(scratch, plugin);
                json!({"ipam": {"ranges": ipam["ranges"], "dataDir": ipam["dataDir"]}})
            }
            "static" => {
                json!({"ipam": {"addresses": [{"address": format!("198.18.{}.5/24", self.subnet)}]}})
            }
            "portmap" => json!({
                "capabilities": {"portMappings": true},
                "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]},
            }),
            "firewall" => json!({}),
            "tuning" => json!({
                "sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"},
                "dataDir": scratch.join("tuning").display().to_string(),
            }),
            "bandwidth" => {
                json!({"ingressRate": 8_000_000, "ingressBurst": 100_000, "egressRate": 8_000_000, "egressBurst": 100_000})
            }
            _ => json!({}),
        };
        // ipam plugins are called with their config under "ipam" of the network config.
        if plugin == "host-local" || plugin == "static" {
            c["ipam"] = body["ipam"].clone();
            c["ipam"]["type"] = json!(plugin);
        } else if let Value::Object(m) = body {
            for (k, v) in m {
                c[k] = v;
            }
        }
        if let Value::Object(m) = extra {
            for (k, v) in m {
                c[k.clone()] = v.clone();
            }
        }
        c
    }

    /// Host-namespace fixture made once per plugin (the master link, host-device's devices).
    pub fn host_fixture(&self, host: &NetNs) -> Result<(), String> {
        let mut h = Handle::in_netns(host).map_err(|e| e.to_string())?;
        match self.fixture {
            Fixture::None => return Ok(()),
            Fixture::Devices => {
                for n in 0..DEVICES {
                    let dev = host_device(n);
                    if h.link_by_name(&dev).is_err() {
                        h.add_link(&LinkAdd::veth(&dev, VethPeer::named(format!("{dev}p"))))
                            .map_err(|e| format!("cannot create {dev}: {e}"))?;
                    }
                }
                return Ok(());
            }
            Fixture::Master => {}
        }
        if h.link_by_name(MASTER).is_err() {
            h.add_link(&LinkAdd::veth(
                MASTER,
                VethPeer::named(format!("{MASTER}p")),
            ))
            .map_err(|e| format!("cannot create {MASTER}: {e}"))?;
        }
        let idx = h.link_by_name(MASTER).map_err(|e| e.to_string())?.index;
        h.change_link(&LinkChange::of(idx).up())
            .map_err(|e| e.to_string())
    }

    /// For a meta plugin: a veth pair with the pod end `eth0` addressed in `pod`, and the
    /// prevResult describing it (as an interface plugin would have returned it).
    pub fn meta_fixture(
        &self,
        host: &NetNs,
        pod: &NetNs,
        host_end: &str,
        version: &str,
    ) -> Result<Value, String> {
        let mut h = Handle::in_netns(host).map_err(|e| e.to_string())?;
        h.add_link(&LinkAdd::veth(host_end, VethPeer::named("eth0").netns(pod)))
            .map_err(|e| format!("cannot create the fixture veth: {e}"))?;
        let hl = h.link_by_name(host_end).map_err(|e| e.to_string())?;
        h.change_link(&LinkChange::of(hl.index).up())
            .map_err(|e| e.to_string())?;
        let mut p = Handle::in_netns(pod).map_err(|e| e.to_string())?;
        let pl = p.link_by_name("eth0").map_err(|e| e.to_string())?;
        p.change_link(&LinkChange::of(pl.index).up())
            .map_err(|e| e.to_string())?;
        let addr = format!("198.18.{}.2/24", self.subnet);
        p.add_address(
            pl.index,
            addr.parse().map_err(|e| format!("{e}"))?,
            AddAddressOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        let mac = |m: Option<cni_linux::MacAddr>| m.map(|m| m.to_string()).unwrap_or_default();
        let mut ip = json!({"address": addr, "interface": 1, "gateway": format!("198.18.{}.1", self.subnet)});
        if version == "0.3.1" || version == "0.4.0" {
            ip["version"] = json!("4");
        }
        Ok(json!({
            "cniVersion": version,
            "interfaces": [
                {"name": host_end, "mac": mac(hl.mac)},
                {"name": "eth0", "mac": mac(pl.mac), "sandbox": pod.path().display().to_string()},
            ],
            "ips": [ip],
        }))
    }
}
