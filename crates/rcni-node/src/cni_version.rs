//! Which `cniVersion` the conflist may carry: the highest version every plugin it chains
//! supports, at most [`SpecVersion::CURRENT`] (1.1.0). Each plugin in `--cni-bin-dir` is asked
//! with the CNI `VERSION` command (a short synchronous call at start, like a runtime's probe).
//! rcni's plugins answer up to 1.1.0 (so runtimes ask STATUS); Debian's Go plugins 1.1.1 stop
//! at 1.0.0 and refuse a 1.1.0 config, so their node gets 1.0.0 (and no STATUS).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use cni_invoke::ExecOptions;
use cni_types::version::SpecVersion;

/// How long a plugin may take to answer VERSION before the agent gives up on it (a hung
/// plugin must not hold the agent's start).
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The versions one plugin supports, from its `VERSION` answer (through the runtime's own
/// invoker, with a timeout); `None` when it cannot be run or its answer is not a version list.
pub fn supported(plugin: &Path) -> Option<BTreeSet<SpecVersion>> {
    supported_within(plugin, VERSION_TIMEOUT)
}

fn supported_within(plugin: &Path, timeout: Duration) -> Option<BTreeSet<SpecVersion>> {
    let opts = ExecOptions {
        timeout: Some(timeout),
        clear_env: true,
        forward_stderr: false,
        ..ExecOptions::default()
    };
    let info = cni_invoke::get_version_info(plugin, &opts).ok()?;
    Some(
        info.supported_versions
            .iter()
            .filter_map(|v| SpecVersion::parse(v).ok())
            .collect(),
    )
}

/// The highest version every set in `sets` contains, at most 1.1.0; `None` when they share
/// none.
pub fn highest_common<'a>(
    sets: impl IntoIterator<Item = &'a BTreeSet<SpecVersion>>,
) -> Option<SpecVersion> {
    let mut common: BTreeSet<SpecVersion> = SpecVersion::ALL.into_iter().collect();
    for set in sets {
        common = common.intersection(set).copied().collect();
    }
    common.into_iter().rfind(|v| *v <= SpecVersion::CURRENT)
}

/// The conflist's version for `plugins` in `bin_dir`: the highest common one; 1.1.0 (with a
/// warning) when a plugin is missing or silent, as the conflist must be written anyway.
pub fn for_plugins(bin_dir: &Path, plugins: &[&str]) -> SpecVersion {
    let mut sets = Vec::new();
    for name in plugins {
        match supported(&bin_dir.join(name)) {
            Some(set) => sets.push(set),
            None => {
                log::warn!(
                    "cannot ask {}/{name} for its versions; the conflist says {}",
                    bin_dir.display(),
                    SpecVersion::CURRENT
                );
                return SpecVersion::CURRENT;
            }
        }
    }
    highest_common(&sets).unwrap_or_else(|| {
        log::warn!(
            "the plugins in {} share no CNI version; the conflist says {}",
            bin_dir.display(),
            SpecVersion::CURRENT
        );
        SpecVersion::CURRENT
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(vs: &[&str]) -> BTreeSet<SpecVersion> {
        vs.iter().map(|v| SpecVersion::parse(v).unwrap()).collect()
    }

    #[test]
    fn the_highest_common_version_is_capped_at_1_1_0() {
        let rcni = set(&["0.3.1", "0.4.0", "1.0.0", "1.1.0"]);
        let go = set(&["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"]);
        assert_eq!(highest_common([&rcni, &rcni]), Some(SpecVersion::V1_1_0));
        assert_eq!(highest_common([&rcni, &go]), Some(SpecVersion::V1_0_0));
        assert_eq!(highest_common([&go]), Some(SpecVersion::V1_0_0));
        assert_eq!(highest_common([&set(&["0.1.0"]), &set(&["1.0.0"])]), None);
    }

    #[test]
    fn a_plugin_that_never_answers_is_given_up_on() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let hung = dir.path().join("bridge");
        std::fs::write(&hung, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&hung, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(supported_within(&hung, Duration::from_millis(300)), None);
        // Not a timing assertion on the machine: 60 s is the hung plugin's own sleep.
        assert!(
            started.elapsed() < Duration::from_secs(50),
            "the agent waited for the hung plugin"
        );
    }

    #[test]
    fn a_missing_plugin_leaves_the_default() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(supported(&dir.path().join("bridge")), None);
        assert_eq!(for_plugins(dir.path(), &["bridge"]), SpecVersion::CURRENT);
    }
}
