//! One loaded network: a config list (legacy single-plugin files already wrapped), its plugins
//! including those from the network's sub-directory, and the version it runs at.

use std::path::{Path, PathBuf};

use cni_types::config::ConfigError;
use cni_types::{validate_network_name, NetConfList, RawObject, SpecVersion};

use crate::conf_dir::conf_files;
use crate::error::RuntimeError;

/// The built-in loopback network that containerd's go-cni attaches on `lo`.
pub const LOOPBACK_CONFIG: &str =
    r#"{"cniVersion":"0.3.1","name":"cni-loopback","plugins":[{"type":"loopback"}]}"#;

/// A network ready to run.
#[derive(Debug, Clone)]
pub struct Network {
    /// The list; `plugins` holds the inline plugins followed by sub-directory plugins (libcni's
    /// `NetworkConfFromFile`).
    pub list: NetConfList,
    /// The version every request of this network carries (the highest of `cniVersion` and
    /// `cniVersions`, as libcni's `NetworkConfFromBytes` selects it).
    pub version: SpecVersion,
    /// The file it was loaded from, if any.
    pub source: Option<PathBuf>,
}

/// A load problem with the position serde reported, when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadProblem {
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl LoadProblem {
    fn from_config(e: &ConfigError) -> Self {
        let (line, column) = match e {
            ConfigError::Json(j) if j.line() > 0 => (Some(j.line()), Some(j.column())),
            _ => (None, None),
        };
        LoadProblem {
            message: e.to_string(),
            line,
            column,
        }
    }

    fn plain(message: impl Into<String>) -> Self {
        LoadProblem {
            message: message.into(),
            line: None,
            column: None,
        }
    }

    pub(crate) fn into_error(self, file: Option<&Path>) -> RuntimeError {
        let message = match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{} (line {l}, column {c})", self.message),
            _ => self.message,
        };
        RuntimeError::Config {
            file: file.map(Path::to_path_buf),
            message,
        }
    }
}

impl Network {
    /// A network from list bytes (`.conflist` content), without sub-directory plugins.
    pub fn from_list_bytes(bytes: &[u8]) -> Result<Network, RuntimeError> {
        Network::from_list(parse_list(bytes).map_err(|p| p.into_error(None))?)
            .map_err(|p| p.into_error(None))
    }

    /// A network from a legacy single-plugin config (`.conf` content), wrapped as a list (libcni's
    /// `ConfListFromConf`).
    pub fn from_single_plugin_bytes(bytes: &[u8]) -> Result<Network, RuntimeError> {
        let list = NetConfList::from_single_plugin(bytes)
            .map_err(|e| LoadProblem::from_config(&e).into_error(None))?;
        Network::from_list(list).map_err(|p| p.into_error(None))
    }

    /// The built-in `cni-loopback` network.
    pub fn loopback() -> Network {
        let mut plugin = RawObject::new();
        // Serializing a &str cannot fail.
        let _ = plugin.set("type", "loopback");
        Network {
            list: NetConfList {
                name: "cni-loopback".into(),
                cni_version: "0.3.1".into(),
                cni_versions: Vec::new(),
                disable_check: false,
                disable_gc: false,
                load_only_inlined_plugins: false,
                plugins: vec![plugin],
                has_plugins_key: true,
                bytes: LOOPBACK_CONFIG.as_bytes().to_vec(),
            },
            version: SpecVersion::V0_3_1,
            source: None,
        }
    }

    /// Loads one file: `.conflist` as a list plus its sub-directory plugins, anything
    /// else as a legacy single-plugin config. Unlike libcni, a list-shaped `.conf`/`.json` is
    /// accepted as a list.
    pub fn load_file(path: &Path) -> Result<Network, RuntimeError> {
        Network::load_file_problem(path).map_err(|p| p.into_error(Some(path)))
    }

    pub(crate) fn load_file_problem(path: &Path) -> Result<Network, LoadProblem> {
        let bytes = std::fs::read(path)
            .map_err(|e| LoadProblem::plain(format!("cannot read file: {e}")))?;
        let is_conflist = is_conflist(path);
        let mut list = if is_conflist || looks_like_list(&bytes) {
            parse_list(&bytes)?
        } else {
            NetConfList::from_single_plugin(&bytes).map_err(|e| LoadProblem::from_config(&e))?
        };
        // Only a `.conflist` gets plugins from `<its dir>/<network name>/` (libcni's
        // NetworkConfFromFile; the `.conf`/`.json` fallback never looks there).
        if is_conflist && !list.load_only_inlined_plugins {
            if let Some(dir) = path.parent() {
                let extra = subdir_plugins(&dir.join(&list.name))?;
                if !extra.is_empty() {
                    list.plugins.extend(extra);
                    list.bytes = bytes_with_plugins(&list.bytes, &list.plugins)?;
                }
            }
        }
        let mut net = Network::from_list(list)?;
        net.source = Some(path.to_path_buf());
        Ok(net)
    }

