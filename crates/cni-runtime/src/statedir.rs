//! The runtime's state directories (`<cacheDir>`, `<cacheDir>/results`, `<cacheDir>/locks`):
//! created private (0700, as libcni creates them) and checked before every use, so a
//! directory another user could write to (or a symlink planted in its place) is refused
//! instead of trusted with cache entries and locks.

use std::io;
use std::path::Path;

/// Creates `dir` (and missing parents) with mode 0700, then checks `dir` and its parent:
/// each must be a real directory (not a symlink), owned by this process's effective user,
/// and not writable by group or others (`cni_persist::DirRule::PRIVATE_WITH_PARENT`).
pub(crate) fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    Ok(cni_persist::ensure_dir(
        dir,
        cni_persist::DirRule::PRIVATE_WITH_PARENT,
    )?)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::fs;
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
