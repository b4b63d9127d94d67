//! Pods from the sandbox records `rcni pod run` writes (`--pod-state-dir`, cni-sandbox's
//! record store): the ready sandboxes, with the namespace, name and labels given to
//! `rcni pod run` and the addresses its ADD returned.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use cni_policy::Pod;
use cni_sandbox::record::{SandboxRecord, State};
use cni_sandbox::RecordStore;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

use super::{addresses, settled, Labelled, PodSource, PodSourceError, SourcePod};

/// The records in one state directory.
#[derive(Debug)]
pub struct RecordPods {
    dir: PathBuf,
    /// The directory's change notifications, once it exists.
    watch: Option<DirWatch>,
}

impl RecordPods {
    /// The records under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> RecordPods {
        RecordPods {
            dir: dir.into(),
            watch: None,
        }
    }
}

/// An inotify instance (non-blocking) watching one directory for records written, renamed
/// into place or removed.
#[derive(Debug)]
struct Watcher(Inotify);

impl AsRawFd for Watcher {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

#[derive(Debug)]
struct DirWatch(AsyncFd<Watcher>);

impl DirWatch {
    fn new(dir: &Path) -> std::io::Result<DirWatch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let events = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_DELETE;
        inotify.add_watch(dir, events)?;
        // `AsyncFd::new` is deprecated because a borrowed descriptor could be closed while
        // registered; `Watcher` owns its descriptor, which lives exactly as long as the
        // `AsyncFd`. (Its replacement, `register`, is `unsafe`, which this workspace denies.)
        #[allow(deprecated)]
        let fd = AsyncFd::new(Watcher(inotify))?;
        Ok(DirWatch(fd))
    }

    /// Waits for the next batch of events (and consumes it).
    async fn next(&self) -> std::io::Result<()> {
        loop {
            let mut ready = self.0.readable().await?;
            let read =
                ready.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from));
            match read {
                Ok(events) => return events.map(drop),
                Err(_would_block) => continue,
            }
        }
    }
}

impl Clone for RecordPods {
    /// The same directory, watched anew by the clone.
    fn clone(&self) -> Self {
        RecordPods::new(self.dir.clone())
    }
}

/// The pod of a ready record; `None` for the others (being set up, stopping, stopped).
fn pod_of(record: &SandboxRecord) -> Option<SourcePod> {
    if record.state != State::Ready {
        return None;
    }
    let meta = &record.pod;
    let key = format!("{}/{}", meta.namespace, meta.name);
    let pod = Pod {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        ips: addresses(&key, record.ips.iter().map(String::as_str)),
        named_ports: Default::default(),
    };
    Some(SourcePod {
        id: record.id.clone(),
        pod,
        created: i64::try_from(record.created)
            .unwrap_or(i64::MAX)
            .saturating_mul(1_000_000_000),
    })
}

impl PodSource for RecordPods {
    /// `rcni pod run` writes the record, with the pod's labels, before the ADD.
    const KNOWS_DURING_ADD: bool = true;

