//! The leak audit of `rcni doctor`: what a node's CNI state holds that no live attachment
//! owns. The runtime's result cache (libcni's format, shared by containerd, CRI-O, podman
//! and rcni) is the list of live attachments; every other object is judged against it:
//!
//! - a cache entry whose netns path is gone (the runtime never ran DEL),
//! - a host-local lease naming an attachment that has no cache entry,
//! - a host veth tagged by rcni (interface alias, or the temporary creation name) for an
//!   attachment that has no cache entry,
//! - an untagged host veth (the Go plugins tag nothing) that no cached result names, or whose
//!   peer is in no namespace a netns path names: reported with the command that would remove
//!   it, but never removed by `--fix`, since nothing ties it to a CNI attachment,
//! - an nf_tables rule whose comment tags an attachment that has no cache entry (rcni's and
//!   the Go plugins' nftables layouts use the same tags),
//! - a tuning backup of an attachment that has no cache entry,
//! - a Go ipMasq chain (`CNI-<sha512(network + container ID)>`) that no cached attachment
//!   would have made: reported, never removed by `--fix` (Go's DEL removes it only with the
//!   pod's netns, and no GC of Go 1.1.1 knows it).
//!
//! Every name and tag is cni-attribution's (`AttachmentId` derives them, `recognise` reads
//! them back). Reading the node (`Snapshot::read`) is kept apart from judging it (`judge`), so
//! the rules are unit-tested without a kernel. Nothing here changes the node; `fix.rs` does.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use cni_attribution::recognise::{
    is_temp_link_of, looks_like_temp_link, network_in_comment, tag_prefix,
};
use cni_attribution::{names, AttachmentId};
use cni_runtime::{CacheEntry, Network};

/// One leaked object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// `cache-netns-gone`, `lease`, `veth`, `nft-rule`, `tuning-backup`, `sandbox-netns-gone`.
    pub kind: &'static str,
    /// The object: a file path, an interface name, `table/chain handle N`.
    pub object: String,
    pub why: String,
    /// The network whose DEL or GC removes it, when known.
    pub network: Option<String>,
    /// The command that removes it.
    pub remedy: String,
}

/// A host-local lease file: `<dataDir>/<network>/<ip>`, and the attachment it names (the
/// interface name is empty in leases of old Go versions, which hold the container ID alone).
#[derive(Debug, Clone)]
pub struct Lease {
    pub path: PathBuf,
    pub owner: AttachmentId,
}

/// A host link with its rcni attribution.
#[derive(Debug, Clone)]
pub struct HostLink {
    pub name: String,
    pub alias: Option<String>,
    /// Where the veth's peer was found: `<ifname> in <netns path>`; `None` when no namespace
    /// that a netns path (under /run/netns, or of a cached attachment) names holds it.
    pub peer: Option<String>,
    /// The bridge the veth is enslaved to.
    pub master: Option<String>,
}

/// A tagged nf_tables rule.
#[derive(Debug, Clone)]
pub struct TaggedRule {
    pub place: String,
    pub comment: String,
}

/// A tuning backup file ([`names::backup_file_name`]). Both parts may contain `_`, so it is
/// matched against the names the cached attachments would have, not split.
#[derive(Debug, Clone)]
pub struct Backup {
    pub path: PathBuf,
}

/// What the node holds.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub cache: Vec<CacheEntry>,
    pub networks: Vec<Network>,
    pub leases: Vec<Lease>,
    pub links: Vec<HostLink>,
    pub rules: Vec<TaggedRule>,
    pub backups: Vec<Backup>,
    /// Names of chains shaped like the Go plugins' ipMasq chains.
    pub go_masq_chains: Vec<String>,
}

fn gc_remedy(network: &Option<String>) -> String {
    match network {
        Some(n) => {
            format!("rcni doctor --fix (GC of network {n:?} keeping every cached attachment)")
        }
        None => "none: no network config names it, remove it by hand after checking".into(),
    }
}

