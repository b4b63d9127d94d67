//! Which versions the conflist offers, from what every plugin it chains supports (each plugin
//! in `--cni-bin-dir` is asked with the CNI `VERSION` command, a short synchronous call at
//! start, like a runtime's probe).
//!
//! By default the conflist carries `cniVersion` 1.0.0 and `cniVersions`, every version from
//! 0.4.0 up to the highest all plugins support. A runtime whose CNI library reads `cniVersions`
//! (libcni 1.2 and later: containerd 2.x) runs the list at the highest version it implements
//! from that list, so with rcni's plugins at 1.1.0 (STATUS and GC); libcni 1.1 (containerd 1.6
//! and 1.7, podman 4's CNI backend) ignores the list and runs 1.0.0, the highest result version
//! it can read. When the plugins' highest common version is below 1.0.0, `cniVersion` is that
//! version. `--cni-version V` pins one version instead (no list), and is refused at start when
//! a plugin does not support it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cni_invoke::ExecOptions;
use cni_types::version::SpecVersion;

/// The oldest version `cniVersions` lists.
const OLDEST_OFFERED: SpecVersion = SpecVersion::V0_4_0;
/// The highest `cniVersion` by default: libcni 1.1 cannot read 1.1.0 results.
const DEFAULT_MAX: SpecVersion = SpecVersion::V1_0_0;

/// The versions a conflist carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfVersions {
    /// `cniVersion`.
    pub cni_version: SpecVersion,
    /// `cniVersions` (the key is left out when empty).
    pub cni_versions: Vec<SpecVersion>,
}

/// Why the conflist's version cannot be chosen.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// `--cni-version` names no CNI version rcni knows.
    #[error("--cni-version {0}: not a CNI version rcni knows ({known})", known = known())]
    Unknown(String),
    /// A plugin does not support the pinned version.
    #[error("--cni-version {version}: {} supports only {supports}", plugin.display())]
    Unsupported {
        /// The plugin.
        plugin: PathBuf,
        /// The pinned version.
        version: SpecVersion,
        /// What it supports.
        supports: String,
    },
    /// A plugin present in the bin dir did not answer VERSION.
    #[error("--cni-version {version}: {} does not answer VERSION", plugin.display())]
    Unanswered {
        /// The plugin.
        plugin: PathBuf,
        /// The pinned version.
        version: SpecVersion,
    },
}

fn known() -> String {
    let all: Vec<String> = SpecVersion::ALL.iter().map(|v| v.to_string()).collect();
    all.join(", ")
}

/// `--cni-version`'s value, when it is a version rcni knows.
pub fn parse_pin(text: &str) -> Result<SpecVersion, VersionError> {
    SpecVersion::parse(text)
        .ok()
        .filter(|v| v.is_known() && text.matches('.').count() == 2)
        .ok_or_else(|| VersionError::Unknown(text.to_string()))
}

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

/// The versions every set in `sets` contains (of those rcni knows).
pub fn common<'a>(
    sets: impl IntoIterator<Item = &'a BTreeSet<SpecVersion>>,
) -> BTreeSet<SpecVersion> {
    let mut common: BTreeSet<SpecVersion> = SpecVersion::ALL.into_iter().collect();
    for set in sets {
        common = common.intersection(set).copied().collect();
    }
    common
}

/// What the conflist offers when the plugins share `common`: `cniVersion` the highest common
/// version up to 1.0.0 (the highest one when none is that low), `cniVersions` every common
/// version from 0.4.0 on; `None` when they share none.
pub fn offered(common: &BTreeSet<SpecVersion>) -> Option<ConfVersions> {
    let highest = *common.last()?;
    let cni_version = common
        .range(..=DEFAULT_MAX)
        .next_back()
        .copied()
        .unwrap_or(highest);
    Some(ConfVersions {
        cni_version,
        cni_versions: common.range(OLDEST_OFFERED..).copied().collect(),
    })
}