    async fn labels(&mut self, ids: &[String]) -> Result<Vec<Labelled>, PodSourceError> {
        let store = RecordStore::new(self.dir.clone());
        let ids = ids.to_vec();
        let read = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for id in ids {
                if let Some(r) = store.load(&id)? {
                    out.push(Labelled {
                        id,
                        namespace: r.pod.namespace,
                        name: r.pod.name,
                        labels: r.pod.labels,
                    });
                }
            }
            Ok::<_, cni_sandbox::SandboxError>(out)
        })
        .await
        .map_err(|e| PodSourceError::Thread(e.to_string()))?;
        Ok(read?)
    }

    async fn pods(&mut self) -> Result<Vec<SourcePod>, PodSourceError> {
        let store = RecordStore::new(self.dir.clone());
        let read = tokio::task::spawn_blocking(move || store.records())
            .await
            .map_err(|e| PodSourceError::Thread(e.to_string()))?;
        let (records, unreadable) = read?;
        for e in unreadable {
            log::warn!("{e}; that sandbox's pod is left out");
        }
        Ok(settled(records.iter().filter_map(pod_of).collect()))
    }

    async fn changed(&mut self) {
        if self.watch.is_none() {
            // A directory that does not exist yet is watched from the first scan that finds it.
            match DirWatch::new(&self.dir) {
                Ok(w) => self.watch = Some(w),
                Err(_) => return std::future::pending().await,
            }
        }
        let watch = self.watch.as_ref().expect("set above");
        if let Err(e) = watch.next().await {
            log::warn!(
                "watch {}: {e}; finding changes by rescanning only",
                self.dir.display()
            );
            self.watch = None;
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni_sandbox::record::{NetnsOwner, PodMeta, RECORD_FORMAT};

    fn record(id: &str, ns: &str, name: &str, state: State, ips: &[&str]) -> SandboxRecord {
        SandboxRecord {
            format: RECORD_FORMAT,
            id: id.into(),
            pod: PodMeta {
                name: name.into(),
                namespace: ns.into(),
                uid: id.into(),
                labels: [("pod".to_string(), name.to_string())].into(),
            },
            netns: format!("/run/netns/{id}").into(),
            netns_owner: NetnsOwner::Caller,
            state,
            removing: false,
            networks: Vec::new(),
            cni_args: Vec::new(),
            capability_args: Default::default(),
            ips: ips.iter().map(|s| s.to_string()).collect(),
            results: Vec::new(),
            errors: Vec::new(),
            created: 0,
            updated: 0,
        }
    }

    #[tokio::test]
    async fn ready_sandboxes_with_addresses_are_the_pods() {
        let dir = tempfile::tempdir().unwrap();
        let store = RecordStore::new(dir.path());
        store
            .save(&record(
                "s2",
                "y",
                "b",
                State::Ready,
                &["198.18.1.3", "2001:2::3"],
            ))
            .unwrap();
        store
            .save(&record("s1", "x", "a", State::Ready, &["198.18.1.2"]))
            .unwrap();
        store
            .save(&record("s3", "x", "c", State::SettingUp, &[]))
            .unwrap();
        store
            .save(&record("s4", "x", "d", State::Stopped, &["198.18.1.4"]))
            .unwrap();
        store
            .save(&record("s5", "x", "e", State::Ready, &["not-an-ip"]))
            .unwrap();
        std::fs::write(dir.path().join("s6.json"), b"{broken").unwrap();
        let mut source = RecordPods::new(dir.path());
        let listed = source.pods().await.unwrap();
        let keys: Vec<String> = listed.iter().map(|p| p.pod.key()).collect();
        assert_eq!(keys, ["x/a", "y/b"]);
        assert_eq!(listed[0].id, "s1");
        let pods: Vec<Pod> = listed.into_iter().map(|p| p.pod).collect();
        assert_eq!(pods[0].labels["pod"], "a");
        // A record being set up already knows its pod's labels.
        let known = source.labels(&["s3".into(), "none".into()]).await.unwrap();
        assert_eq!(known.len(), 1);
        assert_eq!(
            (known[0].namespace.as_str(), known[0].name.as_str()),
            ("x", "c")
        );
        assert_eq!(known[0].labels["pod"], "c");
        assert_eq!(
            pods[1].ips,
            [
                "198.18.1.3".parse::<std::net::IpAddr>().unwrap(),
                "2001:2::3".parse().unwrap()
            ]
        );
    }

    #[tokio::test]
    async fn a_record_written_signals_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut pods = RecordPods::new(dir.path());
        let quiet = std::time::Duration::from_millis(100);
        // Nothing happened: no signal (the first wait starts the watch).
        assert!(tokio::time::timeout(quiet, pods.changed()).await.is_err());
        RecordStore::new(dir.path())
            .save(&record("s1", "x", "a", State::Ready, &["198.18.1.2"]))
            .unwrap();
        let signalled = std::time::Duration::from_secs(5);
        assert!(tokio::time::timeout(signalled, pods.changed())
            .await
            .is_ok());
        // A directory that does not exist gives no signal (the periodic scan covers it).
        let mut missing = RecordPods::new(dir.path().join("none"));
        assert!(tokio::time::timeout(quiet, missing.changed())
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_missing_directory_is_no_pods() {
        let dir = tempfile::tempdir().unwrap();
        let pods = RecordPods::new(dir.path().join("none"))
            .pods()
            .await
            .unwrap();
        assert!(pods.is_empty());
    }
}
