//! Pods from the sandbox records `rcni pod run` writes (`--pod-state-dir`, cni-sandbox's
//! record store): the ready sandboxes, with the namespace, name and labels given to
//! `rcni pod run` and the addresses its ADD returned.

use std::path::PathBuf;

use cni_policy::Pod;
use cni_sandbox::record::{SandboxRecord, State};
use cni_sandbox::RecordStore;

use super::{addresses, settled, PodSource, PodSourceError};

/// The records in one state directory.
#[derive(Debug, Clone)]
pub struct RecordPods {
    dir: PathBuf,
}

impl RecordPods {
    /// The records under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> RecordPods {
        RecordPods { dir: dir.into() }
    }
}

/// The pod of a ready record; `None` for the others (being set up, stopping, stopped).
fn pod_of(record: &SandboxRecord) -> Option<Pod> {
    if record.state != State::Ready {
        return None;
    }
    let meta = &record.pod;
    let key = format!("{}/{}", meta.namespace, meta.name);
    Some(Pod {
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        labels: meta.labels.clone(),
        ips: addresses(&key, record.ips.iter().map(String::as_str)),
        named_ports: Default::default(),
    })
}

impl PodSource for RecordPods {
    async fn pods(&mut self) -> Result<Vec<Pod>, PodSourceError> {
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
            netns: format!("/run/netns/{id}"),
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
        let pods = RecordPods::new(dir.path()).pods().await.unwrap();
        let keys: Vec<String> = pods.iter().map(Pod::key).collect();
        assert_eq!(keys, ["x/a", "y/b"]);
        assert_eq!(pods[0].labels["pod"], "a");
        assert_eq!(
            pods[1].ips,
            [
                "198.18.1.3".parse::<std::net::IpAddr>().unwrap(),
                "2001:2::3".parse().unwrap()
            ]
        );
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