/// Names of the host-side interfaces (no `sandbox`) in a cached result.
fn host_interfaces(result: &serde_json::Value) -> Vec<String> {
    result
        .get("interfaces")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter(|i| {
            i.get("sandbox")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .is_empty()
        })
        .filter_map(|i| i.get("name")?.as_str().map(String::from))
        .collect()
}

/// A veth without an rcni tag (made by the Go plugins, or by something that is not CNI):
/// reported when no cached result names it, never attributed to a network, so `--fix` leaves
/// it alone.
fn untagged_veth(link: &HostLink, named: &BTreeSet<String>, s: &Snapshot) -> Option<Finding> {
    if named.contains(&link.name) {
        return None;
    }
    let bridge_net = link.master.as_ref().and_then(|m| {
        s.networks
            .iter()
            .find(|n| {
                n.plugins().iter().any(|p| {
                    p.decode::<String>("type").ok().flatten().as_deref() == Some("bridge")
                        && p.decode::<String>("bridge")
                            .ok()
                            .flatten()
                            .unwrap_or_else(|| "cni0".into())
                            == *m
                })
            })
            .map(|n| n.name().to_string())
    });
    let mut why = match &link.peer {
        Some(peer) => format!("no rcni tag and no cached result names it; its peer is {peer}"),
        None => "no rcni tag, no cached result names it, and its peer is in no namespace a netns path names (the sandbox's netns file is gone while something still holds the namespace)".into(),
    };
    if let Some(m) = &link.master {
        why.push_str(&format!("; enslaved to {m}"));
        if let Some(n) = bridge_net {
            why.push_str(&format!(" (the bridge of network {n:?})"));
        }
    }
    Some(Finding {
        kind: "veth-unattributed",
        object: link.name.clone(),
        why,
        network: None,
        remedy: format!(
            "not removed by --fix: nothing attributes it to a CNI attachment; once you know it is unused: ip link del {}",
            link.name
        ),
    })
}

/// What the result cache says is alive, in the forms the objects on the node carry.
struct Live<'a> {
    ids: BTreeSet<AttachmentId>,
    backups: BTreeSet<String>,
    tags: BTreeSet<String>,
    temp_names: BTreeSet<String>,
    named_by_results: BTreeSet<String>,
    networks: &'a [Network],
}

impl<'a> Live<'a> {
    fn of(s: &'a Snapshot) -> Live<'a> {
        let ids: BTreeSet<AttachmentId> = s.cache.iter().map(CacheEntry::id).collect();
        Live {
            backups: ids
                .iter()
                .map(|a| names::backup_file_name(&a.container_id, &a.ifname))
                .collect(),
            tags: ids.iter().map(AttachmentId::prefix).collect(),
            temp_names: ids.iter().map(AttachmentId::temp_link_name).collect(),
            named_by_results: s
                .cache
                .iter()
                .filter_map(|e| e.result.as_ref())
                .flat_map(host_interfaces)
                .collect(),
            ids,
            networks: &s.networks,
        }
    }

    /// A network the node's config dir defines.
    fn known(&self, net: &str) -> bool {
        self.networks.iter().any(|n| n.name() == net)
    }
}

/// Judges the snapshot.
pub fn judge(s: &Snapshot) -> Vec<Finding> {
    let live = Live::of(s);
    let mut out = stale_cache_entries(s);
    out.extend(stale_leases(s, &live));
    out.extend(stale_links(s, &live));
    out.extend(stale_rules(s, &live));
    out.extend(stale_go_masq_chains(s, &live));
    out.extend(stale_backups(s, &live));
    out
}

/// Cache entries whose netns is gone: the runtime never ran DEL.
fn stale_cache_entries(s: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for e in &s.cache {
        if !e.netns.as_os_str().is_empty() && !e.netns.exists() {
            out.push(Finding {
                kind: "cache-netns-gone",
                object: format!("{}-{}-{}", e.network_name, e.container_id, e.ifname),
                why: format!(
                    "its netns {} no longer exists: the runtime never ran DEL",
                    e.netns.display()
                ),
                network: Some(e.network_name.clone()),
                remedy: format!(
                    "rcni del {} {} --container-id {} --ifname {}",
                    e.network_name,
                    e.netns.display(),
                    e.container_id,
                    e.ifname
                ),
            });
        }
    }
    out
}

/// Leases of attachments the cache does not know.
fn stale_leases(s: &Snapshot, live: &Live) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in &s.leases {
        if live.ids.contains(&l.owner) {
            continue;
        }
        let network = live
            .known(&l.owner.network)
            .then(|| l.owner.network.clone());
        let remedy = match &network {
            Some(n) => format!(
                "rcni doctor --fix (GC of network {n:?} keeping every cached attachment; below spec 1.1.0, DEL of container {:?} interface {:?})",
                l.owner.container_id, l.owner.ifname
            ),
            None => gc_remedy(&network),
        };
        out.push(Finding {
            kind: "lease",
            object: l.path.display().to_string(),
            why: format!(
                "held for container {:?} interface {:?}, which has no cached attachment",
                l.owner.container_id, l.owner.ifname
            ),
            remedy,
            network,
        });
    }
    out
}

