//! `rcni-plugins install <dir> [--force] [--copy]`: one symlink per plugin name, pointing at
//! this executable, or with `--copy` at a copy of it in `<dir>` (what a DaemonSet's init
//! container does: the image's own path does not exist on the host).

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cni_persist::{Durability, TempFile};

/// What happened to one link.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Replaced,
    /// Already a link to this executable.
    Unchanged,
    /// Something else has the name and `--force` was not given.
    Conflict,
}

/// Creates `<dir>/<name> -> target` for every name. Existing links to `target` are kept; other
/// files are replaced only with `force` (atomically: new link, then rename over the old name).
pub fn install(
    dir: &Path,
    target: &Path,
    names: &[&str],
    force: bool,
) -> io::Result<Vec<(PathBuf, Outcome)>> {
    fs::create_dir_all(dir)?;
    let mut done = Vec::new();
    for name in names {
        let link = dir.join(name);
        let outcome = match fs::symlink_metadata(&link) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                symlink(target, &link)?;
                Outcome::Created
            }
            Err(e) => return Err(e),
            Ok(_) if fs::read_link(&link).is_ok_and(|t| t == target) => Outcome::Unchanged,
            Ok(_) if !force => Outcome::Conflict,
            Ok(_) => {
                // symlink(2) never replaces: the fresh temp name is exclusive.
                let tmp = dir.join(cni_persist::temp::new_name(name));
                symlink(target, &tmp)?;
                fs::rename(&tmp, &link).inspect_err(|_| drop(fs::remove_file(&tmp)))?;
                Outcome::Replaced
            }
        };
        done.push((link, outcome));
    }
    Ok(done)
}

/// The name of the executable's copy in the plugin directory.
pub const COPY_NAME: &str = cni_attribution::names::PLUGINS_EXECUTABLE;

/// Copies the executable `from` to `<dir>/rcni-plugins` (through a temp file renamed into place,
/// so a runtime executing a plugin meanwhile sees the old or the new file, never a partial
/// one) and returns the link target the plugin names should use: the relative name, so the
/// links stay right wherever the directory is mounted. Fsynced: runtimes execute it after a
/// reboot.
pub fn copy_executable(from: &Path, dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut temp = TempFile::create(dir, COPY_NAME)?;
    io::copy(&mut fs::File::open(from)?, temp.file())?;
    temp.set_mode(0o755)?;
    temp.replace(&dir.join(COPY_NAME), Durability::Fsync)?;
    Ok(PathBuf::from(COPY_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_keeps_and_forces() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("rcni-plugins");
        fs::write(&bin, "x").unwrap();
        let out = dir.path().join("bin");
        let names = ["loopback", "bridge"];
        let r = install(&out, &bin, &names, false).unwrap();
        assert!(r.iter().all(|(_, o)| *o == Outcome::Created));
        assert_eq!(fs::read_link(out.join("bridge")).unwrap(), bin);
        let r = install(&out, &bin, &names, false).unwrap();
        assert!(r.iter().all(|(_, o)| *o == Outcome::Unchanged));
        // A foreign file (e.g. the Go plugin) is kept unless forced.
        fs::remove_file(out.join("bridge")).unwrap();
        fs::write(out.join("bridge"), "go").unwrap();
        let r = install(&out, &bin, &names, false).unwrap();
        assert_eq!(r[1].1, Outcome::Conflict);
        assert_eq!(fs::read(out.join("bridge")).unwrap(), b"go");
        let r = install(&out, &bin, &names, true).unwrap();
        assert_eq!(r[1].1, Outcome::Replaced);
        assert_eq!(fs::read_link(out.join("bridge")).unwrap(), bin);
        assert_eq!(fs::read_dir(&out).unwrap().count(), 2, "no temp files left");
    }

    #[test]
    fn a_copy_is_linked_by_its_relative_name() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("image-bin");
        fs::write(&bin, "v1").unwrap();
        let out = dir.path().join("opt-cni-bin");
        let target = copy_executable(&bin, &out).unwrap();
        install(&out, &target, &["loopback"], true).unwrap();
        assert_eq!(
            fs::read_link(out.join("loopback")).unwrap(),
            Path::new(COPY_NAME)
        );
        assert_eq!(fs::read(out.join("loopback")).unwrap(), b"v1");
        let mode = fs::metadata(out.join(COPY_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // A second run replaces the copy in place and leaves no temp file.
        fs::write(&bin, "v2").unwrap();
        copy_executable(&bin, &out).unwrap();
        assert_eq!(fs::read(out.join("loopback")).unwrap(), b"v2");
        assert_eq!(fs::read_dir(&out).unwrap().count(), 2);
    }
}
