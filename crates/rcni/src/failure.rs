//! How a verb fails: usage problems exit 2, failed operations exit 1 with the CNI error code
//! and message printed so a shell user can act on them.

use cni_runtime::RuntimeError;
use cni_types::{code, CniError};

#[derive(Debug)]
pub enum Failure {
    /// Bad flags or environment (exit 2).
    Usage(String),
    /// The operation ran and failed (exit 1).
    Failed { verb: String, error: CniError },
    /// Failed, and the verb has already told the user how (exit 1, nothing more printed).
    Reported,
}

impl Failure {
    pub fn usage(msg: impl Into<String>) -> Self {
        Failure::Usage(msg.into())
    }

    pub fn runtime(verb: &str, e: &RuntimeError) -> Self {
        Failure::Failed {
            verb: verb.to_string(),
            error: e.to_cni_error(),
        }
    }

    pub fn other(verb: &str, code: u32, msg: impl Into<String>) -> Self {
        Failure::Failed {
            verb: verb.to_string(),
            error: CniError::new(code, msg),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Failed { .. } | Failure::Reported => 1,
        }
    }

    /// Prints the failure: a CNI error object on stdout with `--json`, text on stderr otherwise.
    pub fn report(&self, json: bool) {
        match self {
            Failure::Reported => {}
            Failure::Usage(msg) => {
                eprintln!("rcni: {msg}\nTry 'rcni --help' for more information.")
            }
            Failure::Failed { error, .. } if json => {
                println!("{}", error.to_json(cni_types::SpecVersion::CURRENT));
            }
            Failure::Failed { verb, error } => {
                eprintln!("rcni: {verb} failed: {}", error.msg);
                if !error.details.is_empty() {
                    eprintln!("  details: {}", error.details);
                }
                eprintln!(
                    "  CNI error code {} ({})",
                    error.code,
                    code_name(error.code)
                );
            }
        }
    }
}

/// A short name for a CNI error code.
pub fn code_name(c: u32) -> &'static str {
    match c {
        code::UNKNOWN => "unknown error",
        code::INCOMPATIBLE_VERSION => "incompatible CNI version",
        code::UNSUPPORTED_FIELD => "unsupported field in network configuration",
        code::UNKNOWN_CONTAINER => "container unknown or does not exist",
        code::INVALID_ENVIRONMENT => "invalid necessary environment variables",
        code::IO_FAILURE => "I/O failure",
        code::DECODING_FAILURE => "failed to decode content",
        code::INVALID_NETWORK_CONFIG => "invalid network config",
        code::INVALID_NETNS => "invalid network namespace",
        code::TRY_AGAIN_LATER => "try again later",
        code::PLUGIN_NOT_AVAILABLE => "plugin not available",
        code::PLUGIN_NOT_AVAILABLE_LIMITED => {
            "plugin not available, existing containers may be affected"
        }
        code::INTERNAL => "internal error",
        c if c >= code::PLUGIN_SPECIFIC_MIN => "plugin-specific error",
        _ => "reserved error code",
    }
}
