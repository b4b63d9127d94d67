//! Reclaiming the attachments of pod sandboxes the runtime forgot, for runtimes that never send
//! CNI GC (containerd before 2.0): its state wiped, a crash between ADD and its bookkeeping, a
//! reboot with `/var/lib` kept.
//!
//! Every `--gc-interval` the agent asks the CRI runtime which sandboxes exist
//! (`ListPodSandbox`, any state). An attachment of the agent's network ([`NETWORK_NAME`]) in
//! the libcni result cache is *forgotten* when its container ID names none of them and its
//! cache entry is at least `--gc-grace` old. Age is the entry file's modification time: libcni
//! writes the entry once, when the chain's ADD has succeeded, and never rewrites it, so the age
//! is the time since the attachment came up; a sandbox the runtime is still creating (its ADD
//! done, its record not yet listed) is younger than the grace.
//!
//! A round, under the network lock of `cni-runtime` held exclusively ([`Runtime::gc_picked`]):
//! every forgotten attachment gets its chain DEL as the runtime would have run it (the config,
//! netns, CNI_ARGS and capability args cached at its ADD; a netns that is gone is fine), then
//! every plugin of the current conflist gets GC (SPEC.md, Section 3: "Garbage-collecting a
//! network")
//! with a valid list of:
//! - every other cached attachment of the network;
//! - every sandbox the runtime knows, with each interface name the cache holds for the
//!   network and `eth0` (a live sandbox is never collected, even without a cache entry);
//! - the owners of host-local leases younger than the grace, read right before the plugins'
//!   GC: the runtime's libcni does not take `cni-runtime`'s lock, so an ADD may be under way
//!   with its lease written and its cache entry not yet. An ADD that writes its lease (or
//!   creates its veth) in the few milliseconds between that read and the plugins' GC is not
//!   protected: a plugin of the chain may remove what it has made so far, and the ADD fails
//!   or loses its lease. Only a lock the runtime's own ADDs honour could close that window.
//!
//! If the CRI call fails, nothing is reclaimed that round. The plugin runs are blocking: the
//! round runs them on tokio's blocking pool.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cni_runtime::{AttachmentId, CacheEntry, GcReport, Network, Runtime, RuntimeError};
use tokio::sync::watch;

use crate::agent;
use crate::cni_conf::NETWORK_NAME;
use crate::cri::{CriError, SandboxLister};
use crate::health::{lock, SharedHealth};

/// The interface name CRI runtimes give a sandbox's first network.
const DEFAULT_IFNAME: &str = "eth0";

/// Where the GC looks and how often.
#[derive(Debug, Clone)]
pub struct GcConfig {
    /// The runtime's libcni cache directory (`--cni-cache-dir`).
    pub cache_dir: PathBuf,
    /// The conflist the agent writes (its plugins get GC).
    pub conflist: PathBuf,
    /// Where the plugins are.
    pub bin_dir: PathBuf,
    /// host-local's `dataDir` in the conflist.
    pub ipam_dir: PathBuf,
    /// Time between rounds.
    pub interval: Duration,
    /// The age below which an attachment (or a lease) is never collected.
    pub grace: Duration,
}

/// A round that could not run.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("cannot ask the runtime which sandboxes exist, nothing reclaimed: {0}")]
    Cri(#[from] CriError),
    #[error("cannot load the conflist {path}: {source}")]
    Conflist {
        path: PathBuf,
        #[source]
        source: RuntimeError,
    },
    #[error("GC of network {NETWORK_NAME}: {0}")]
    Runtime(#[source] RuntimeError),
    #[error("the GC task died: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Runs a round every `cfg.interval` until `shutdown` turns true.
pub async fn run(
    cfg: GcConfig,
    mut lister: impl SandboxLister,
    health: SharedHealth,
    mut shutdown: watch::Receiver<bool>,
) {
    log::info!(
        "GC of forgotten sandboxes every {} s (grace {} s, cache {})",
        cfg.interval.as_secs(),
        cfg.grace.as_secs(),
        cfg.cache_dir.display()
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = agent::stopped(&mut shutdown) => return,
        }
        let started = std::time::Instant::now();
        match round(&cfg, &mut lister).await {
            Ok(report) => {
                log_report(&report, started.elapsed());
                let mut h = lock(&health);
                h.gc_runs += 1;
                h.gc_reclaimed += report.deleted.len() as u64;
                h.gc_errors += (report.failed.len() + report.plugin_errors.len()) as u64;
            }
            Err(e) => {
                log::warn!("GC: {e}");
                lock(&health).gc_errors += 1;
            }
        }
    }
}

/// One round: the runtime's sandboxes, then the reclaim on the blocking pool.
pub async fn round(cfg: &GcConfig, lister: &mut impl SandboxLister) -> Result<GcReport, GcError> {
    let known = lister.sandbox_ids().await?;
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || reclaim(&cfg, &known, SystemTime::now())).await?
}

