//! The runtime's error type: every failure names the operation, and plugin failures also name
//! the plugin type and the stage, while keeping the plugin's CNI error code retrievable.

use std::fmt;
use std::path::PathBuf;

use cni_invoke::InvokeError;
use cni_types::{code, CniError, NetnsNotUtf8};

/// The operation a failure happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
    Validate,
}

impl Operation {
    /// The `CNI_COMMAND` value (VALIDATE runs VERSION).
    pub fn command(self) -> &'static str {
        match self {
            Operation::Add => "ADD",
            Operation::Del => "DEL",
            Operation::Check => "CHECK",
            Operation::Status => "STATUS",
            Operation::Gc => "GC",
            Operation::Version | Operation::Validate => "VERSION",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // libcni spells the operations like this in `plugin type=... failed (<op>)`.
        let s = match self {
            Operation::Add => "add",
            Operation::Del => "delete",
            Operation::Check => "check",
            Operation::Status => "status",
            Operation::Gc => "gc",
            Operation::Version => "version",
            Operation::Validate => "validate",
        };
        f.write_str(s)
    }
}

/// Where in a plugin call a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Finding the executable in the plugin path.
    Lookup,
    /// Building the request config.
    Request,
    /// Running the plugin (its own error, a crash, or a timeout).
    Exec,
    /// The plugin succeeded but its output could not be used.
    Result,
    /// The plugin's VERSION answer does not cover the network's version.
    Compatibility,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Lookup => "lookup",
            Stage::Request => "request",
            Stage::Exec => "exec",
            Stage::Result => "result",
            Stage::Compatibility => "compatibility",
        })
    }
}

/// Identifies one plugin of a chain in messages: `type="bridge"` plus its `name` if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginId {
    pub plugin_type: String,
    pub name: Option<String>,
}

impl fmt::Display for PluginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "type={:?}", self.plugin_type)?;
        if let Some(n) = &self.name {
            write!(f, " name={n:?}")?;
        }
        Ok(())
    }
}

/// What went wrong inside a plugin call, below [`RuntimeError::Plugin`].
#[derive(Debug, thiserror::Error)]
pub enum PluginFailure {
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    #[error("{0}")]
    Other(String),
}

/// Errors of the runtime library.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A configuration file or list could not be loaded.
    #[error("{}: {message}", .file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "network config".into()))]
    Config {
        file: Option<PathBuf>,
        message: String,
    },
    /// No network of that name was found.
    #[error("no net configuration with name {name:?} in {}", .dir.display())]
    NetworkNotFound { name: String, dir: PathBuf },
    /// A container ID, interface name or network name was rejected (checked on every command).
    #[error("{0}")]
    Invalid(CniError),
    /// The netns path is not UTF-8, so the cache entry (JSON) cannot record it.
    #[error(transparent)]
    NetnsNotUtf8(#[from] NetnsNotUtf8),
    /// A plugin of the chain failed.
    #[error("plugin {plugin} failed ({op}, {stage}): {source}")]
    Plugin {
        plugin: PluginId,
        op: Operation,
        stage: Stage,
        #[source]
        source: Box<PluginFailure>,
    },
    /// CHECK on a version that has no CHECK (below 0.4.0).
    #[error("configuration version \"{0}\" does not support the CHECK command")]
    CheckNotSupported(String),
    /// ADD of an attachment that already has a cached result: refused before anything runs,
    /// so the live attachment is left exactly as it is.
    #[error("network {network:?}: container {container_id:?} interface {ifname:?} is already attached (its result is cached in {}); DEL that attachment before adding it again", .cache_file.display())]
    AlreadyAttached {
        network: String,
        container_id: String,
        ifname: String,
        cache_file: PathBuf,
    },
    /// CHECK without a cached ADD result.
    #[error("no cached result for network {network:?}, container {container_id:?}, interface {ifname:?}: CHECK needs a previous ADD")]
    NoCachedResult {
        network: String,
        container_id: String,
        ifname: String,
    },
    /// Reading or writing the result cache or a lock failed.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A cached result exists but cannot be used.
    #[error("failed to get network {network:?} cached result: {message}")]
    BadCache { network: String, message: String },
    /// An ADD failed and was rolled back; `original` is the failure the caller acts on.
    #[error("{original}{}", rollback_suffix(.rollback))]
    RolledBack {
        original: Box<RuntimeError>,
        rollback: Vec<RuntimeError>,
    },
    /// Several independent failures (GC, teardown, validation).
    #[error("{}", join(.0))]
    Multiple(Vec<RuntimeError>),
    /// A stale attachment could not be deleted during GC.
    #[error("failed to delete stale attachment {container_id} {ifname}: {source}")]
    StaleDelete {
        container_id: String,
        ifname: String,
        #[source]
        source: Box<RuntimeError>,
    },
    /// The operation's timeout was spent before this plugin of the chain could start.
    #[error("plugin {plugin} was not started ({op}): the {op} timeout of {budget:?} for the whole chain was spent")]
    DeadlineExceeded {
        plugin: PluginId,
        op: Operation,
        budget: std::time::Duration,
    },
    /// A bug-level failure inside the runtime (for example a worker thread panicked).
    #[error("internal error: {0}")]
    Internal(String),
    /// A network of a multi-network sandbox failed.
    #[error("network {network:?} (interface {ifname}): {source}")]
    Network {
        network: String,
        ifname: String,
        #[source]
        source: Box<RuntimeError>,
    },
}

