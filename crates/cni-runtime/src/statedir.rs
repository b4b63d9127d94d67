//! The runtime's state directories (`<cacheDir>`, `<cacheDir>/results`, `<cacheDir>/locks`):
//! created private (0700, as libcni creates them) and checked before every use, so a
//! directory another user could write to (or a symlink planted in its place) is refused
//! instead of trusted with cache entries and locks.

use std::fs;
use std::io;
use std::path::Path;

/// Creates `dir` (and missing parents) with mode 0700, then checks `dir` and its parent:
/// each must be a real directory (not a symlink), owned by this process's effective user,
/// and not writable by group or others.
pub(crate) fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    // The common case is a directory made earlier: then no mkdir is tried.
    if check_safe(dir).is_err() {
        let mut b = fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(dir)?;
        check_safe(dir)?;
    }
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => check_safe(parent),
        None => Ok(()),
    }
}

#[cfg(unix)]
fn check_safe(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("unsafe state directory {}: {why}", dir.display()),
        ))
    };
    if !meta.file_type().is_dir() {
        return refuse("not a directory (a symlink is not followed)".into());
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return refuse(format!("owned by uid {}, not {euid}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "mode {:o} lets group or others write to it",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_safe(dir: &Path) -> io::Result<()> {
    if fs::symlink_metadata(dir)?.file_type().is_dir() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_0700_and_refuses_writable_or_symlinked_dirs() {
        let d = tempfile::tempdir().unwrap();
        let results = d.path().join("cache/results");
        ensure_private_dir(&results).unwrap();
        let mode = fs::metadata(&results).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Existing and safe: fine again.
        ensure_private_dir(&results).unwrap();

        fs::set_permissions(&results, fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&results).unwrap_err();
        assert!(e.to_string().contains("group or others"), "{e}");
        fs::set_permissions(&results, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&results).unwrap();

        // A group-writable parent is refused too: it could swap the directory.
        let cache = d.path().join("cache");
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o770)).unwrap();
        assert!(ensure_private_dir(&results).is_err());
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();

        let elsewhere = d.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let link = d.path().join("cache/locks");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");

        // Owned by someone else (we run as root in CI; skip the chown otherwise).
        if nix::unistd::geteuid().is_root() {
            let foreign = d.path().join("cache/foreign");
            ensure_private_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), None).unwrap();
            let e = ensure_private_dir(&foreign).unwrap_err();
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        }
    }
}