    fn from_list(list: NetConfList) -> Result<Network, LoadProblem> {
        validate_network_name(&list.name)
            .map_err(|e| LoadProblem::plain(format!("{}: {:?}", e.msg, list.name)))?;
        if list.plugins.is_empty() {
            return Err(LoadProblem::plain(format!(
                "no plugin configs found for network {:?}",
                list.name
            )));
        }
        let version = list
            .select_version()
            .map_err(|e| LoadProblem::from_config(&e))?;
        Ok(Network {
            list,
            version,
            source: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.list.name
    }

    pub fn plugins(&self) -> &[RawObject] {
        &self.list.plugins
    }

    /// The bytes the result cache stores as `config` (the list file as read).
    pub fn config_bytes(&self) -> &[u8] {
        &self.list.bytes
    }

    /// The `type` of every plugin, in chain order.
    pub fn plugin_types(&self) -> Vec<String> {
        self.plugins().iter().map(plugin_type).collect()
    }
}

/// A plugin object's `type` (always present: checked when the list was parsed).
pub(crate) fn plugin_type(p: &RawObject) -> String {
    p.decode::<String>("type")
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// A plugin object's own `name`, if any (used in messages, as libcni does).
pub(crate) fn plugin_name(p: &RawObject) -> Option<String> {
    p.get("name")
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .filter(|s| !s.is_empty())
}

fn parse_list(bytes: &[u8]) -> Result<NetConfList, LoadProblem> {
    NetConfList::parse(bytes).map_err(|e| LoadProblem::from_config(&e))
}

/// True for a file libcni loads as a list with sub-directory plugins: extension `.conflist`.
pub(crate) fn is_conflist(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "conflist")
}

/// The list file's bytes with `plugins` replaced by the whole chain (inline plus
/// sub-directory plugins). These bytes are what the result cache stores as `config`, so a DEL
/// or GC from the cache after the directory changed still runs every plugin the ADD ran
/// (libcni caches only the inline plugins).
fn bytes_with_plugins(list_bytes: &[u8], plugins: &[RawObject]) -> Result<Vec<u8>, LoadProblem> {
    let mut obj = RawObject::parse(list_bytes)
        .map_err(|e| LoadProblem::plain(format!("cannot re-read the list: {e}")))?;
    obj.set("plugins", plugins)
        .map_err(|e| LoadProblem::plain(format!("cannot inline sub-directory plugins: {e}")))?;
    Ok(obj.to_bytes())
}

/// True for an object with a `plugins` key and no `type` key.
fn looks_like_list(bytes: &[u8]) -> bool {
    RawObject::parse(bytes)
        .map(|o| o.contains_key("plugins") && !o.contains_key("type"))
        .unwrap_or(false)
}

/// The `*.conf` plugin objects of `<confdir>/<network name>/`, in file-name order. A missing
/// directory is fine; a bad file fails the network (skipping one plugin of a chain could leave
/// a firewall or IPAM step out silently).
fn subdir_plugins(dir: &Path) -> Result<Vec<RawObject>, LoadProblem> {
    let files = match conf_files(dir, &["conf"]) {
        Ok(f) => f,
        Err(e) => {
            return Err(LoadProblem::plain(format!(
                "cannot read plugin directory {}: {e}",
                dir.display()
            )))
        }
    };
    let mut plugins = Vec::new();
    for file in files {
        let fail = |msg: String, line, column| LoadProblem {
            message: format!("plugin file {}: {msg}", file.display()),
            line,
            column,
        };
        let bytes = std::fs::read(&file).map_err(|e| fail(e.to_string(), None, None))?;
        let obj = RawObject::parse(&bytes)
            .map_err(|e| fail(e.to_string(), Some(e.line()), Some(e.column())))?;
        if plugin_type(&obj).is_empty() {
            return Err(fail("missing 'type'".into(), None, None));
        }
        plugins.push(obj);
    }
    Ok(plugins)
}
