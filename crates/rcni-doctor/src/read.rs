//! Reading a node's CNI state for the audit, in the calling thread's network namespace:
//! the result cache, the configs, host-local's lease directories (the default one and every
//! `dataDir` a config names), the host links, the nf_tables tables rcni and the Go plugins
//! write tagged rules into, and tuning's backup directories. Read-only. Every name read here
//! is cni-attribution's.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cni_attribution::{names, recognise, AttachmentId};
use cni_linux::rtnl::link::Link;
use cni_linux::{Handle, NetNs};
use cni_nft::{Family, Nft};
use cni_runtime::{CacheEntry, Network, ResultCache};
use cni_types::RawObject;

use super::audit::{Backup, HostLink, Lease, Snapshot, TaggedRule};

/// A string key of a plugin's `ipam` object, or of the plugin itself.
fn key_of(plugin: &RawObject, ipam: bool, key: &str) -> Option<String> {
    if ipam {
        let inner: RawObject = plugin.decode("ipam").ok().flatten()?;
        inner.decode(key).ok().flatten()
    } else {
        plugin.decode(key).ok().flatten()
    }
}

fn dirs_from_configs(
    networks: &[Network],
    default: &str,
    plugin_type: &str,
    ipam: bool,
) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(default)];
    for n in networks {
        for p in n.plugins() {
            let t = if ipam {
                key_of(p, true, "type")
            } else {
                key_of(p, false, "type")
            };
            if t.as_deref() != Some(plugin_type) {
                continue;
            }
            if let Some(d) = key_of(p, ipam, "dataDir").filter(|d| !d.is_empty()) {
                dirs.push(PathBuf::from(d));
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

fn leases_in(dir: &Path) -> Vec<Lease> {
    let mut out = Vec::new();
    let Ok(nets) = std::fs::read_dir(dir) else {
        return out;
    };
    for net in nets.flatten().filter(|e| e.path().is_dir()) {
        let network = net.file_name().to_string_lossy().into_owned();
        let Ok(files) = std::fs::read_dir(net.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.parse::<IpAddr>().is_err() {
                continue;
            }
            let Ok(content) = std::fs::read_to_string(f.path()) else {
                continue;
            };
            let (container_id, ifname) = recognise::host_local_lease(&content);
            out.push(Lease {
                path: f.path(),
                owner: AttachmentId::new(&network, container_id, ifname.unwrap_or_default()),
            });
        }
    }
    out
}

fn backups_in(dir: &Path) -> Vec<Backup> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|f| recognise::looks_like_backup_file(&f.to_string_lossy()))
                })
                .map(|path| Backup { path })
                .collect()
        })
        .unwrap_or_default()
}

/// Namespace ids of this namespace mapped to their names under /run/netns: each named
/// namespace's id asked by RTM_GETNSID (what `ip netns list-id` shows). Namespaces without
/// an id here are left out.
fn named_nsids() -> BTreeMap<i32, String> {
    let entries = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten();
    entries
        .filter_map(|e| {
            let id = NetNs::open(e.path()).ok()?.id().ok()??;
            Some((id, e.file_name().to_string_lossy().into_owned()))
        })
        .collect()
}

/// The link with `index` in the namespace at `path` (one RTM_GETLINK, not a dump); `None`
/// when there is none or the namespace cannot be read (it may vanish).
fn link_at(path: &Path, index: u32) -> Option<Link> {
    let ns = NetNs::open(path).ok()?;
    Handle::in_netns(&ns).ok()?.link_by_index(index).ok()
}

/// `<ifname> in <where>` for a veth's peer. The peer's namespace is identified by its
/// namespace id (resolved to a /run/netns name); a cached attachment's netns outside
/// /run/netns is searched by the peer's index. `None`: no namespace a path names holds it.
fn find_peer(
    veth: &Link,
    host: &[Link],
    nsids: &BTreeMap<i32, String>,
    cache: &[CacheEntry],
) -> Option<String> {
    let peer_index = veth.link?;
    let is_peer = |l: &Link| l.index == peer_index && l.link == Some(veth.index);
    let Some(nsid) = veth.link_netnsid else {
        return host
            .iter()
            .find(|l| is_peer(l))
            .map(|p| format!("{} in this namespace", p.name));
    };
    if let Some(name) = nsids.get(&nsid) {
        let path = Path::new("/run/netns").join(name);
        return link_at(&path, peer_index)
            .filter(is_peer)
            .map(|p| format!("{} in {}", p.name, path.display()));
    }
    cache
        .iter()
        .map(|e| PathBuf::from(&e.netns))
        .filter(|p| !p.as_os_str().is_empty() && !p.starts_with("/run/netns"))
        .find_map(|p| {
            link_at(&p, peer_index)
                .filter(|l| is_peer(l) && l.link_netnsid.is_some())
                .map(|l| format!("{} in {}", l.name, p.display()))
        })
}

