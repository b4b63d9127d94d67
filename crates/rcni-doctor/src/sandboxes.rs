//! The `rcni pod` part of the leak audit: a sandbox record (ready or stopped) whose netns path
//! no longer exists. `--fix` removes such a sandbox through cni-sandbox's remove, the code
//! path of `rcni pod rm` (DEL of every network without a netns, then the record), and
//! nothing else. Records in `setting-up` or `stopping` are left to the recovery every
//! `rcni pod` start runs.

use std::path::Path;
use std::sync::Arc;

use cni_runtime::Runtime;
use cni_sandbox::{Namespaces, RecordStore, Sandboxes, State, DEFAULT_STATE_DIR};

use super::audit::Finding;
use super::fix::Applied;

pub const KIND: &str = "sandbox-netns-gone";

/// The findings for the records under `state_dir` (none when it does not exist).
pub fn audit(state_dir: &Path) -> Result<Vec<Finding>, String> {
    let (recs, _) = RecordStore::new(state_dir)
        .records()
        .map_err(|e| e.to_string())?;
    let rm = if state_dir == Path::new(DEFAULT_STATE_DIR) {
        "rcni pod rm".to_string()
    } else {
        format!("rcni pod --state-dir {} rm", state_dir.display())
    };
    Ok(recs
        .into_iter()
        .filter(|r| matches!(r.state, State::Ready | State::Stopped))
        .filter(|r| !r.netns.as_os_str().is_empty() && !r.netns.exists())
        .map(|r| Finding {
            kind: KIND,
            why: format!(
                "rcni pod record of sandbox {} ({}/{}, {}) names netns {}, which no longer exists",
                r.id,
                r.pod.namespace,
                r.pod.name,
                r.state.as_str(),
                r.netns.display()
            ),
            remedy: format!("{rm} {}", r.id),
            object: r.id,
            network: None,
        })
        .collect())
}

/// `rcni pod rm` of every sandbox the audit found, with `rcni pod`'s namespaces.
pub fn fix(
    rt: &Runtime,
    conf_dir: &Path,
    state_dir: &Path,
    namespaces: Arc<dyn Namespaces>,
    findings: &[Finding],
) -> Vec<Applied> {
    let sb = Sandboxes::new(rt.clone(), state_dir, conf_dir, namespaces);
    findings
        .iter()
        .filter(|f| f.kind == KIND)
        .map(|f| Applied {
            action: format!("rcni pod rm {}", f.object),
            error: sb.remove(&f.object).err().map(|e| e.to_string()),
        })
        .collect()
}
