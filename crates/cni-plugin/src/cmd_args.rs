//! What a plugin callback is given: the attachment parameters, the request config and the
//! negotiated version.

use std::path::PathBuf;

use cni_attribution::AttachmentId;
use cni_invoke::Invocation;
use cni_types::{CniArgs, CniError, CniResult, NetConf, SpecVersion};

use crate::command::Command;

/// The arguments of one plugin run (Go's `skel.CmdArgs`, plus the parsed config).
///
/// Fields the command does not carry are empty (for example `container_id` for GC).
#[derive(Debug, Clone)]
pub struct CmdArgs {
    pub command: Command,
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_NETNS` (may be empty for DEL). The runner only passes one that is UTF-8 (see
    /// [`CmdArgs::sandbox`]).
    pub netns: PathBuf,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS` as received; see [`CmdArgs::cni_args`] for the parsed form.
    pub args: String,
    /// `CNI_PATH` as received; see [`CmdArgs::path_dirs`].
    pub path: String,
    /// The request config exactly as read from stdin (what delegates receive).
    pub stdin: Vec<u8>,
    /// The parsed request config.
    pub conf: NetConf,
    /// The negotiated version: results are printed in it.
    pub version: SpecVersion,
    /// The config's `prevResult`, parsed (any layout is accepted).
    pub prev_result: Option<CniResult>,
}

impl CmdArgs {
    /// Builds arguments from a request config, outside the runner (tests, tools). The version
    /// is the config's own; attachment fields are empty and can be set directly.
    pub fn new(command: Command, stdin: &[u8]) -> Result<CmdArgs, CniError> {
        let conf = parse_conf(stdin)?;
        let version = conf
            .version()
            .map_err(|e| CniError::decoding(e.to_string()))?;
        let prev_result = parse_prev_result(&conf, version)?;
        Ok(CmdArgs {
            command,
            container_id: String::new(),
            netns: PathBuf::new(),
            ifname: String::new(),
            args: String::new(),
            path: String::new(),
            stdin: stdin.to_vec(),
            conf,
            version,
            prev_result,
        })
    }

    /// `CNI_ARGS` parsed as Go's `LoadArgs` does; a malformed string is code 4.
    pub fn cni_args(&self) -> Result<CniArgs, CniError> {
        CniArgs::parse(&self.args).map_err(|e| e.to_cni_error())
    }

    /// The attachment this request is for (network, container ID, interface name).
    pub fn id(&self) -> AttachmentId {
        AttachmentId::new(&self.conf.name, &self.container_id, &self.ifname)
    }

    /// The attachments a GC keeps (`cni.dev/valid-attachments`). The runner is the one GC
    /// policy: it refuses a GC without that key with code 7 before any plugin's `gc` runs, so
    /// a plugin never decides what "no list" means; outside GC an absent list is empty.
    pub fn valid_attachments(&self) -> &[AttachmentId] {
        self.conf.valid_attachments.as_deref().unwrap_or_default()
    }

    /// `CNI_NETNS` as a result's interface `sandbox` (JSON text). A path that is not UTF-8
    /// is refused with code 4, never put in as a lossy copy naming another path; the runner
    /// refuses such a `CNI_NETNS` before any callback, so only hand-built arguments meet it.
    pub fn sandbox(&self) -> Result<&str, CniError> {
        Ok(cni_types::netns_text(&self.netns)?)
    }

    /// The directories of `CNI_PATH`.
    pub fn path_dirs(&self) -> Vec<PathBuf> {
        std::env::split_paths(&self.path)
            .filter(|p| !p.as_os_str().is_empty())
            .collect()
    }

    /// The same attachment as an invocation of another plugin with `command` (delegation).
    pub fn invocation(&self, command: Command) -> Invocation {
        Invocation {
            command: command.as_str().to_string(),
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            args: self.args.clone(),
            path: self.path.clone(),
        }
    }
}

/// Parses stdin as the skeleton does: code 6 for bad JSON, code 7 for a missing or invalid
/// `name` or a malformed known key.
pub(crate) fn parse_conf(stdin: &[u8]) -> Result<NetConf, CniError> {
    NetConf::parse(stdin).map_err(|e| match e {
        cni_types::ConfigError::Json(j) => {
            CniError::decoding(format!("error unmarshall network config: {j}"))
        }
        other => other.to_cni_error(),
    })
}

/// Parses `prevResult`; a result without `cniVersion` takes the config's version (Go's
/// `version.ParsePrevResult`).
pub(crate) fn parse_prev_result(
    conf: &NetConf,
    version: SpecVersion,
) -> Result<Option<CniResult>, CniError> {
    conf.prev_result
        .as_ref()
        .map(|v| CniResult::parse(v, version))
        .transpose()
        .map_err(|e| CniError::decoding("could not parse prevResult").with_details(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // prevResult parsed at the config version; a versionless one inherits it.
    #[test]
    fn new_parses_conf_and_prev_result() {
        let a = CmdArgs::new(
            Command::Add,
            br#"{"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"ips":[{"address":"198.18.0.2/24"}]}}"#,
        )
        .unwrap();
        assert_eq!(a.version, SpecVersion::V1_0_0);
        let prev = a.prev_result.unwrap();
        assert_eq!(prev.cni_version, SpecVersion::V1_0_0);
        assert_eq!(prev.ips[0].address.to_string(), "198.18.0.2/24");

        let e = CmdArgs::new(
            Command::Add,
            br#"{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":[{"address":"bogus"}]}}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, cni_types::code::DECODING_FAILURE);
        assert_eq!(e.msg, "could not parse prevResult");
    }

    #[test]
    fn args_path_and_invocation() {
        let mut a = CmdArgs::new(Command::Add, br#"{"name":"n"}"#).unwrap();
        assert_eq!(a.version, SpecVersion::V0_1_0);
        a.args = "IgnoreUnknown=1;K8S_POD_NAME=p".into();
        assert_eq!(a.cni_args().unwrap().get("K8S_POD_NAME"), Some("p"));
        a.args = "A=B=C".into();
        assert_eq!(a.cni_args().unwrap_err().code, 4);
        a.path = "/a::/b".into();
        assert_eq!(
            a.path_dirs(),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        a.container_id = "c1".into();
        let inv = a.invocation(Command::Del);
        assert_eq!(inv.command, "DEL");
        assert_eq!(inv.container_id, "c1");
        assert_eq!(inv.path, "/a::/b");
    }

    // Messages for bad JSON (code 6) and a bad network name (code 7).
    #[test]
    fn conf_errors() {
        let e = parse_conf(b"{not json").unwrap_err();
        assert_eq!(e.code, 6);
        assert!(e.msg.starts_with("error unmarshall network config: "));
        let e = parse_conf(br#"{"cniVersion":"1.1.0","type":"p"}"#).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (7, "missing network name"));
    }
}
