//! How to run each reference plugin for real: its kind, a config that works inside the
//! suite's throwaway namespaces, and the kernel fixture it needs (a master link for macvlan,
//! an existing interface for the meta plugins). Addresses come from 198.18.0.0/15.

use std::path::Path;

use serde_json::{json, Value};

use cni_linux::rtnl::addr::AddAddressOptions;
use cni_linux::rtnl::link::LinkSpec;
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

/// A plugin the suite knows how to run.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    pub kind: Kind,
    /// The interface name the plugin is run with.
    pub ifname: &'static str,
    /// A /24 of 198.18.0.0/15 for this plugin's addresses.
    subnet: u8,
    /// Whether ADD needs a master link in the host namespace (macvlan).
    needs_master: bool,
}

/// The recipe for a plugin name, if the suite has one.
pub fn for_plugin(name: &str) -> Option<Recipe> {
    let r = |kind, ifname, subnet, needs_master| Recipe {
        kind,
        ifname,
        subnet,
        needs_master,
    };
    Some(match name {
        "loopback" => r(Kind::Interface, "lo", 0, false),
        "bridge" => r(Kind::Interface, "eth0", 240, false),
        "ptp" => r(Kind::Interface, "eth0", 241, false),
        "macvlan" => r(Kind::Interface, "eth0", 242, true),
        "host-local" => r(Kind::Ipam, "eth0", 243, false),
        "static" => r(Kind::Ipam, "eth0", 244, false),
        "portmap" | "firewall" | "tuning" | "bandwidth" => r(Kind::Meta, "eth0", 245, false),
        _ => return None,
    })
}

/// The name of the master link macvlan attaches to.
pub const MASTER: &str = "rconfmaster0";

impl Recipe {
    pub fn uses_host_local(&self, plugin: &str) -> bool {
        matches!(plugin, "bridge" | "ptp" | "macvlan" | "host-local")
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
            "tuning" => json!({"sysctl": {"net.ipv4.conf.eth0.arp_filter": "1"}}),
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

    /// Host-namespace fixture made once per plugin (the macvlan master).
    pub fn host_fixture(&self, host: &NetNs) -> Result<(), String> {
        if !self.needs_master {
            return Ok(());
        }
        let mut h = Handle::in_netns(host).map_err(|e| e.to_string())?;
        if h.link_by_name(MASTER).is_err() {
            h.create_veth(
                &LinkSpec::named(MASTER),
                &LinkSpec::named(format!("{MASTER}p")),
                None,
            )
            .map_err(|e| format!("cannot create {MASTER}: {e}"))?;
        }
        let idx = h.link_by_name(MASTER).map_err(|e| e.to_string())?.index;
        h.set_link_up(idx).map_err(|e| e.to_string())
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
        h.create_veth(
            &LinkSpec::named(host_end),
            &LinkSpec::named("eth0"),
            Some(pod),
        )
        .map_err(|e| format!("cannot create the fixture veth: {e}"))?;
        let hl = h.link_by_name(host_end).map_err(|e| e.to_string())?;
        h.set_link_up(hl.index).map_err(|e| e.to_string())?;
        let mut p = Handle::in_netns(pod).map_err(|e| e.to_string())?;
        let pl = p.link_by_name("eth0").map_err(|e| e.to_string())?;
        p.set_link_up(pl.index).map_err(|e| e.to_string())?;
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
