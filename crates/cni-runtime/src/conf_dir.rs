//! The files of a network configuration directory, as libcni's `ConfFiles`
//! (containernetworking/cni `libcni/conf.go`) lists them.

use std::io;
use std::path::{Path, PathBuf};

/// The extensions a config directory is scanned for, as in go-cni.
pub const CONF_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// The non-directory entries of `dir` with one of `exts` (no dot), sorted by file name. A
/// missing directory is an empty list (as libcni's `ConfFiles`).
pub fn conf_files(dir: &Path, exts: &[&str]) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        let matches = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e));
        if matches {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}