fn rollback_suffix(errs: &[RuntimeError]) -> String {
    if errs.is_empty() {
        String::from(" (the chain was rolled back)")
    } else {
        format!(" (rollback also failed: {})", join(errs))
    }
}

fn join(errs: &[RuntimeError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl RuntimeError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// The CNI error code that best describes this failure. A plugin's own error keeps its
    /// code (so STATUS answers 50/51 reach the caller); for several errors, the first one's.
    pub fn code(&self) -> u32 {
        match self {
            RuntimeError::Config { .. } => code::INVALID_NETWORK_CONFIG,
            RuntimeError::NetworkNotFound { .. } => code::INVALID_NETWORK_CONFIG,
            RuntimeError::Invalid(e) => e.code,
            RuntimeError::NetnsNotUtf8(_) => code::INVALID_ENVIRONMENT,
            RuntimeError::Plugin { source, stage, .. } => match source.as_ref() {
                PluginFailure::Invoke(e) => e.to_cni_error().code,
                PluginFailure::Other(_) if *stage == Stage::Compatibility => {
                    code::INCOMPATIBLE_VERSION
                }
                PluginFailure::Other(_) => code::INTERNAL,
            },
            RuntimeError::CheckNotSupported(_) => code::INCOMPATIBLE_VERSION,
            RuntimeError::NoCachedResult { .. } => code::UNKNOWN_CONTAINER,
            // The CNI_CONTAINERID/CNI_IFNAME pair is not valid for ADD: it is taken.
            RuntimeError::AlreadyAttached { .. } => code::INVALID_ENVIRONMENT,
            RuntimeError::Io { .. } => code::IO_FAILURE,
            RuntimeError::BadCache { .. } => code::DECODING_FAILURE,
            RuntimeError::Internal(_) => code::INTERNAL,
            RuntimeError::DeadlineExceeded { .. } => code::TRY_AGAIN_LATER,
            RuntimeError::RolledBack { original, .. } => original.code(),
            RuntimeError::Multiple(errs) => errs.first().map_or(code::UNKNOWN, |e| e.code()),
            RuntimeError::StaleDelete { source, .. } | RuntimeError::Network { source, .. } => {
                source.code()
            }
        }
    }

    /// The plugin's own CNI error, when a plugin reported one.
    pub fn plugin_error(&self) -> Option<CniError> {
        match self {
            RuntimeError::Plugin { source, .. } => match source.as_ref() {
                PluginFailure::Invoke(e @ InvokeError::Plugin { .. }) => Some(e.to_cni_error()),
                _ => None,
            },
            RuntimeError::RolledBack { original, .. } => original.plugin_error(),
            RuntimeError::Multiple(errs) => errs.iter().find_map(|e| e.plugin_error()),
            RuntimeError::StaleDelete { source, .. } | RuntimeError::Network { source, .. } => {
                source.plugin_error()
            }
            _ => None,
        }
    }

    /// The whole failure as a CNI error object: the code of [`RuntimeError::code`], this
    /// error's text as `msg`, and the plugin's own details when it gave some.
    pub fn to_cni_error(&self) -> CniError {
        let details = self.plugin_error().map(|e| e.details).unwrap_or_default();
        CniError::new(self.code(), self.to_string()).with_details(details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_errors_keep_their_code_and_name_the_plugin() {
        let inner = InvokeError::Plugin {
            plugin: "/bin/b".into(),
            status: "exit status 1".into(),
            error: Box::new(CniError::new(50, "down").with_details("daemon")),
            stderr: String::new(),
        };
        let e = RuntimeError::Plugin {
            plugin: PluginId {
                plugin_type: "B".into(),
                name: None,
            },
            op: Operation::Status,
            stage: Stage::Exec,
            source: Box::new(inner.into()),
        };
        assert_eq!(e.code(), 50);
        let text = e.to_string();
        assert!(
            text.starts_with("plugin type=\"B\" failed (status, exec)"),
            "{text}"
        );
        assert_eq!(e.to_cni_error().details, "daemon");
        let rolled = RuntimeError::RolledBack {
            original: Box::new(e),
            rollback: vec![],
        };
        assert_eq!(rolled.code(), 50);
        assert!(rolled.to_string().contains("rolled back"));
    }
}