/// Whether an attachment is forgotten: of no sandbox the runtime knows, and at least `grace`
/// old (`age` is `None` when it cannot be told: kept).
pub fn is_forgotten(
    entry: &CacheEntry,
    known: &HashSet<String>,
    age: Option<Duration>,
    grace: Duration,
) -> bool {
    !known.contains(&entry.container_id) && age.is_some_and(|age| age >= grace)
}

/// The reclaim itself (blocking: runs plugins).
fn reclaim(cfg: &GcConfig, known: &HashSet<String>, now: SystemTime) -> Result<GcReport, GcError> {
    let rt = Runtime::new(vec![cfg.bin_dir.clone()], &cfg.cache_dir);
    let net = Network::load_file(&cfg.conflist).map_err(|source| GcError::Conflist {
        path: cfg.conflist.clone(),
        source,
    })?;
    // The highest version the list offers and every plugin supports: GC needs 1.1.0.
    let net = rt.negotiate_version(&net).unwrap_or(net);
    let of_known_sandboxes = known_attachments(&rt, known);
    let age = |entry: &CacheEntry| {
        let path = rt
            .cache
            .path(&entry.network_name, &entry.attachment())
            .ok()?;
        let modified = std::fs::metadata(path).ok()?.modified().ok()?;
        now.duration_since(modified).ok()
    };
    // The leases are read last, right before the plugins' GC, to catch as many ADDs under
    // way as possible.
    rt.gc_picked(
        &net,
        |entry| is_forgotten(entry, known, age(entry), cfg.grace),
        || {
            let mut protected = young_lease_owners(&cfg.ipam_dir, cfg.grace, SystemTime::now());
            protected.extend(of_known_sandboxes);
            protected
        },
    )
    .map_err(GcError::Runtime)
}

/// Every sandbox the runtime knows, with each interface name of the network's cache entries and
/// the default one.
fn known_attachments(rt: &Runtime, known: &HashSet<String>) -> Vec<AttachmentId> {
    let ifnames: BTreeSet<String> = rt
        .cached_attachments(None)
        .into_iter()
        .filter(|e| e.network_name == NETWORK_NAME)
        .map(|e| e.ifname)
        .chain([DEFAULT_IFNAME.to_string()])
        .collect();
    known
        .iter()
        .flat_map(|id| {
            ifnames
                .iter()
                .map(move |ifname| AttachmentId::new(NETWORK_NAME, id, ifname))
        })
        .collect()
}

/// The owners of host-local leases younger than `grace` (ADDs that may be under way).
fn young_lease_owners(ipam_dir: &Path, grace: Duration, now: SystemTime) -> Vec<AttachmentId> {
    let leases =
        cni_ipam::DiskStore::new(ipam_dir, NETWORK_NAME).and_then(|store| store.lock()?.leases());
    let leases = match leases {
        Ok(leases) => leases,
        Err(e) => {
            log::debug!("GC: no host-local leases read: {e}");
            return Vec::new();
        }
    };
    leases
        .into_iter()
        .filter(|lease| {
            let modified = std::fs::metadata(&lease.path).and_then(|m| m.modified());
            modified.is_ok_and(|m| now.duration_since(m).map_or(true, |age| age < grace))
        })
        .filter_map(|lease| match lease.owner {
            cni_ipam::LeaseOwner::Attachment {
                container_id,
                ifname,
            } => Some(AttachmentId::new(NETWORK_NAME, container_id, ifname)),
            cni_ipam::LeaseOwner::Legacy { .. } => None,
        })
        .collect()
}

