//! The crate's error type, mapped to a CNI error code once (`code`), for the CLI's exit path.

use std::path::{Path, PathBuf};

use cni_runtime::RuntimeError;
use cni_types::{code, CniError, NetnsNotUtf8};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A network operation failed (the runtime's error names the network and plugin).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Setting up failed and was undone; `undo` lists what the undo itself could not do.
    #[error("{original}{}", undo_suffix(.undo))]
    SetupFailed {
        original: Box<SandboxError>,
        undo: Vec<String>,
    },
    /// Teardown reported errors for some networks; the record keeps them for a retry.
    #[error("teardown of sandbox {id} incomplete: {}", .errors.join("; "))]
    Teardown { id: String, errors: Vec<String> },
    #[error("{what} {}: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad sandbox record {}: {message}", .path.display())]
    BadRecord { path: PathBuf, message: String },
    /// The network namespace could not be created or removed.
    #[error("network namespace {}: {message}", .path.display())]
    Netns { path: PathBuf, message: String },
    /// The given netns path is not UTF-8: the record, the runtime's cache and every result
    /// hold it as JSON text.
    #[error(transparent)]
    NetnsNotUtf8(#[from] NetnsNotUtf8),
    /// A request that cannot be carried out as asked (bad id, bad port, no network).
    #[error("{0}")]
    Invalid(String),
    /// Every plugin succeeded, but the default interface has no address: the sandbox would
    /// be unreachable (containerd fails such a RunPodSandbox too).
    #[error("network {network:?} gave {ifname} no IP address")]
    NoAddress { network: String, ifname: String },
    /// `run` of an id whose sandbox was stopped: it must be removed first.
    #[error("sandbox {0} is stopped; remove it before running it again")]
    Stopped(String),
    /// The pod CIDR template could not be rendered.
    #[error("conf template {}: {message}", .path.display())]
    Template { path: PathBuf, message: String },
}

fn undo_suffix(undo: &[String]) -> String {
    if undo.is_empty() {
        " (everything attached was torn down)".to_string()
    } else {
        format!(" (teardown also failed: {})", undo.join("; "))
    }
}

impl SandboxError {
    pub(crate) fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        SandboxError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The CNI error code: a plugin's own code where one failed.
    pub fn code(&self) -> u32 {
        match self {
            SandboxError::Runtime(e) => e.code(),
            SandboxError::SetupFailed { original, .. } => original.code(),
            SandboxError::Teardown { .. } | SandboxError::NoAddress { .. } => code::INTERNAL,
            SandboxError::Io { .. } => code::IO_FAILURE,
            SandboxError::BadRecord { .. } => code::DECODING_FAILURE,
            SandboxError::Netns { .. } => code::INVALID_NETNS,
            SandboxError::Invalid(_) | SandboxError::Stopped(_) => code::INVALID_ENVIRONMENT,
            SandboxError::NetnsNotUtf8(_) => code::INVALID_ENVIRONMENT,
            SandboxError::Template { .. } => code::INVALID_NETWORK_CONFIG,
        }
    }

    /// The error as a CNI error object (plugin details kept).
    pub fn to_cni_error(&self) -> CniError {
        let details = match self {
            SandboxError::Runtime(e) => e.plugin_error().map(|p| p.details),
            SandboxError::SetupFailed { original, .. } => Some(original.to_cni_error().details),
            _ => None,
        };
        CniError::new(self.code(), self.to_string()).with_details(details.unwrap_or_default())
    }
}
