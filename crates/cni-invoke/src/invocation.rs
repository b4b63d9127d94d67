//! The six CNI_* variables of one plugin run.

/// What a plugin run is told through its environment (SPEC.md, Section 2: Execution Protocol). All
/// six are always sent, empty where there is nothing to say (as libcni's `CNIConfig.args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    pub command: String,
    pub container_id: String,
    pub netns: String,
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
    pub fn env(&self) -> [(&'static str, &str); 6] {
        [
            ("CNI_COMMAND", &self.command),
            ("CNI_CONTAINERID", &self.container_id),
            ("CNI_NETNS", &self.netns),
            ("CNI_IFNAME", &self.ifname),
            ("CNI_ARGS", &self.args),
            ("CNI_PATH", &self.path),
        ]
    }

    /// Splits CNI_PATH into directories.
    pub fn path_dirs(&self) -> Vec<std::path::PathBuf> {
        std::env::split_paths(&self.path)
            .filter(|p| !p.as_os_str().is_empty())
            .collect()
    }
}

/// rcni's own `CNI_COMMAND` values beyond the spec's six, answered only by the `rcni-plugins`
/// executable run under its own name (never by a plugin name, never sent to another
/// plugin): the nf_tables repair of one attachment's plugin, with the request config the
/// plugin got at ADD on stdin. `RCNI_REPAIR` puts back what is missing; `RCNI_REPAIR_LOOK`
/// only says what is. The answer on stdout is `{"restored": [what was missing, ...]}`, or
/// `{"ownsNoRules": true}` for a plugin type that makes no rules; a failure is a CNI error.
pub const RCNI_REPAIR: &str = "RCNI_REPAIR";
/// See [`RCNI_REPAIR`].
pub const RCNI_REPAIR_LOOK: &str = "RCNI_REPAIR_LOOK";
