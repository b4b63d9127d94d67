//! Running a real plugin binary in the sandbox's host namespace, the way a runtime does.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use crate::process::{run, PROCESS_TIMEOUT};
use crate::{PluginOutput, Sandbox};

/// One plugin invocation: the CNI environment and stdin.
///
/// Only the `CNI_*` variables set here reach the plugin; those inherited by the test
/// process are removed. Unset fields are not passed at all (to test missing-variable
/// errors). Everything else of the test's environment, such as `PATH`, is kept.
///
/// ```no_run
/// # let sb = cni_testkit::Sandbox::new()?;
/// # let c = sb.add_container()?;
/// # let cni_path = "/usr/lib/cni";
/// let call = cni_testkit::PluginCall::new("ADD")
///     .container_id("c1")
///     .netns(&c.path)
///     .ifname("eth0")
///     .path(cni_path)
///     .stdin(r#"{"cniVersion":"1.0.0","name":"n","type":"loopback"}"#);
/// let out = sb.run_plugin("/usr/lib/cni/loopback", &call)?;
/// out.assert_success();
/// # anyhow::Ok(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginCall {
    /// `CNI_COMMAND`
    pub command: Option<OsString>,
    /// `CNI_CONTAINERID`
    pub container_id: Option<OsString>,
    /// `CNI_NETNS`
    pub netns: Option<OsString>,
    /// `CNI_IFNAME`
    pub ifname: Option<OsString>,
    /// `CNI_ARGS`
    pub args: Option<OsString>,
    /// `CNI_PATH`
    pub path: Option<OsString>,
    /// Written to the plugin's stdin (the network config).
    pub stdin: String,
    /// More variables, set after the `CNI_*` ones (so they may also override them).
    pub extra_env: Vec<(OsString, OsString)>,
}

impl PluginCall {
    /// A call with only `CNI_COMMAND` set and empty stdin.
    pub fn new(command: impl AsRef<OsStr>) -> Self {
        PluginCall {
            command: Some(command.as_ref().to_owned()),
            ..PluginCall::default()
        }
    }

    pub fn container_id(mut self, value: impl AsRef<OsStr>) -> Self {
        self.container_id = Some(value.as_ref().to_owned());
        self
    }

    pub fn netns(mut self, value: impl AsRef<OsStr>) -> Self {
        self.netns = Some(value.as_ref().to_owned());
        self
    }

    pub fn ifname(mut self, value: impl AsRef<OsStr>) -> Self {
        self.ifname = Some(value.as_ref().to_owned());
        self
    }

    pub fn args(mut self, value: impl AsRef<OsStr>) -> Self {
        self.args = Some(value.as_ref().to_owned());
        self
    }

    pub fn path(mut self, value: impl AsRef<OsStr>) -> Self {
        self.path = Some(value.as_ref().to_owned());
        self
    }

    pub fn stdin(mut self, config: impl Into<String>) -> Self {
        self.stdin = config.into();
        self
    }

    /// Adds one variable to `extra_env`.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.extra_env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The variables this call sets, in the order they are applied.
    pub fn env_vars(&self) -> Vec<(OsString, OsString)> {
        let cni = [
            ("CNI_COMMAND", &self.command),
            ("CNI_CONTAINERID", &self.container_id),
            ("CNI_NETNS", &self.netns),
            ("CNI_IFNAME", &self.ifname),
            ("CNI_ARGS", &self.args),
            ("CNI_PATH", &self.path),
        ];
        cni.into_iter()
            .filter_map(|(key, value)| Some((OsString::from(key), value.clone()?)))
            .chain(self.extra_env.iter().cloned())
            .collect()
    }
}

impl Sandbox {
    /// Executes `binary` in the host namespace (`ip netns exec <host> <binary>`) with the
    /// call's environment and stdin, and waits for it (killed after
    /// [`PROCESS_TIMEOUT`](crate::PROCESS_TIMEOUT)).
    ///
    /// The path is executed as given, so a symlink made by [`Sandbox::link_plugins`]
    /// becomes argv\[0\] and selects the plugin of a multi-call binary.
    /// A failing plugin is not an error here: check [`PluginOutput`].
    pub fn run_plugin(
        &self,
        binary: impl AsRef<Path>,
        call: &PluginCall,
    ) -> anyhow::Result<PluginOutput> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.host().name])
            .arg(binary.as_ref());
        call.execute(cmd)
    }
}

impl PluginCall {
    /// Executes `binary` in the test's own namespace with the call's environment and stdin,
    /// for calls that touch no network (decoding, refusals); waits as
    /// [`Sandbox::run_plugin`] does.
    pub fn run_here(&self, binary: impl AsRef<Path>) -> anyhow::Result<PluginOutput> {
        self.execute(Command::new(binary.as_ref()))
    }

    fn execute(&self, mut cmd: Command) -> anyhow::Result<PluginOutput> {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CNI_") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.env_vars());
        run(cmd, self.stdin.as_bytes(), PROCESS_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_vars_are_exactly_the_fields_set() {
        let call = PluginCall::new("DEL")
            .container_id("cid")
            .ifname("eth0")
            .env("RUST_LOG", "debug");
        let vars: Vec<_> = call
            .env_vars()
            .into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(
            vars,
            [
                "CNI_COMMAND=DEL",
                "CNI_CONTAINERID=cid",
                "CNI_IFNAME=eth0",
                "RUST_LOG=debug"
            ]
        );
        assert!(PluginCall::default().env_vars().is_empty());
    }
}
