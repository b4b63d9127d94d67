//! GC: with every verb excluded (the state lock held exclusively), finish what killed
//! processes left (after the plugins they started, which outlive them, have exited), then hand the runtime's GC the set of valid attachments (every network of
//! every recorded sandbox) for every network the node knows: the conf dir's, the records'
//! and the result cache's (a network whose file is gone still has leases to release).
//! containerd 1.6 sends no GC at all; this is how a node recovers leaked leases.
//! Cached attachments that are not marked as this state dir's (another runtime's, sharing the
//! cache dir) are passed as valid, so `gc` never deletes what it did not make.

use std::collections::BTreeMap;

use serde::Serialize;

use cni_runtime::{discover, AttachmentId, Network};

use crate::error::SandboxError;
use crate::lifecycle::{Recovery, Sandboxes, STATE_MARK};

/// What a GC pass did.
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    /// Sandboxes whose killed run was undone.
    pub undone: Vec<String>,
    /// Sandboxes whose killed stop or rm was finished.
    pub finished: Vec<String>,
    /// Networks GC ran for.
    pub networks: Vec<String>,
    /// The attachments kept.
    pub valid: usize,
    /// Temp and lock files of killed processes removed from the state dir.
    pub swept: usize,
    pub errors: Vec<String>,
}

impl Sandboxes {
    pub fn gc(&self) -> Result<GcReport, SandboxError> {
        let _state = self.store.lock_state(true)?;
        let Recovery {
            undone,
            finished,
            mut errors,
        } = self.recover_locked(true)?;
        let swept = self.store.sweep();
        let (recs, bad) = self.store.records()?;
        if !bad.is_empty() {
            // An unreadable record may hold live attachments: GC without it could delete them.
            let why: Vec<String> = bad.iter().map(ToString::to_string).collect();
            return Err(SandboxError::Invalid(format!(
                "not collecting garbage while records are unreadable: {}",
                why.join("; ")
            )));
        }
        let mut valid: Vec<AttachmentId> = recs
            .iter()
            .flat_map(|r| {
                r.networks
                    .iter()
                    .map(|n| AttachmentId::new(&n.name, &r.id, &n.ifname))
            })
            .collect();
        // Attachments another runtime (or another state dir) made in the same cache are
        // theirs to collect: they count as valid here.
        let mark = self.state_mark();
        let cached = self.runtime.cached_attachments(None);
        for entry in &cached {
            let ours = entry
                .capability_args
                .get(STATE_MARK)
                .and_then(|v| v.as_str())
                == Some(mark.as_str());
            let key = entry.id();
            if !ours && !valid.contains(&key) {
                valid.push(key);
            }
        }
        let mut networks: BTreeMap<String, Network> = BTreeMap::new();
        match discover(&self.conf_dir) {
            Ok(found) => {
                for net in found.networks {
                    networks.entry(net.name().to_string()).or_insert(net);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
        for n in recs.iter().flat_map(|r| r.networks.iter()) {
            if !networks.contains_key(&n.name) {
                match n.network() {
                    Ok(net) => {
                        networks.insert(n.name.clone(), net);
                    }
                    Err(e) => errors.push(format!("network {:?}: {e}", n.name)),
                }
            }
        }
        for entry in cached {
            if networks.contains_key(&entry.network_name) {
                continue;
            }
            match Network::from_list_bytes(&entry.config) {
                Ok(net) => {
                    networks.insert(entry.network_name.clone(), net);
                }
                Err(e) => errors.push(format!(
                    "cached network {:?} of {}: {e}",
                    entry.network_name, entry.container_id
                )),
            }
        }
        networks
            .entry("cni-loopback".into())
            .or_insert_with(Network::loopback);
        for net in networks.values() {
            if let Err(e) = self.runtime.gc(net, &valid) {
                errors.push(format!("network {:?}: {e}", net.name()));
            }
        }
        Ok(GcReport {
            undone,
            finished,
            networks: networks.into_keys().collect(),
            valid: valid.len(),
            swept,
            errors,
        })
    }
}
