//! Finding the binaries integration tests execute: ours from the cargo target dir,
//! and the Go reference plugins from the Debian package.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::bail;

/// Where Debian's `containernetworking-plugins` installs the Go plugins.
pub const GO_PLUGINS_DIR: &str = "/usr/lib/cni";

/// Path of the workspace binary `name` (e.g. the multi-call plugin binary), for tests
/// of any crate.
///
/// Looks, in order, at `CARGO_BIN_EXE_<name>` and `NEXTEST_BIN_EXE_<name>` in the
/// environment at run time, then `<target dir>/<profile>/<name>` where the target dir
/// comes from the running test executable, `CARGO_TARGET_DIR`, or the workspace of
/// `CARGO_MANIFEST_DIR`. The binary must already be built: a test of another crate
/// should tell its user to run `cargo build -p <package>` first (the error says so).
pub fn bin_path(name: &str) -> anyhow::Result<PathBuf> {
    if name.is_empty() || name.contains('/') {
        bail!("invalid binary name {name:?}");
    }
    let candidates: Vec<PathBuf> = env_candidates(name)
        .into_iter()
        .chain(target_profile_dirs().into_iter().map(|dir| dir.join(name)))
        .collect();
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "binary {name:?} not found (tried: {}); build it first, e.g. `cargo build --bins`",
        tried.join(", ")
    )
}

fn env_candidates(name: &str) -> Vec<PathBuf> {
    let underscored = name.replace('-', "_");
    [
        format!("CARGO_BIN_EXE_{name}"),
        format!("NEXTEST_BIN_EXE_{name}"),
        format!("NEXTEST_BIN_EXE_{underscored}"),
    ]
    .iter()
    .filter_map(std::env::var_os)
    .map(PathBuf::from)
    .collect()
}

/// `target/<profile>` directories to search, most specific first.
fn target_profile_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // Test executables live in target/<profile>/deps/.
    if let Ok(exe) = std::env::current_exe() {
        if let Some(profile_dir) = exe.parent().and_then(Path::parent) {
            dirs.push(profile_dir.to_path_buf());
        }
    }
    let target_dirs = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(workspace_root().map(|root| root.join("target")));
    for target in target_dirs {
        dirs.push(target.join("debug"));
        dirs.push(target.join("release"));
    }
    dirs
}

/// The nearest ancestor of `CARGO_MANIFEST_DIR` whose Cargo.toml declares a workspace.
fn workspace_root() -> Option<PathBuf> {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    manifest_dir
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .map(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
                .unwrap_or(false)
        })
        .map(Path::to_path_buf)
}

/// [`GO_PLUGINS_DIR`] when the Go reference plugins are installed there (`loopback`
/// exists), else `None`. Interop tests skip with a message when it is `None`:
///
/// ```
/// let Some(go_dir) = cni_testkit::go_plugins_dir() else {
///     eprintln!("skipped: Go reference plugins not installed in /usr/lib/cni");
///     return;
/// };
/// assert!(go_dir.join("loopback").exists());
/// ```
pub fn go_plugins_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(GO_PLUGINS_DIR);
    dir.join("loopback").is_file().then_some(dir)
}

/// Joins directories into a `CNI_PATH` value (`a:b:c`).
pub fn cni_path<I, P>(dirs: I) -> anyhow::Result<OsString>
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    Ok(std::env::join_paths(
        dirs.into_iter().map(|d| d.as_ref().to_path_buf()),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_workspace_of_this_crate() {
        let root = workspace_root().expect("CARGO_MANIFEST_DIR is set by cargo and nextest");
        assert!(
            root.join("crates").join("cni-testkit").is_dir(),
            "{}",
            root.display()
        );
    }

    #[test]
    fn missing_binary_error_names_it() {
        let err = bin_path("rcnit-no-such-binary").unwrap_err().to_string();
        assert!(err.contains("rcnit-no-such-binary"), "{err}");
        assert!(bin_path("../x").is_err());
    }

    #[test]
    fn cni_path_joins_with_colons() {
        let joined = cni_path(["/a", "/b/c"]).unwrap();
        assert_eq!(joined, "/a:/b/c");
        assert!(cni_path(["/a:b"]).is_err());
    }
}
