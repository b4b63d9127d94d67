//! `rcni-plugins install <dir> [--force]`: one symlink per plugin name, pointing at this
//! executable.

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

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
                let tmp = dir.join(format!(".{name}.rcni-{}", std::process::id()));
                let _ = fs::remove_file(&tmp);
                symlink(target, &tmp)?;
                fs::rename(&tmp, &link)?;
                Outcome::Replaced
            }
        };
        done.push((link, outcome));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
