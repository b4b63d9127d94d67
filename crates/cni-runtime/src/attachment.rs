//! The parameters of one attachment (libcni's `RuntimeConf`; SPEC.md, Section 3: "Attachment
//! Parameters").

use std::path::PathBuf;

use serde_json::{Map, Value};

use cni_attribution::AttachmentId;
use cni_types::{
    netns_text, validate_container_id, validate_interface_name, validate_network_name, CniArgs,
};

use crate::error::RuntimeError;

/// Container ID, netns, interface name, `CNI_ARGS` and capability arguments of one attachment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attachment {
    pub container_id: String,
    /// The netns path; may be empty for DEL. Passed to plugins as its bytes; it must be UTF-8
    /// all the same, since the cache entry records it as JSON text (see [`Attachment::validate`]).
    pub netns: PathBuf,
    pub ifname: String,
    /// `CNI_ARGS` pairs, in order.
    pub args: Vec<(String, String)>,
    /// Capability name to value; a plugin receives the ones it declares in `runtimeConfig`.
    pub capability_args: Map<String, Value>,
}

impl Attachment {
    pub fn new(
        container_id: impl Into<String>,
        netns: impl Into<PathBuf>,
        ifname: impl Into<String>,
    ) -> Self {
        Attachment {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            ..Default::default()
        }
    }

    pub fn with_args(mut self, args: Vec<(String, String)>) -> Self {
        self.args = args;
        self
    }

    pub fn with_capability(mut self, name: &str, value: Value) -> Self {
        self.capability_args.insert(name.to_string(), value);
        self
    }

    /// The attachment's identity in `network`.
    pub fn id(&self, network: &str) -> AttachmentId {
        AttachmentId::new(network, &self.container_id, &self.ifname)
    }

    /// `CNI_ARGS` in its environment form (as libcni's `stringify` in `pkg/invoke/args.go`).
    pub fn args_env(&self) -> String {
        CniArgs::from_pairs(self.args.clone()).to_env_string()
    }

    /// Checks everything that ends up in a cache file name or entry, on every command (better
    /// than libcni, which checks on ADD only): the entry records the netns as JSON text.
    pub fn validate(&self, network: &str) -> Result<(), RuntimeError> {
        validate_network_name(network).map_err(RuntimeError::Invalid)?;
        validate_container_id(&self.container_id).map_err(RuntimeError::Invalid)?;
        validate_interface_name(&self.ifname).map_err(RuntimeError::Invalid)?;
        netns_text(&self.netns)?;
        Ok(())
    }
}
