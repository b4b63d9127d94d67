use std::io;
use std::path::PathBuf;

/// Why a store could not write, check or lock.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A directory someone else could plant or swap files in.
    #[error("unsafe directory {}: {reason}", path.display())]
    UnsafeDir { path: PathBuf, reason: String },
    #[error("no free temp file name in {} after {tries} tries", dir.display())]
    NoTempName { dir: PathBuf, tries: usize },
    #[error("{} has no file name", path.display())]
    NoFileName { path: PathBuf },
}

impl PersistError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        PersistError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The `io::ErrorKind` closest to this error (`AlreadyExists`, `NotFound`, ... of the
    /// underlying call; `PermissionDenied` for an unsafe directory).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            PersistError::Io { source, .. } => source.kind(),
            PersistError::UnsafeDir { .. } => io::ErrorKind::PermissionDenied,
            PersistError::NoTempName { .. } => io::ErrorKind::AlreadyExists,
            PersistError::NoFileName { .. } => io::ErrorKind::InvalidInput,
        }
    }
}

/// For stores whose own errors are `io::Error`: the kind is kept, the message says what failed.
impl From<PersistError> for io::Error {
    fn from(e: PersistError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}
