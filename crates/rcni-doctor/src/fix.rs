//! `rcni doctor --fix`: removes what the audit found, only through the plugins' own DEL and
//! GC, so nothing is removed that a plugin cannot attribute to an attachment. A cache entry
//! whose netns is gone gets the runtime's DEL with its cached arguments; every other leak of
//! a known network is removed by one GC of that network whose valid list is every attachment
//! still cached for it, which keeps all live attachments by construction. A network whose
//! plugins cannot be asked to GC (below spec 1.1.0, as Debian's Go plugins) gets, for each
//! leaked lease, the chain's DEL of the attachment the lease names (container ID and
//! interface, no netns): the plugins release what they attribute to it, and nothing else.

use std::collections::BTreeSet;

use cni_runtime::{Attachment, AttachmentId, Network, Runtime};

use super::audit::{Finding, Snapshot};

/// What one remedy did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    pub action: String,
    pub error: Option<String>,
}

fn network<'a>(snap: &'a Snapshot, name: &str) -> Option<&'a Network> {
    snap.networks.iter().find(|n| n.name() == name)
}

pub fn apply(rt: &Runtime, snap: &Snapshot, findings: &[Finding]) -> Vec<Applied> {
    let mut done = Vec::new();
    for f in findings.iter().filter(|f| f.kind == "cache-netns-gone") {
        let Some(entry) = snap
            .cache
            .iter()
            .find(|e| format!("{}-{}-{}", e.network_name, e.container_id, e.ifname) == f.object)
        else {
            continue;
        };
        // The config the attachment was made with, as cached, when no file defines it now.
        let net = network(snap, &entry.network_name)
            .cloned()
            .or_else(|| Network::from_list_bytes(&entry.config).ok());
        let action = format!(
            "DEL of {} container {} interface {}",
            entry.network_name, entry.container_id, entry.ifname
        );
        let error = match net {
            None => Some("no usable network config".to_string()),
            Some(net) => {
                let att: Attachment = entry.attachment();
                rt.del(&net, &att).err().map(|e| e.to_string())
            }
        };
        done.push(Applied { action, error });
    }
    let to_gc: BTreeSet<&str> = findings
        .iter()
        .filter(|f| f.kind != "cache-netns-gone")
        .filter_map(|f| f.network.as_deref())
        .collect();
    for name in to_gc {
        let Some(net) = network(snap, name) else {
            continue;
        };
        let valid: Vec<AttachmentId> = rt
            .cache
            .attachments(None)
            .iter()
            .filter(|e| e.network_name == name)
            .map(|e| e.id())
            .collect();
        let action = format!(
            "GC of {name} keeping its {} cached attachment(s)",
            valid.len()
        );
        // A network below 1.1.0 gets no plugin GC from the runtime; when every plugin of
        // the chain speaks 1.1.0 it is asked at 1.1.0, otherwise nothing can collect.
        let speaks_1_1 = rt
            .version(net)
            .iter()
            .all(|v| v.info.as_ref().is_ok_and(|i| i.supports("1.1.0")));
        if !speaks_1_1 {
            done.push(Applied {
                action,
                error: Some(format!(
                    "not every plugin of {name} speaks spec 1.1.0, so none can be asked to GC"
                )),
            });
            done.extend(del_leased(rt, snap, findings, net));
            continue;
        }
        let error = rt.gc(&as_1_1(net), &valid).err().map(|e| e.to_string());
        done.push(Applied { action, error });
    }
    done
}

/// The chain's DEL (without a netns) of each attachment a leaked lease of `net` names.
fn del_leased(rt: &Runtime, snap: &Snapshot, findings: &[Finding], net: &Network) -> Vec<Applied> {
    let mut seen = BTreeSet::new();
    let mut done = Vec::new();
    for f in findings
        .iter()
        .filter(|f| f.kind == "lease" && f.network.as_deref() == Some(net.name()))
    {
        let Some(lease) = snap
            .leases
            .iter()
            .find(|l| l.path.display().to_string() == f.object)
        else {
            continue;
        };
        let owner = &lease.owner;
        if owner.ifname.is_empty() || !seen.insert(owner.clone()) {
            continue;
        }
        let att = Attachment::new(&owner.container_id, "", &owner.ifname);
        done.push(Applied {
            action: format!(
                "DEL of {} container {} interface {} (no netns), named by lease {}",
                net.name(),
                owner.container_id,
                owner.ifname,
                f.object
            ),
            error: rt.del(net, &att).err().map(|e| e.to_string()),
        });
    }
    done
}

/// The network at spec 1.1.0, so its plugins receive GC.
fn as_1_1(net: &Network) -> Network {
    let mut n = net.clone();
    n.version = cni_runtime::SpecVersion::V1_1_0;
    n
}
