//! Plugins compiled into the running executable (issue #15 items 4 and 5).
//!
//! A multi-call executable (`rcni`, `rcni-plugins`) registers which plugins it contains and how
//! to run one as the process's main. When a plugin found in `CNI_PATH` is this very executable
//! (same device and inode as `/proc/self/exe`: a link to it, or itself) and the executable
//! contains a plugin of that name, [`crate::exec_raw`] starts it with `fork` and no `exec`
//! ([`crate::forked`]): the child is still a process of its own, with the same environment,
//! stdin, pipes, process group, timeout and kill as an executed plugin, but it skips loading
//! and relocating the executable and the C and Rust runtime start, which is most of what one
//! more process costs. Anything else (a wrapper script, another build, a Go plugin) is
//! executed as before.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

/// The plugins of this executable.
#[derive(Debug, Clone, Copy)]
pub struct OwnPlugins {
    /// Whether the executable contains a plugin of this name.
    pub contains: fn(&str) -> bool,
    /// Runs the plugin of this name as the process (environment, stdin and stdout are the
    /// process's own) and returns its exit code. Only called with a name `contains` knows.
    pub run: fn(&str) -> i32,
}

static OWN: OnceLock<OwnPlugins> = OnceLock::new();

/// Lets plugins that resolve to this executable start without `exec`. Called once by a
/// multi-call executable; a second call is ignored.
pub fn register_own_plugins(plugins: OwnPlugins) {
    let _ = OWN.set(plugins);
}

/// (device, inode) of the running executable, once known.
fn own_executable() -> Option<(u64, u64)> {
    static OWN_EXE: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    *OWN_EXE.get_or_init(|| {
        let meta = std::fs::metadata("/proc/self/exe").ok()?;
        Some((meta.dev(), meta.ino()))
    })
}

/// Whether `path` (after following links) is the running executable.
pub fn is_this_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    Some((meta.dev(), meta.ino())) == own_executable()
}

/// The plugin name to run in a forked child for the plugin found at `found`: only when
/// plugins are registered, `found` is this executable, the executable contains a plugin of
/// that file name, and this process has a single thread (`Threads:` in `/proc/self/status`;
/// a child forked from several threads could inherit a lock another thread held, and
/// deadlock).
pub(crate) fn forkable(found: &Path) -> Option<(&'static OwnPlugins, &str)> {
    let own = OWN.get()?;
    let name = found.file_name()?.to_str()?;
    if !(own.contains)(name) || !is_this_executable(found) || !single_threaded() {
        return None;
    }
    Some((own, name))
}

/// Whether this process has exactly one thread.
fn single_threaded() -> bool {
    proc_self_status_field("Threads:") == Some(1)
}

/// A numeric field of `/proc/self/status` (`Threads:`, `FDSize:`), read with one read(2).
pub(crate) fn proc_self_status_field(name: &str) -> Option<u64> {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let n = std::fs::File::open("/proc/self/status")
        .and_then(|mut f| f.read(&mut buf))
        .ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_binary_is_itself_and_not_other_files() {
        let me = std::env::current_exe().unwrap();
        assert!(is_this_executable(&me));
        assert!(!is_this_executable(Path::new("/bin/sh")));
        assert!(!is_this_executable(Path::new("/nonexistent/plugin")));
    }

    #[test]
    fn status_fields_are_read() {
        assert!(proc_self_status_field("FDSize:").is_some_and(|n| n >= 64));
        assert!(proc_self_status_field("Threads:").is_some_and(|n| n >= 1));
        assert_eq!(proc_self_status_field("NoSuchField:"), None);
    }

    #[test]
    fn the_test_harness_runs_threads_so_nothing_is_forked() {
        // libtest runs each test on a thread of its own besides the main thread.
        assert!(!single_threaded());
        register_own_plugins(OwnPlugins {
            contains: |_| true,
            run: |_| 0,
        });
        assert!(forkable(&std::env::current_exe().unwrap()).is_none());
    }
}
