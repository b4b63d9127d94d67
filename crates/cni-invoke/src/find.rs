//! Plugin lookup in a list of directories (libcni's `FindInPath` in `pkg/invoke/find.go`).

use std::path::{Path, PathBuf};

use crate::error::InvokeError;

/// The first regular file (after following links) named `name` in `paths`, in order.
/// Names with a path separator are rejected, so a config can never point outside the path.
pub fn find_in_path(name: &str, paths: &[PathBuf]) -> Result<PathBuf, InvokeError> {
    if name.is_empty() {
        return Err(InvokeError::NoName);
    }
    if name.contains('/') || name.contains('\\') || name == "." || name == ".." {
        return Err(InvokeError::InvalidName(name.to_string()));
    }
    if paths.is_empty() {
        return Err(InvokeError::NoPaths);
    }
    paths
        .iter()
        .map(|dir| dir.join(name))
        .find(|candidate| is_regular_file(candidate))
        .ok_or_else(|| InvokeError::NotFound {
            name: name.to_string(),
            paths: paths.to_vec(),
        })
}

fn is_regular_file(p: &Path) -> bool {
    std::fs::metadata(p).map(|m| m.is_file()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invalid names, not found, first dir wins, directories skipped.
    #[test]
    fn lookup_rules() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir(a.path().join("p")).unwrap(); // a directory named like the plugin
        std::fs::write(b.path().join("p"), "x").unwrap();
        let c = tempfile::tempdir().unwrap();
        std::fs::write(c.path().join("p"), "y").unwrap();
        let paths = vec![a.path().into(), b.path().into(), c.path().into()];
        assert_eq!(find_in_path("p", &paths).unwrap(), b.path().join("p"));
        assert!(matches!(
            find_in_path("a/b", &paths),
            Err(InvokeError::InvalidName(_))
        ));
        assert!(matches!(find_in_path("", &paths), Err(InvokeError::NoName)));
        assert!(matches!(find_in_path("p", &[]), Err(InvokeError::NoPaths)));
        let e = find_in_path("missing", &paths).unwrap_err();
        assert!(e
            .to_string()
            .contains("failed to find plugin \"missing\" in path"));
    }
}