/// Tagged or temporarily named links of attachments the cache does not know, and veths nothing attributes.
fn stale_links(s: &Snapshot, live: &Live) -> Vec<Finding> {
    let mut out = Vec::new();
    for link in &s.links {
        let network = match link.alias.as_deref().and_then(tag_prefix) {
            Some(p) if live.tags.contains(p) => continue,
            Some(_) => link.alias.as_deref().and_then(network_in_comment),
            None if !looks_like_temp_link(&link.name) => {
                if let Some(f) = untagged_veth(link, &live.named_by_results, s) {
                    out.push(f);
                }
                continue;
            }
            None => {
                // A temporary creation name: `rc<hash4(net)><hash9>` of a killed ADD.
                let of_network = s
                    .networks
                    .iter()
                    .find(|n| is_temp_link_of(&link.name, n.name()));
                match of_network {
                    Some(n) if !live.temp_names.contains(&link.name) => Some(n.name().to_string()),
                    _ => continue,
                }
            }
        };
        let network = network.filter(|n| live.known(n));
        out.push(Finding {
            kind: "veth",
            object: link.name.clone(),
            why: "tagged by rcni for an attachment that has no cached result".into(),
            remedy: gc_remedy(&network),
            network,
        });
    }
    out
}

/// nf_tables rules tagged for attachments the cache does not know.
fn stale_rules(s: &Snapshot, live: &Live) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in &s.rules {
        let Some(p) = tag_prefix(&r.comment) else {
            continue;
        };
        if live.tags.contains(p) {
            continue;
        }
        let network = network_in_comment(&r.comment).filter(|n| live.known(n));
        out.push(Finding {
            kind: "nft-rule",
            object: r.place.clone(),
            why: format!(
                "comment {:?} tags an attachment that has no cached result",
                r.comment
            ),
            remedy: gc_remedy(&network),
            network,
        });
    }
    out
}

