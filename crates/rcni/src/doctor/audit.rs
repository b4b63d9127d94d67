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
//! Reading the node (`Snapshot::read`) is kept apart from judging it (`judge`), so the rules
//! are unit-tested without a kernel. Nothing here changes the node; `fix.rs` does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use cni_plugins::common::nft_tag::AttachmentTag;
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

/// A lease file: `<dataDir>/<network>/<ip>` holding `<containerID>\r\n<ifname>`.
#[derive(Debug, Clone)]
pub struct Lease {
    pub path: PathBuf,
    pub network: String,
    pub container_id: String,
    pub ifname: String,
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

/// A tuning backup file `<dir>/<containerID>_<ifname>.json`. Both parts may contain `_`, so
/// it is matched against the names the cached attachments would have, not split.
#[derive(Debug, Clone)]
pub struct Backup {
    pub path: PathBuf,
}

/// The backup file name of an attachment (the Go plugin's and rcni's).
fn backup_name(container_id: &str, ifname: &str) -> String {
    format!("{container_id}_{ifname}.json")
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

/// The Go plugins' ipMasq chain of an attachment (`utils.FormatChainName`): `CNI-` and the
/// first 24 hex digits of SHA-512 over the network name and container ID.
pub fn go_masq_chain(network: &str, container_id: &str) -> String {
    format!("CNI-{}", &go_chain_hash(network, container_id)[..24])
}

/// Hex SHA-512 over network name and container ID: the Go plugins name an attachment's
/// iptables chains with its first digits (`CNI-` + 24 for ipMasq, `CNI-DN-` + 21 for portmap).
pub fn go_chain_hash(network: &str, container_id: &str) -> String {
    use sha2::{Digest, Sha512};
    Sha512::digest(format!("{network}{container_id}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `CNI-` and exactly 24 lowercase hex digits.
pub fn is_go_masq_chain(name: &str) -> bool {
    name.strip_prefix("CNI-").is_some_and(|h| {
        h.len() == 24
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The network named in a tag comment (`<prefix>, net: <name>, if: ..., id: ...`).
fn network_in_comment(comment: &str) -> Option<String> {
    let rest = comment.split(", net: ").nth(1)?;
    Some(rest.split(", if: ").next()?.to_string())
}

/// `<16 hex>-<16 hex>` at the start of a comment or alias.
fn tag_prefix(text: &str) -> Option<&str> {
    let p = text.get(..33)?;
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    (p.as_bytes()[16] == b'-' && hex(&p[..16]) && hex(&p[17..])).then_some(p)
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

/// Judges the snapshot.
pub fn judge(s: &Snapshot) -> Vec<Finding> {
    let live: BTreeSet<(String, String, String)> = s
        .cache
        .iter()
        .map(|e| {
            (
                e.network_name.clone(),
                e.container_id.clone(),
                e.ifname.clone(),
            )
        })
        .collect();
    let live_backups: BTreeSet<String> = s
        .cache
        .iter()
        .map(|e| backup_name(&e.container_id, &e.ifname))
        .collect();
    let tags: BTreeSet<String> = s
        .cache
        .iter()
        .map(|e| AttachmentTag::new(&e.network_name, &e.container_id, &e.ifname).prefix())
        .collect();
    let temp_names: BTreeSet<String> = s
        .cache
        .iter()
        .map(|e| AttachmentTag::new(&e.network_name, &e.container_id, &e.ifname).temp_link_name())
        .collect();
    let known = |net: &str| s.networks.iter().any(|n| n.name() == net);
    let named_by_results: BTreeSet<String> = s
        .cache
        .iter()
        .filter_map(|e| e.result.as_ref())
        .flat_map(host_interfaces)
        .collect();
    let mut out = Vec::new();

    for e in &s.cache {
        if !e.netns.is_empty() && !Path::new(&e.netns).exists() {
            out.push(Finding {
                kind: "cache-netns-gone",
                object: format!("{}-{}-{}", e.network_name, e.container_id, e.ifname),
                why: format!(
                    "its netns {} no longer exists: the runtime never ran DEL",
                    e.netns
                ),
                network: Some(e.network_name.clone()),
                remedy: format!(
                    "rcni del {} {} --container-id {} --ifname {}",
                    e.network_name, e.netns, e.container_id, e.ifname
                ),
            });
        }
    }
    for l in &s.leases {
        if live.contains(&(l.network.clone(), l.container_id.clone(), l.ifname.clone())) {
            continue;
        }
        let network = known(&l.network).then(|| l.network.clone());
        let remedy = match &network {
            Some(n) => format!(
                "rcni doctor --fix (GC of network {n:?} keeping every cached attachment; below spec 1.1.0, DEL of container {:?} interface {:?})",
                l.container_id, l.ifname
            ),
            None => gc_remedy(&network),
        };
        out.push(Finding {
            kind: "lease",
            object: l.path.display().to_string(),
            why: format!(
                "held for container {:?} interface {:?}, which has no cached attachment",
                l.container_id, l.ifname
            ),
            remedy,
            network,
        });
    }
    for link in &s.links {
        let network = match link.alias.as_deref().and_then(tag_prefix) {
            Some(p) if tags.contains(p) => continue,
            Some(_) => link.alias.as_deref().and_then(network_in_comment),
            None if link.name.len() != 15 || !link.name.starts_with("rc") => {
                if let Some(f) = untagged_veth(link, &named_by_results, s) {
                    out.push(f);
                }
                continue;
            }
            None => {
                // A temporary creation name: `rc<hash4(net)><hash9>` of a killed ADD.
                let of_network = s.networks.iter().find(|n| {
                    link.name.len() == 15
                        && link
                            .name
                            .starts_with(&AttachmentTag::temp_link_network_prefix(n.name()))
                });
                match of_network {
                    Some(n) if !temp_names.contains(&link.name) => Some(n.name().to_string()),
                    _ => continue,
                }
            }
        };
        let network = network.filter(|n| known(n));
        out.push(Finding {
            kind: "veth",
            object: link.name.clone(),
            why: "tagged by rcni for an attachment that has no cached result".into(),
            remedy: gc_remedy(&network),
            network,
        });
    }
    for r in &s.rules {
        let Some(p) = tag_prefix(&r.comment) else {
            continue;
        };
        if tags.contains(p) {
            continue;
        }
        let network = network_in_comment(&r.comment).filter(|n| known(n));
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
    let live_chains: BTreeSet<String> = s
        .cache
        .iter()
        .map(|e| go_masq_chain(&e.network_name, &e.container_id))
        .collect();
    for chain in s
        .go_masq_chains
        .iter()
        .filter(|c| !live_chains.contains(*c))
    {
        // Name the attachment when a lease still names one whose chain this is.
        let owner = s
            .leases
            .iter()
            .find(|l| go_masq_chain(&l.network, &l.container_id) == *chain)
            .map(|l| {
                format!(
                    " (network {:?}, container {:?}, from its lease)",
                    l.network, l.container_id
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
    for b in &s.backups {
        let file = b
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if live_backups.contains(&file) {
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
        let live = AttachmentTag::new("n", "c1", "eth0");
        let dead = AttachmentTag::new("n", "c2", "eth0");
        let s = Snapshot {
            cache: vec![entry("n", "c1", "eth0", "/proc/self/ns/net")],
            networks: vec![net("n")],
            leases: vec![
                Lease {
                    path: "/l/n/198.18.0.2".into(),
                    network: "n".into(),
                    container_id: "c1".into(),
                    ifname: "eth0".into(),
                },
                Lease {
                    path: "/l/n/198.18.0.3".into(),
                    network: "n".into(),
                    container_id: "c2".into(),
                    ifname: "eth0".into(),
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
    fn go_masq_chains_are_named_as_go_names_them() {
        // Go 1.1.1's bridge made this chain for network "tqnet", container "tqcid".
        assert_eq!(
            go_masq_chain("tqnet", "tqcid"),
            "CNI-ffee140d57bae23f4cbb0442"
        );
        assert!(is_go_masq_chain("CNI-ffee140d57bae23f4cbb0442"));
        assert!(!is_go_masq_chain("CNI-DN-ffee140d57bae23f4cbb0"));
        assert!(!is_go_masq_chain("CNI-HOSTPORT-DNAT"));
        let s = Snapshot {
            cache: vec![entry("n", "live", "eth0", "/proc/self/ns/net")],
            leases: vec![Lease {
                path: "/l/n/198.18.0.9".into(),
                network: "n".into(),
                container_id: "gone".into(),
                ifname: "eth0".into(),
            }],
            go_masq_chains: vec![go_masq_chain("n", "live"), go_masq_chain("n", "gone")],
            ..Default::default()
        };
        let all = judge(&s);
        let f: Vec<&Finding> = all.iter().filter(|f| f.kind == "go-masq-chain").collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].object, format!("nat/{}", go_masq_chain("n", "gone")));
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
                network: "x".into(),
                container_id: "c".into(),
                ifname: "eth0".into(),
            }],
            ..Default::default()
        };
        let f = judge(&s);
        assert_eq!(f[0].network, None);
        assert!(f[0].remedy.starts_with("none"));
    }
}
