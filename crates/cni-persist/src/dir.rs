//! Directories a store writes into: a file planted or swapped in a directory another user can
//! write to would be read back as the store's own, or redirect its writes, so each is checked
//! before use.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use crate::{PersistError, Result};

/// What a store accepts as its directory. Every rule refuses a directory that group or others
/// can write to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRule {
    /// Root may own it too (host-local's data dir, which Go makes as root, is shared with it).
    pub root_may_own: bool,
    /// A symlink to a directory is accepted and its target checked (an admin-configured data
    /// dir may be one); otherwise a symlink is refused.
    pub follow_symlink: bool,
    /// The parent must pass the same rule (it could otherwise swap the directory itself).
    pub check_parent: bool,
}

impl DirRule {
    /// A directory only this user can change: owned by the effective uid, not a symlink.
    pub const PRIVATE: DirRule = DirRule {
        root_may_own: false,
        follow_symlink: false,
        check_parent: false,
    };

    /// [`DirRule::PRIVATE`], and the parent as well.
    pub const PRIVATE_WITH_PARENT: DirRule = DirRule {
        check_parent: true,
        ..DirRule::PRIVATE
    };
}

/// Refuses `dir` unless it passes `rule`.
pub fn check_dir(dir: &Path, rule: DirRule) -> Result<()> {
    check_one(dir, rule)?;
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if rule.check_parent => check_one(parent, rule),
        _ => Ok(()),
    }
}

/// Creates `dir` and missing parents (mode 0700) when it does not exist, then checks it.
pub fn ensure_dir(dir: &Path, rule: DirRule) -> Result<()> {
    match check_one(dir, rule) {
        Err(PersistError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| PersistError::io("create directory", dir, e))?;
        }
        other => other?,
    }
    check_dir(dir, rule)
}

fn check_one(dir: &Path, rule: DirRule) -> Result<()> {
    let meta = if rule.follow_symlink {
        fs::metadata(dir)
    } else {
        fs::symlink_metadata(dir)
    }
    .map_err(|e| PersistError::io("inspect", dir, e))?;
    let refuse = |reason: String| {
        Err(PersistError::UnsafeDir {
            path: dir.to_path_buf(),
            reason,
        })
    };
    if meta.file_type().is_symlink() {
        return refuse("a symlink (not followed)".into());
    }
    if !meta.is_dir() {
        return refuse("not a directory".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && !(rule.root_may_own && meta.uid() == 0) {
        return refuse(format!("owned by uid {}, not {me}", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return refuse(format!(
            "mode {mode:04o} lets other users write to it (group or others)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn creates_0700_and_accepts_it_again() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b");
        ensure_dir(&dir, DirRule::PRIVATE).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        ensure_dir(&dir, DirRule::PRIVATE).unwrap();
        // 0755 is not private to read, but no one else can write: accepted.
        chmod(&dir, 0o755);
        check_dir(&dir, DirRule::PRIVATE).unwrap();
    }

    #[test]
    fn writable_by_others_is_refused_and_so_is_such_a_parent() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("p/s");
        ensure_dir(&dir, DirRule::PRIVATE).unwrap();
        chmod(&dir, 0o770);
        let e = check_dir(&dir, DirRule::PRIVATE).unwrap_err();
        assert!(e.to_string().contains("group or others"), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        chmod(&dir, 0o700);
        chmod(&d.path().join("p"), 0o777);
        check_dir(&dir, DirRule::PRIVATE).unwrap();
        assert!(check_dir(&dir, DirRule::PRIVATE_WITH_PARENT).is_err());
    }

    #[test]
    fn a_symlink_is_refused_unless_the_rule_follows_it() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        ensure_dir(&real, DirRule::PRIVATE).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = check_dir(&link, DirRule::PRIVATE).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(ensure_dir(&link, DirRule::PRIVATE).is_err());
        let follow = DirRule {
            follow_symlink: true,
            ..DirRule::PRIVATE
        };
        check_dir(&link, follow).unwrap();
        let file = d.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(check_dir(&file, follow).is_err());
    }

    #[test]
    fn another_owner_is_refused_root_only_when_allowed() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown needs root; CI runs these as root
        }
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("foreign");
        ensure_dir(&dir, DirRule::PRIVATE).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        let e = check_dir(&dir, DirRule::PRIVATE).unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        let root_ok = DirRule {
            root_may_own: true,
            ..DirRule::PRIVATE
        };
        assert!(check_dir(&dir, root_ok).is_err());
    }
}
