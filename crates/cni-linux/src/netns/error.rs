//! The error of opening, entering or managing a network namespace. Its own file because the
//! netlink client's error wraps it while the namespace code asks the kernel over netlink.

use std::io;
use std::path::{Path, PathBuf};

/// Errors from opening, entering or managing a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NsError {
    /// The namespace path does not exist. DEL treats this as "already gone".
    #[error("network namespace {} does not exist", .0.display())]
    NotFound(PathBuf),
    /// The path exists but is not on nsfs or procfs, so it cannot be a namespace.
    #[error("{} is not a network namespace (not a namespace file on nsfs or procfs)", .0.display())]
    NotANamespace(PathBuf),
    /// The path is a namespace of another type (`mnt`, `uts`, ...).
    #[error(
        "{} is not a network namespace (it is a {} namespace)",
        .path.display(),
        .kind.as_deref().unwrap_or("different kind of")
    )]
    OtherNamespace {
        /// The path opened.
        path: PathBuf,
        /// The kernel's name for its type (`mnt`, `uts`, ...) when it gave one.
        kind: Option<String>,
    },
    /// The path cannot name a file at all: a symlink loop, a name too long, a component
    /// that is not a directory.
    #[error("{} is not a network namespace (unusable path: {source})", .path.display())]
    BadPath {
        /// The path given.
        path: PathBuf,
        /// ELOOP, ENAMETOOLONG or ENOTDIR.
        source: io::Error,
    },
    /// A named namespace is being created but the name is already taken.
    #[error("network namespace {} already exists", .0.display())]
    AlreadyExists(PathBuf),
    /// A namespace name that cannot be used as a single path component.
    #[error("invalid network namespace name {0:?}")]
    InvalidName(String),
    /// Any other I/O or system-call failure.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl NsError {
    /// True if the namespace path does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, NsError::NotFound(_))
    }

    /// True if the path exists (or cannot exist) but is not a network namespace: a file that
    /// is not a namespace, a namespace of another type, or a path no file can have.
    pub fn is_not_a_network_namespace(&self) -> bool {
        matches!(
            self,
            NsError::NotANamespace(_) | NsError::OtherNamespace { .. } | NsError::BadPath { .. }
        )
    }

    pub(super) fn io(op: &'static str, path: &Path, source: impl Into<io::Error>) -> Self {
        NsError::Io {
            op,
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}
