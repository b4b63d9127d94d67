//! The parameters of one attachment (libcni's `RuntimeConf`; SPEC.md, Section 3: "Attachment
//! Parameters").

use serde_json::{Map, Value};

use cni_attribution::AttachmentId;
use cni_types::{validate_container_id, validate_interface_name, validate_network_name, CniArgs};

use crate::error::RuntimeError;

/// Container ID, netns, interface name, `CNI_ARGS` and capability arguments of one attachment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attachment {
    pub container_id: String,
    /// The netns path; may be empty for DEL.
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS` pairs, in order.
    pub args: Vec<(String, String)>,
    /// Capability name to value; a plugin receives the ones it declares in `runtimeConfig`.
    pub capability_args: Map<String, Value>,
}

impl Attachment {
    pub fn new(
        container_id: impl Into<String>,
        netns: impl Into<String>,
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

    /// Checks everything that ends up in a cache file name, on every command (better than
    /// libcni, which checks on ADD only).
    pub fn validate(&self, network: &str) -> Result<(), RuntimeError> {
        validate_network_name(network).map_err(RuntimeError::Invalid)?;
        validate_container_id(&self.container_id).map_err(RuntimeError::Invalid)?;
        validate_interface_name(&self.ifname).map_err(RuntimeError::Invalid)
    }
}
