//! The six CNI commands (SPEC.md, Section 2: Execution Protocol).

use std::fmt;

/// A value of `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    /// Parses the exact upper-case spelling the spec uses; anything else is `None`.
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
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

    // Exactly six commands, spelled in upper case.
    #[test]
    fn round_trip() {
        for c in [
            Command::Add,
            Command::Del,
            Command::Check,
            Command::Status,
            Command::Gc,
            Command::Version,
        ] {
            assert_eq!(Command::parse(c.as_str()), Some(c));
        }
        assert_eq!(Command::parse("add"), None);
        assert_eq!(Command::parse(""), None);
    }
}