/// The conflist's versions for `plugins` in `bin_dir`: [`offered`] by what they support, or
/// only `pin`. By default a missing or silent plugin is skipped with a warning (the conflist
/// must be written anyway); a pin is refused when a plugin that is there does not support it.
pub fn for_plugins(
    bin_dir: &Path,
    plugins: &[&str],
    pin: Option<SpecVersion>,
) -> Result<ConfVersions, VersionError> {
    let mut sets = Vec::new();
    for name in plugins {
        let path = bin_dir.join(name);
        match (supported(&path), pin) {
            (Some(set), Some(version)) if !set.contains(&version) => {
                let supports: Vec<String> = set.iter().map(|v| v.to_string()).collect();
                return Err(VersionError::Unsupported {
                    plugin: path,
                    version,
                    supports: supports.join(", "),
                });
            }
            (None, Some(version)) if path.exists() => {
                return Err(VersionError::Unanswered {
                    plugin: path,
                    version,
                })
            }
            (Some(set), _) => sets.push(set),
            (None, _) => log::warn!(
                "cannot ask {} for its versions; the conflist does not take it into account",
                path.display()
            ),
        }
    }
    if let Some(version) = pin {
        return Ok(ConfVersions {
            cni_version: version,
            cni_versions: Vec::new(),
        });
    }
    Ok(offered(&common(&sets)).unwrap_or_else(|| {
        log::warn!(
            "the plugins in {} share no CNI version; the conflist offers every version",
            bin_dir.display()
        );
        offered(&common([])).expect("rcni knows versions")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(vs: &[&str]) -> BTreeSet<SpecVersion> {
        vs.iter().map(|v| SpecVersion::parse(v).unwrap()).collect()
    }

    fn list(vs: &[&str]) -> Vec<SpecVersion> {
        vs.iter().map(|v| SpecVersion::parse(v).unwrap()).collect()
    }

    const RCNI: &[&str] = &[
        "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
    ];
    const GO: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"];

    #[test]
    fn the_default_is_1_0_0_with_every_common_version_from_0_4_0_listed() {
        let (rcni, go) = (set(RCNI), set(GO));
        assert_eq!(
            offered(&common([&rcni, &rcni])),
            Some(ConfVersions {
                cni_version: SpecVersion::V1_0_0,
                cni_versions: list(&["0.4.0", "1.0.0", "1.1.0"]),
            })
        );
        assert_eq!(
            offered(&common([&rcni, &go])),
            Some(ConfVersions {
                cni_version: SpecVersion::V1_0_0,
                cni_versions: list(&["0.4.0", "1.0.0"]),
            })
        );
        // Below 1.0.0: the highest common one, and only what is common in the list.
        let old = set(&["0.3.1", "0.4.0"]);
        assert_eq!(
            offered(&common([&rcni, &old])),
            Some(ConfVersions {
                cni_version: SpecVersion::V0_4_0,
                cni_versions: list(&["0.4.0"]),
            })
        );
        let older = set(&["0.2.0", "0.3.1"]);
        assert_eq!(
            offered(&common([&go, &older])),
            Some(ConfVersions {
                cni_version: SpecVersion::V0_3_1,
                cni_versions: Vec::new(),
            })
        );
        // Versions rcni does not know are not offered; nothing shared is `None`.
        assert_eq!(
            offered(&common([&set(&["1.0.0", "1.2.0"])]))
                .unwrap()
                .cni_versions,
            list(&["1.0.0"])
        );
        assert_eq!(offered(&common([&set(&["0.1.0"]), &set(&["1.0.0"])])), None);
    }

    #[test]
    fn a_pin_must_be_a_known_full_version() {
        assert_eq!(parse_pin("1.0.0").unwrap(), SpecVersion::V1_0_0);
        assert_eq!(parse_pin("0.3.1").unwrap(), SpecVersion::V0_3_1);
        for bad in ["1.2.0", "1.0", "", "x", "9.9.9"] {
            let err = parse_pin(bad).unwrap_err().to_string();
            assert!(err.contains("not a CNI version rcni knows"), "{bad}: {err}");
        }
    }

    fn fake_plugin(dir: &Path, name: &str, versions: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        let answer = format!(r#"{{"cniVersion":"1.0.0","supportedVersions":{versions}}}"#);
        std::fs::write(&path, format!("#!/bin/sh\necho '{answer}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_pin_is_refused_when_a_plugin_does_not_support_it() {
        let dir = tempfile::tempdir().unwrap();
        fake_plugin(dir.path(), "bridge", r#"["0.4.0","1.0.0","1.1.0"]"#);
        fake_plugin(dir.path(), "portmap", r#"["0.4.0","1.0.0"]"#);
        let plugins = ["bridge", "portmap", "missing"];
        let pinned = for_plugins(dir.path(), &plugins, Some(SpecVersion::V0_4_0)).unwrap();
        assert_eq!(pinned.cni_version, SpecVersion::V0_4_0);
        assert!(pinned.cni_versions.is_empty());
        let err = for_plugins(dir.path(), &plugins, Some(SpecVersion::V1_1_0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "--cni-version 1.1.0: {}/portmap supports only 0.4.0, 1.0.0",
                dir.path().display()
            )
        );
        // By default: 1.0.0 and what both support.
        let offered = for_plugins(dir.path(), &plugins, None).unwrap();
        assert_eq!(offered.cni_version, SpecVersion::V1_0_0);
        assert_eq!(offered.cni_versions, list(&["0.4.0", "1.0.0"]));
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
        let all = for_plugins(dir.path(), &["bridge"], None).unwrap();
        assert_eq!(all.cni_version, SpecVersion::V1_0_0);
        assert_eq!(all.cni_versions, list(&["0.4.0", "1.0.0", "1.1.0"]));
    }
}
