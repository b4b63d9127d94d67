//! The CNI specification model: versions, configs, results, errors, CNI_ARGS, GC lists and
//! the VERSION answer. Pure data: no I/O, no OS-specific code.

pub mod args;
pub mod config;
pub mod error;
pub mod gc;
pub mod go_decode;
pub mod go_object;
pub mod names;
pub mod netns;
pub mod node_agent;
pub mod raw;
pub mod result;
pub mod version;
pub mod version_info;

pub use args::{ArgsError, CniArgs};
pub use config::{ConfigError, NetConf, NetConfList};
pub use error::{code, CniError};
pub use go_object::{FieldError, GoObject};
pub use names::{validate_container_id, validate_interface_name, validate_network_name};
pub use netns::{netns_text, NetnsNotUtf8};
pub use raw::RawObject;
pub use result::{CniResult, Dns, Interface, IpConfig, ResultError, Route};
pub use version::{SpecVersion, VersionParseError};
pub use version_info::VersionInfo;

/// JSON with 4-space indentation, the format Go plugins print.
pub fn pretty_json<T: serde::Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    if value.serialize(&mut ser).is_err() {
        return String::from("{}");
    }
    String::from_utf8(out).unwrap_or_default()
}