fn host_links(cache: &[CacheEntry]) -> Result<Vec<HostLink>, String> {
    let mut h = Handle::new().map_err(|e| format!("netlink: {e}"))?;
    let all = h.links().map_err(|e| format!("listing links: {e}"))?;
    let nsids = named_nsids();
    let name_of = |i: Option<u32>| {
        i.and_then(|i| all.iter().find(|l| l.index == i))
            .map(|l| l.name.clone())
    };
    Ok(all
        .iter()
        .filter(|l| l.kind.as_deref() == Some("veth"))
        .map(|l| HostLink {
            name: l.name.clone(),
            alias: l.alias.clone(),
            // Only an untagged veth needs its peer to be judged.
            peer: if l.alias.is_none() {
                find_peer(l, &all, &nsids, cache)
            } else {
                None
            },
            master: name_of(l.master),
        })
        .collect())
}

fn tagged_rules() -> Result<Vec<TaggedRule>, String> {
    let mut nft = Nft::new().map_err(|e| format!("nf_tables: {e}"))?;
    let mut out = Vec::new();
    for (family, table) in names::tagged_tables() {
        let family = Family::from(family);
        if !nft.table_exists(family, table).unwrap_or(false) {
            continue;
        }
        let chains = nft
            .list_chains(family, table)
            .map_err(|e| format!("listing {table}: {e}"))?;
        for chain in chains {
            let rules = nft
                .list_rules(family, table, &chain.name)
                .map_err(|e| format!("listing {table}/{}: {e}", chain.name))?;
            for r in rules {
                if let Some(comment) = r.comment {
                    out.push(TaggedRule {
                        place: format!("{family:?} {table}/{} handle {}", r.chain, r.handle),
                        comment,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Chains named like the Go plugins' ipMasq chains (`CNI-` and 24 hex digits) in the `nat`
/// tables iptables-nft keeps. iptables stores their rules' comments as x_tables matches that
/// nf_tables cannot show, so the chain name is the attribution.
fn go_masq_chains() -> Result<Vec<String>, String> {
    let mut nft = Nft::new().map_err(|e| format!("nf_tables: {e}"))?;
    let mut out = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        if !nft
            .table_exists(family, names::GO_NAT_TABLE)
            .unwrap_or(false)
        {
            continue;
        }
        let chains = nft
            .list_chains(family, names::GO_NAT_TABLE)
            .map_err(|e| format!("listing {family:?} nat: {e}"))?;
        out.extend(
            chains
                .into_iter()
                .map(|c| c.name)
                .filter(|n| recognise::is_go_masq_chain(n)),
        );
    }
    out.sort();
    out.dedup();
    Ok(out)
}

impl Snapshot {
    /// Reads the node. Kernel state that cannot be read is an error (an audit that silently
    /// skipped it would report a clean node).
    pub fn read(conf_dir: &Path, cache_dir: &Path) -> Result<Snapshot, String> {
        let networks = cni_runtime::discover(conf_dir)
            .map(|d| d.networks)
            .unwrap_or_default();
        let cache = ResultCache::new(cache_dir).attachments(None);
        let lease_dirs =
            dirs_from_configs(&networks, names::HOST_LOCAL_DATA_DIR, "host-local", true);
        let backup_dirs = dirs_from_configs(&networks, names::TUNING_DATA_DIR, "tuning", false);
        Ok(Snapshot {
            leases: lease_dirs.iter().flat_map(|d| leases_in(d)).collect(),
            backups: backup_dirs.iter().flat_map(|d| backups_in(d)).collect(),
            links: host_links(&cache)?,
            rules: tagged_rules()?,
            go_masq_chains: go_masq_chains()?,
            cache,
            networks,
        })
    }
}
