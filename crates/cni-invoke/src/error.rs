//! Errors of finding and running a plugin.

use std::path::PathBuf;
use std::time::Duration;

use cni_types::{CniError, ResultError};

/// Why a plugin could not be found, run, or understood.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("no plugin name provided")]
    NoName,
    #[error("invalid plugin name {0:?}: it must not contain a path separator")]
    InvalidName(String),
    #[error("no paths provided")]
    NoPaths,
    #[error("failed to find plugin {name:?} in path {paths:?}")]
    NotFound { name: String, paths: Vec<PathBuf> },
    #[error("failed to execute plugin {plugin}: {source}")]
    Spawn {
        plugin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("plugin {plugin} did not finish within {after:?} and was killed")]
    Timeout { plugin: String, after: Duration },
    /// The plugin exited non-zero. `error` is its CNI error, or one made from its output.
    #[error("plugin {plugin} failed ({status}): {error}{}", stderr_suffix(.stderr))]
    Plugin {
        plugin: String,
        status: String,
        error: Box<CniError>,
        stderr: String,
    },
    #[error("plugin {plugin} returned an unusable result: {source}")]
    BadResult {
        plugin: String,
        #[source]
        source: ResultError,
    },
    #[error("plugin {plugin} returned unusable version info: {reason}")]
    BadVersionInfo { plugin: String, reason: String },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; stderr: {stderr}")
    }
}

impl InvokeError {
    /// The CNI error to pass up: a plugin's own error keeps its code; a plugin name the
    /// config gives that can never name a plugin (empty, a path) is code 7; anything else is
    /// code 999 (internal) with this error's text, or 11 for a timeout.
    pub fn to_cni_error(&self) -> CniError {
        match self {
            InvokeError::Plugin { error, .. } => (**error).clone(),
            InvokeError::Timeout { .. } => CniError::try_again_later(self.to_string()),
            InvokeError::InvalidName(_) | InvokeError::NoName => {
                CniError::invalid_config(self.to_string())
            }
            other => CniError::internal(other.to_string()),
        }
    }

    /// The plugin's CNI error code, when the plugin itself reported one.
    pub fn plugin_code(&self) -> Option<u32> {
        match self {
            InvokeError::Plugin { error, .. } => Some(error.code),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A config's plugin name with a path separator is the config's fault: code 7, not 999.
    #[test]
    fn bad_plugin_names_are_config_errors() {
        for e in [InvokeError::InvalidName("../x".into()), InvokeError::NoName] {
            assert_eq!(
                e.to_cni_error().code,
                cni_types::code::INVALID_NETWORK_CONFIG,
                "{e}"
            );
        }
    }
}