/// One line per reclaimed or failed attachment, one for the plugins' GC and the round's time.
fn log_report(report: &GcReport, took: Duration) {
    for entry in &report.deleted {
        let netns = match entry.netns.as_os_str().is_empty() {
            true => "none cached".to_string(),
            false => format!("{:?}", entry.netns),
        };
        log::info!(
            "GC: reclaimed {} {} of a sandbox the runtime does not know: chain DEL with the \
             cached config (netns {netns})",
            entry.container_id,
            entry.ifname,
        );
    }
    for (entry, e) in &report.failed {
        log::warn!(
            "GC: {} {} of a sandbox the runtime does not know: DEL failed, kept for the next \
             round: {e}",
            entry.container_id,
            entry.ifname
        );
    }
    for e in &report.plugin_errors {
        log::warn!("GC: plugin GC failed: {e}");
    }
    let level = if report.deleted.is_empty() {
        log::Level::Debug
    } else {
        log::Level::Info
    };
    if report.plugins_collected {
        log::log!(
            level,
            "GC: plugins collected with {} valid attachment(s); round took {} ms",
            report.valid.len(),
            took.as_millis()
        );
    } else {
        log::log!(
            level,
            "GC: no plugin GC (the version the conflist and its plugins share is below 1.1.0); round took {} ms",
            took.as_millis()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use cni_runtime::ResultCache;
    use serde_json::Value;

    /// A fake plugin: logs `<command> <container ID>` and keeps the stdin of GC.
    const FAKE_PLUGIN: &str = r#"#!/bin/sh
dir=$(dirname "$0")
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}'
  exit 0
fi
if [ "$CNI_COMMAND" = GC ]; then cat > "$dir/gc.json"; else cat > /dev/null; fi
echo "$CNI_COMMAND $CNI_CONTAINERID" >> "$dir/calls"
"#;

    struct FakeLister(Option<HashSet<String>>);

    impl SandboxLister for FakeLister {
        async fn sandbox_ids(&mut self) -> Result<HashSet<String>, CriError> {
            self.0.clone().ok_or_else(|| CriError::Call {
                socket: "/run/fake.sock".into(),
                call: "ListPodSandbox",
                source: Box::new(tonic::Status::unavailable("connection refused")),
            })
        }
    }

    struct Node {
        _dir: tempfile::TempDir,
        cfg: GcConfig,
    }

    const LIST: &str = r#"{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"rcni","plugins":[{"type":"fake"}]}"#;

    impl Node {
        fn new() -> Node {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            let cfg = GcConfig {
                cache_dir: root.join("cache"),
                conflist: root.join("conf/10-rcni.conflist"),
                bin_dir: root.join("bin"),
                ipam_dir: root.join("ipam"),
                interval: Duration::from_secs(1),
                grace: Duration::from_secs(300),
            };
            for d in [&cfg.bin_dir, &root.join("conf"), &cfg.ipam_dir.join("rcni")] {
                fs::create_dir_all(d).unwrap();
            }
            fs::write(&cfg.conflist, LIST).unwrap();
            let plugin = cfg.bin_dir.join("fake");
            fs::write(&plugin, FAKE_PLUGIN).unwrap();
            fs::set_permissions(&plugin, fs::Permissions::from_mode(0o755)).unwrap();
            Node { _dir: dir, cfg }
        }

        /// A cache entry of `network`/`id`/eth0 whose file is `age` old.
        fn attach(&self, network: &str, id: &str, age: Duration) {
            let entry = CacheEntry {
                container_id: id.into(),
                config: LIST.replace("rcni", network).into_bytes(),
                ifname: "eth0".into(),
                network_name: network.into(),
                netns: format!("/proc/1/ns/net-{id}").into(),
                ..CacheEntry::default()
            };
            let path = ResultCache::new(&self.cfg.cache_dir).store(&entry).unwrap();
            set_age(&path, age);
        }

        fn lease(&self, ip: &str, owner: &str, age: Duration) {
            let path = self.cfg.ipam_dir.join("rcni").join(ip);
            fs::write(&path, cni_ipam::lease_content(owner, "eth0")).unwrap();
            set_age(&path, age);
        }

        fn cached(&self) -> Vec<String> {
            let cache = ResultCache::new(&self.cfg.cache_dir);
            let mut names: Vec<String> = cache
                .attachments(None)
                .iter()
                .map(|e| format!("{}/{}", e.network_name, e.container_id))
                .collect();
            names.sort();
            names
        }

        fn calls(&self) -> Vec<String> {
            let text = fs::read_to_string(self.cfg.bin_dir.join("calls")).unwrap_or_default();
            text.lines().map(str::to_string).collect()
        }

        fn gc_valid(&self) -> Value {
            let text = fs::read_to_string(self.cfg.bin_dir.join("gc.json")).unwrap();
            serde_json::from_str::<Value>(&text).unwrap()["cni.dev/valid-attachments"].clone()
        }
    }

    fn set_age(path: &Path, age: Duration) {
        let file = fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    const OLD: Duration = Duration::from_secs(600);
    const YOUNG: Duration = Duration::from_secs(10);

    fn known(ids: &[&str]) -> Option<HashSet<String>> {
        Some(ids.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn forgotten_means_unknown_and_old_enough() {
        let entry = CacheEntry {
            container_id: "c1".into(),
            ..CacheEntry::default()
        };
        let grace = Duration::from_secs(300);
        let none = HashSet::new();
        let c1: HashSet<String> = ["c1".to_string()].into();
        assert!(is_forgotten(&entry, &none, Some(OLD), grace));
        assert!(is_forgotten(&entry, &none, Some(grace), grace));
        assert!(!is_forgotten(&entry, &c1, Some(OLD), grace));
        assert!(!is_forgotten(&entry, &none, Some(YOUNG), grace));
        assert!(!is_forgotten(&entry, &none, None, grace));
    }

    // Known, unknown, too young and another network's: only the unknown old one gets DEL;
    // the plugins' GC names everything else, the known sandbox and a young lease's owner too.
    #[tokio::test]
    async fn a_round_deletes_only_old_attachments_of_unknown_sandboxes() {
        let node = Node::new();
        node.attach("rcni", "known", OLD);
        node.attach("rcni", "gone", OLD);
        node.attach("rcni", "new", YOUNG);
        node.attach("other", "gone", OLD);
        node.lease("198.18.0.9", "adding", YOUNG);
        node.lease("198.18.0.10", "leaked", OLD);
        let report = round(&node.cfg, &mut FakeLister(known(&["known", "running"])))
            .await
            .unwrap();
        assert_eq!(node.calls(), ["DEL gone", "GC "]);
        assert_eq!(report.deleted.len(), 1);
        assert_eq!(report.deleted[0].container_id, "gone");
        assert!(report.failed.is_empty() && report.plugin_errors.is_empty());
        assert_eq!(node.cached(), ["other/gone", "rcni/known", "rcni/new"]);
        let valid = node.gc_valid();
        let valid: Vec<&str> = valid
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["containerID"].as_str().unwrap())
            .collect();
        assert_eq!(valid, ["adding", "known", "new", "running"]);
    }

    // The runtime cannot be asked: nothing is reclaimed, no plugin runs.
    #[tokio::test]
    async fn a_failed_cri_call_reclaims_nothing() {
        let node = Node::new();
        node.attach("rcni", "gone", OLD);
        let err = round(&node.cfg, &mut FakeLister(None)).await.unwrap_err();
        assert!(matches!(err, GcError::Cri(_)), "{err}");
        assert!(err.to_string().contains("connection refused"), "{err}");
        assert!(node.calls().is_empty());
        assert_eq!(node.cached(), ["rcni/gone"]);
    }

    // A conflist that cannot be read: an error, nothing reclaimed.
    #[tokio::test]
    async fn a_missing_conflist_reclaims_nothing() {
        let node = Node::new();
        node.attach("rcni", "gone", OLD);
        fs::remove_file(&node.cfg.conflist).unwrap();
        let err = round(&node.cfg, &mut FakeLister(known(&[])))
            .await
            .unwrap_err();
        assert!(matches!(err, GcError::Conflist { .. }), "{err}");
        assert_eq!(node.cached(), ["rcni/gone"]);
    }
}
