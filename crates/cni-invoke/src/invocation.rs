//! The six CNI_* variables of one plugin run.

use std::ffi::OsStr;
use std::path::PathBuf;

/// What a plugin run is told through its environment (SPEC.md, Section 2: Execution Protocol). All
/// six are always sent, empty where there is nothing to say (as libcni's `CNIConfig.args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    pub command: String,
    pub container_id: String,
    /// CNI_NETNS: a path, passed to the plugin as its bytes (never a lossy copy).
    pub netns: PathBuf,
    pub ifname: String,
    /// CNI_ARGS, already in `K=V;K=V` form.
    pub args: String,
    /// CNI_PATH, already joined with `:`.
    pub path: String,
}

impl Invocation {
    pub fn new(command: &str) -> Self {
        Invocation {
            command: command.to_string(),
            ..Default::default()
        }
    }

    /// The same attachment with another command (delegation keeps everything else).
    pub fn with_command(&self, command: &str) -> Self {
        Invocation {
            command: command.to_string(),
            ..self.clone()
        }
    }

    /// The variables, in the order the spec lists them.
    pub fn env(&self) -> [(&'static str, &OsStr); 6] {
        [
            ("CNI_COMMAND", self.command.as_ref()),
            ("CNI_CONTAINERID", self.container_id.as_ref()),
            ("CNI_NETNS", self.netns.as_os_str()),
            ("CNI_IFNAME", self.ifname.as_ref()),
            ("CNI_ARGS", self.args.as_ref()),
            ("CNI_PATH", self.path.as_ref()),
        ]
    }

    /// Splits CNI_PATH into directories.
    pub fn path_dirs(&self) -> Vec<std::path::PathBuf> {
        std::env::split_paths(&self.path)
            .filter(|p| !p.as_os_str().is_empty())
            .collect()
    }
}

/// rcni's own `CNI_COMMAND` values beyond the spec's six: the nf_tables repair of one
/// attachment's plugin, with the request config the plugin got at ADD on stdin.
/// `RCNI_REPAIR` puts back what is missing; `RCNI_REPAIR_LOOK` only says what is. The
/// runtime sends them only to rcni's `rcni-plugins` executable, under its own name (never to
/// another plugin), which runs the plugin named by the config's `type`; the plugin answers
/// through its `repair` method (`cni_plugin::repair`). The answer on stdout is
/// `{"restored": [what was missing, ...]}`, or `{"ownsNoRules": true}` for a plugin type
/// that makes no rules; a failure is a CNI error.
pub const RCNI_REPAIR: &str = "RCNI_REPAIR";
/// See [`RCNI_REPAIR`].
pub const RCNI_REPAIR_LOOK: &str = "RCNI_REPAIR_LOOK";
