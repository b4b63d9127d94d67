//! A netns path where the spec wants text. CNI_NETNS is a path (any bytes on Linux), but a
//! result's interface `sandbox` and libcni's cache field `netns` are JSON strings, so a path
//! that is not UTF-8 cannot be written there. It is refused, never replaced by a lossy copy
//! that would name another file.

use std::path::{Path, PathBuf};

use crate::error::CniError;

/// A netns path that is not valid UTF-8, met where it would have to become JSON text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CNI_NETNS is not valid UTF-8: the path {path:?} cannot be written as JSON text")]
pub struct NetnsNotUtf8 {
    pub path: PathBuf,
}

/// `netns` as the text the spec's JSON carries, unchanged for a UTF-8 path.
pub fn netns_text(netns: &Path) -> Result<&str, NetnsNotUtf8> {
    netns.to_str().ok_or_else(|| NetnsNotUtf8 {
        path: netns.to_path_buf(),
    })
}

impl From<NetnsNotUtf8> for CniError {
    /// Code 4 (invalid environment variables): the path came in as CNI_NETNS.
    fn from(e: NetnsNotUtf8) -> Self {
        CniError::invalid_environment("CNI_NETNS is not valid UTF-8")
            .with_details(format!("{:?}", e.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_paths_pass_unchanged_others_are_code_4() {
        assert_eq!(
            netns_text(Path::new("/run/netns/ü x")),
            Ok("/run/netns/ü x")
        );
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let bad = Path::new(std::ffi::OsStr::from_bytes(b"/run/netns/\xff"));
            let e = CniError::from(netns_text(bad).unwrap_err());
            assert_eq!(e.code, crate::code::INVALID_ENVIRONMENT);
            assert_eq!(e.msg, "CNI_NETNS is not valid UTF-8");
            assert_eq!(e.details, r#""/run/netns/\xFF""#);
        }
    }
}
