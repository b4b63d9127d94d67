//! Status → NetworkReady: a network config is loaded, the loopback plugin is there (every
//! pod gets the built-in loopback network), and STATUS of every 1.1.0 network succeeds.

use serde::Serialize;

use cni_runtime::discover;

use crate::lifecycle::Sandboxes;

/// The answer to "is the pod network ready?".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Why not (empty when ready).
    pub reason: String,
    /// The CNI error code of a failed STATUS (50 or 51 by the spec), when that is the reason.
    pub code: Option<u32>,
}

impl Readiness {
    fn not(reason: String, code: Option<u32>) -> Self {
        Readiness {
            ready: false,
            reason,
            code,
        }
    }
}

impl Sandboxes {
    /// Whether new pods can get a network now.
    pub fn ready(&self) -> Readiness {
        let found = match discover(&self.conf_dir) {
            Ok(f) => f,
            Err(e) => return Readiness::not(e.to_string(), Some(e.code())),
        };
        if found.networks.is_empty() {
            return Readiness::not(
                format!("no network config found in {}", self.conf_dir.display()),
                None,
            );
        }
        let has_loopback = self
            .runtime
            .plugin_paths
            .iter()
            .any(|d| d.join("loopback").is_file());
        if !has_loopback {
            return Readiness::not(
                "the loopback plugin is not in the plugin path (every pod needs it)".into(),
                None,
            );
        }
        for net in &found.networks {
            if let Err(e) = self.runtime.status(net) {
                return Readiness::not(
                    format!(
                        "network {:?} is not ready: STATUS failed with code {}: {e}",
                        net.name(),
                        e.code()
                    ),
                    Some(e.code()),
                );
            }
        }
        Readiness {
            ready: true,
            reason: String::new(),
            code: None,
        }
    }
}