/// Go ipMasq chains no cached attachment would have made.
fn stale_go_masq_chains(s: &Snapshot, live: &Live) -> Vec<Finding> {
    let mut out = Vec::new();
    let live_chains: BTreeSet<String> = live.ids.iter().map(AttachmentId::go_masq_chain).collect();
    for chain in s
        .go_masq_chains
        .iter()
        .filter(|c| !live_chains.contains(*c))
    {
        // Name the attachment when a lease still names one whose chain this is.
        let owner = s
            .leases
            .iter()
            .find(|l| l.owner.go_masq_chain() == *chain)
            .map(|l| {
                format!(
                    " (network {:?}, container {:?}, from its lease)",
                    l.owner.network, l.owner.container_id
                )
            })
            .unwrap_or_default();
        out.push(Finding {
            kind: "go-masq-chain",
            object: format!("nat/{chain}"),
            why: format!("a Go ipMasq chain that no cached attachment would have made{owner}"),
            network: None,
            remedy: format!(
                "not removed by --fix (Go's DEL removes it only with the pod's netns): iptables -t nat -S POSTROUTING | grep -- '-j {chain}' and delete that rule with -D, then iptables -t nat -F {chain}; iptables -t nat -X {chain}"
            ),
        });
    }
    out
}

/// Tuning backups no cached attachment would have written.
fn stale_backups(s: &Snapshot, live: &Live) -> Vec<Finding> {
    let mut out = Vec::new();
    for b in &s.backups {
        let file = b
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if live.backups.contains(&file) {
            continue;
        }
        let network = s
            .networks
            .iter()
            .find(|n| n.plugin_types().iter().any(|t| t == "tuning"))
            .map(|n| n.name().to_string());
        out.push(Finding {
            kind: "tuning-backup",
            object: b.path.display().to_string(),
            why: "a tuning backup that no cached attachment would have written".into(),
            remedy: match &network {
                // Go 1.1.1's tuning has no GC and its DEL without the netns keeps the backup:
                // the interface it would restore is gone with its namespace.
                Some(_) => format!(
                    "{}; with plugins below spec 1.1.0 nothing can restore it: rm {}",
                    gc_remedy(&network),
                    b.path.display()
                ),
                None => gc_remedy(&network),
            },
            network,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(net: &str, cid: &str, ifname: &str, netns: &str) -> CacheEntry {
        CacheEntry {
            container_id: cid.into(),
            config: Vec::new(),
            ifname: ifname.into(),
            network_name: net.into(),
            netns: netns.into(),
            cni_args: Vec::new(),
            capability_args: Default::default(),
            result: None,
        }
    }

    fn net(name: &str) -> Network {
        Network::from_list_bytes(
            format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}},{{"type":"tuning"}}]}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    fn host_link(name: &str, alias: Option<String>) -> HostLink {
        HostLink {
            name: name.into(),
            alias,
            peer: Some("eth0 in /run/netns/x".into()),
            master: None,
        }
    }

    #[test]
    fn an_untagged_veth_is_reported_unless_a_cached_result_names_it_and_never_attributed() {
        let mut e = entry("n", "c1", "eth0", "/proc/self/ns/net");
        e.result = Some(serde_json::json!({"interfaces": [
            {"name": "vethlive"}, {"name": "eth0", "sandbox": "/run/netns/x"}]}));
        let mut gone = host_link("vethgone", None);
        gone.peer = None;
        gone.master = Some("cni0".into());
        let s = Snapshot {
            cache: vec![e],
            networks: vec![net("n")],
            links: vec![
                host_link("vethlive", None),
                host_link("vethorph", None),
                gone,
            ],
            ..Default::default()
        };
        let f = judge(&s);
        assert_eq!(
            kinds(&f),
            vec![
                ("veth-unattributed", "vethorph".to_string()),
                ("veth-unattributed", "vethgone".to_string()),
            ]
        );
        assert!(
            f.iter().all(|f| f.network.is_none()),
            "--fix must leave them"
        );
        assert!(
            f[0].why.contains("its peer is eth0 in /run/netns/x"),
            "{}",
            f[0].why
        );
        assert!(
            f[1].why.contains("no namespace a netns path names"),
            "{}",
            f[1].why
        );
        assert!(
            f[1].why.contains("(the bridge of network \"n\")"),
            "{}",
            f[1].why
        );
        assert!(
            f[1].remedy.ends_with("ip link del vethgone"),
            "{}",
            f[1].remedy
        );
    }

    fn kinds(f: &[Finding]) -> Vec<(&'static str, String)> {
        f.iter().map(|f| (f.kind, f.object.clone())).collect()
    }

    #[test]
    fn only_objects_without_a_cached_attachment_are_leaks() {
        let live = AttachmentId::new("n", "c1", "eth0");
        let dead = AttachmentId::new("n", "c2", "eth0");
        let s = Snapshot {
            cache: vec![entry("n", "c1", "eth0", "/proc/self/ns/net")],
            networks: vec![net("n")],
            leases: vec![
                Lease {
                    path: "/l/n/198.18.0.2".into(),
                    owner: AttachmentId::new("n", "c1", "eth0"),
                },
                Lease {
                    path: "/l/n/198.18.0.3".into(),
                    owner: AttachmentId::new("n", "c2", "eth0"),
                },
            ],
            links: vec![
                host_link("veth1", Some(live.comment())),
                host_link("veth2", Some(dead.comment())),
                host_link(&dead.temp_link_name(), None),
                host_link(&live.temp_link_name(), None),
            ],
            rules: vec![
                TaggedRule {
                    place: "t/c handle 1".into(),
                    comment: live.comment(),
                },
                TaggedRule {
                    place: "t/c handle 2".into(),
                    comment: dead.comment(),
                },
                TaggedRule {
                    place: "t/c handle 3".into(),
                    comment: "someone else's".into(),
                },
            ],
            backups: vec![
                Backup {
                    path: "/b/c1_eth0.json".into(),
                },
                Backup {
                    path: "/b/c2_eth0.json".into(),
                },
            ],
            go_masq_chains: Vec::new(),
        };
        let f = judge(&s);
        assert_eq!(
            kinds(&f),
            vec![
                ("lease", "/l/n/198.18.0.3".to_string()),
                ("veth", "veth2".to_string()),
                ("veth", dead.temp_link_name()),
                ("nft-rule", "t/c handle 2".to_string()),
                ("tuning-backup", "/b/c2_eth0.json".to_string()),
            ]
        );
        assert!(f.iter().all(|f| f.network.as_deref() == Some("n")));
    }

    #[test]
    fn a_go_masq_chain_no_cached_attachment_would_make_is_reported() {
        let chain = |cid: &str| AttachmentId::new("n", cid, "eth0").go_masq_chain();
        let s = Snapshot {
            cache: vec![entry("n", "live", "eth0", "/proc/self/ns/net")],
            leases: vec![Lease {
                path: "/l/n/198.18.0.9".into(),
                owner: AttachmentId::new("n", "gone", "eth0"),
            }],
            go_masq_chains: vec![chain("live"), chain("gone")],
            ..Default::default()
        };
        let all = judge(&s);
        let f: Vec<&Finding> = all.iter().filter(|f| f.kind == "go-masq-chain").collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].object, format!("nat/{}", chain("gone")));
        assert!(f[0].why.contains("container \"gone\""), "{}", f[0].why);
        assert!(f[0].network.is_none());
    }

    #[test]
    fn a_cache_entry_of_a_vanished_netns_is_reported_with_its_del() {
        let s = Snapshot {
            cache: vec![entry("n", "c1", "eth0", "/run/netns/rcni-doctor-unit-gone")],
            ..Default::default()
        };
        let f = judge(&s);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, "cache-netns-gone");
        assert!(f[0].remedy.starts_with("rcni del n "), "{}", f[0].remedy);
    }

    #[test]
    fn a_leak_of_an_unknown_network_has_no_automatic_remedy() {
        let s = Snapshot {
            leases: vec![Lease {
                path: "/l/x/1".into(),
                owner: AttachmentId::new("x", "c", "eth0"),
            }],
            ..Default::default()
        };
        let f = judge(&s);
        assert_eq!(f[0].network, None);
        assert!(f[0].remedy.starts_with("none"));
    }
}
