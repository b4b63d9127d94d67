//! The six CNI commands (SPEC.md, Section 2: Execution Protocol) and rcni's own repair
//! commands (see [`crate::repair`]).

use std::fmt;

use cni_invoke::{RCNI_REPAIR, RCNI_REPAIR_LOOK};

use crate::repair::RepairMode;

/// A value of `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
    /// rcni's repair of an attachment's rules (`RCNI_REPAIR`, `RCNI_REPAIR_LOOK`).
    Repair(RepairMode),
}

impl Command {
    /// Parses the exact upper-case spelling the spec (or rcni) uses; anything else is `None`.
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            RCNI_REPAIR => Command::Repair(RepairMode::Repair),
            RCNI_REPAIR_LOOK => Command::Repair(RepairMode::Look),
            _ => return None,
        })
    }

    /// rcni's own commands: the runtime sends them to a multi-call executable under its own
    /// name, and the plugin that answers is the request config's `type`
    /// ([`crate::run_by_config_type`]).
    pub fn is_rcni_own(self) -> bool {
        matches!(self, Command::Repair(_))
    }

    /// The `CNI_COMMAND` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
            Command::Repair(RepairMode::Repair) => RCNI_REPAIR,
            Command::Repair(RepairMode::Look) => RCNI_REPAIR_LOOK,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The six commands and rcni's two, spelled in upper case.
    #[test]
    fn round_trip() {
        for c in [
            Command::Add,
            Command::Del,
            Command::Check,
            Command::Status,
            Command::Gc,
            Command::Version,
            Command::Repair(RepairMode::Repair),
            Command::Repair(RepairMode::Look),
        ] {
            assert_eq!(Command::parse(c.as_str()), Some(c));
        }
        assert_eq!(Command::parse("add"), None);
        assert_eq!(Command::parse(""), None);
    }
}
