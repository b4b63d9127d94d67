//! Spec versions (Go's `pkg/version/version.go` and `pkg/version/plugin.go`): parsing, ordering and
//! the per-command floors.
//!
//! Versions follow the Go reference parser: `major[.minor[.micro]]` with integer parts, missing
//! parts are 0, the empty string is 0.1.0, and pre-release suffixes are rejected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One CNI specification version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SpecVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// Why a version string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version {input:?}: {reason}")]
pub struct VersionParseError {
    pub input: String,
    pub reason: &'static str,
}

/// The layout family a result of a given version is written in (SPEC.md, Section 5: Result Types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultLayout {
    /// 0.1.0 and 0.2.0: `ip4` / `ip6` objects.
    V02,
    /// 0.3.0, 0.3.1 and 0.4.0: `interfaces`, `ips[]` with `version`.
    V04,
    /// 1.0.0 and 1.1.0: `ips[]` without `version`.
    V1,
}

impl SpecVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        SpecVersion {
            major,
            minor,
            patch,
        }
    }

    pub const V0_1_0: SpecVersion = SpecVersion::new(0, 1, 0);
    pub const V0_2_0: SpecVersion = SpecVersion::new(0, 2, 0);
    pub const V0_3_0: SpecVersion = SpecVersion::new(0, 3, 0);
    pub const V0_3_1: SpecVersion = SpecVersion::new(0, 3, 1);
    pub const V0_4_0: SpecVersion = SpecVersion::new(0, 4, 0);
    pub const V1_0_0: SpecVersion = SpecVersion::new(1, 0, 0);
    pub const V1_1_0: SpecVersion = SpecVersion::new(1, 1, 0);

    /// The newest version this implementation speaks.
    pub const CURRENT: SpecVersion = SpecVersion::V1_1_0;

    /// Every version this implementation supports, oldest first.
    pub const ALL: [SpecVersion; 7] = [
        SpecVersion::V0_1_0,
        SpecVersion::V0_2_0,
        SpecVersion::V0_3_0,
        SpecVersion::V0_3_1,
        SpecVersion::V0_4_0,
        SpecVersion::V1_0_0,
        SpecVersion::V1_1_0,
    ];

    /// Parses with the Go reference rules; `""` is 0.1.0.
    pub fn parse(input: &str) -> Result<SpecVersion, VersionParseError> {
        if input.is_empty() {
            return Ok(SpecVersion::V0_1_0);
        }
        let err = |reason| VersionParseError {
            input: input.to_string(),
            reason,
        };
        let parts: Vec<&str> = input.split('.').collect();
        if parts.len() > 3 {
            return Err(err("too many parts"));
        }
        let mut nums = [0u32; 3];
        for (slot, part) in nums.iter_mut().zip(&parts) {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("every part must be a non-negative integer"));
            }
            *slot = part.parse().map_err(|_| err("part too large"))?;
        }
        Ok(SpecVersion::new(nums[0], nums[1], nums[2]))
    }

    /// True for the seven versions of [`SpecVersion::ALL`].
    pub fn is_known(self) -> bool {
        SpecVersion::ALL.contains(&self)
    }

    /// The result layout for this version, `None` for versions no layout is defined for.
    pub fn result_layout(self) -> Option<ResultLayout> {
        match self {
            SpecVersion::V0_1_0 | SpecVersion::V0_2_0 => Some(ResultLayout::V02),
            SpecVersion::V0_3_0 | SpecVersion::V0_3_1 | SpecVersion::V0_4_0 => {
                Some(ResultLayout::V04)
            }
            SpecVersion::V1_0_0 | SpecVersion::V1_1_0 => Some(ResultLayout::V1),
            _ => None,
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn allows_check(self) -> bool {
        self >= SpecVersion::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn allows_status_and_gc(self) -> bool {
        self >= SpecVersion::V1_1_0
    }

    /// The versions from `min` on, as Go's `VersionsStartingFrom`.
    pub fn starting_from(min: SpecVersion) -> Vec<SpecVersion> {
        SpecVersion::ALL
            .iter()
            .copied()
            .filter(|v| *v >= min)
            .collect()
    }

    /// The highest version present in both lists (the "highest common version" rule).
    pub fn highest_common(a: &[SpecVersion], b: &[SpecVersion]) -> Option<SpecVersion> {
        a.iter().filter(|v| b.contains(v)).max().copied()
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for SpecVersion {
    type Err = VersionParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecVersion::parse(s)
    }
}

impl Serialize for SpecVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SpecVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SpecVersion::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Formats a version list the way the Go skeleton does in error details: `["a" "b"]`.
pub fn go_list(versions: &[SpecVersion]) -> String {
    let inner: Vec<String> = versions.iter().map(|v| format!("\"{v}\"")).collect();
    format!("[{}]", inner.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Parsing and comparison rules (Go's `ParseVersion`).
    #[test]
    fn parses_like_go() {
        assert_eq!(SpecVersion::parse("").unwrap(), SpecVersion::V0_1_0);
        assert_eq!(SpecVersion::parse("1").unwrap(), SpecVersion::new(1, 0, 0));
        assert_eq!(SpecVersion::parse("0.4").unwrap(), SpecVersion::V0_4_0);
        assert_eq!(SpecVersion::parse("1.1.0").unwrap(), SpecVersion::V1_1_0);
        for bad in [
            "1.0.0-rc1",
            "1.0.0.0",
            "a.b",
            "1..0",
            "-1.0.0",
            " 1.0.0",
            "1.0.f",
        ] {
            assert!(SpecVersion::parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn orders_numerically() {
        assert!(SpecVersion::parse("0.10.0").unwrap() > SpecVersion::parse("0.4.0").unwrap());
        assert!(SpecVersion::V1_0_0 > SpecVersion::V0_4_0);
        assert_eq!(SpecVersion::V1_1_0.to_string(), "1.1.0");
    }

    // Per-command floors.
    #[test]
    fn command_floors() {
        assert!(!SpecVersion::V0_3_1.allows_check());
        assert!(SpecVersion::V0_4_0.allows_check());
        assert!(!SpecVersion::V1_0_0.allows_status_and_gc());
        assert!(SpecVersion::V1_1_0.allows_status_and_gc());
    }

    // VersionsStartingFrom and the highest-common rule.
    #[test]
    fn starting_from_and_highest_common() {
        assert_eq!(
            SpecVersion::starting_from(SpecVersion::V0_4_0),
            vec![
                SpecVersion::V0_4_0,
                SpecVersion::V1_0_0,
                SpecVersion::V1_1_0
            ]
        );
        let plugin = [SpecVersion::V0_3_1, SpecVersion::V1_0_0];
        assert_eq!(
            SpecVersion::highest_common(&SpecVersion::ALL, &plugin),
            Some(SpecVersion::V1_0_0)
        );
        assert_eq!(SpecVersion::highest_common(&[], &plugin), None);
    }

    #[test]
    fn layouts() {
        assert_eq!(SpecVersion::V0_2_0.result_layout(), Some(ResultLayout::V02));
        assert_eq!(SpecVersion::V0_3_0.result_layout(), Some(ResultLayout::V04));
        assert_eq!(SpecVersion::V1_1_0.result_layout(), Some(ResultLayout::V1));
        assert_eq!(SpecVersion::new(7, 0, 0).result_layout(), None);
        assert_eq!(
            go_list(&[SpecVersion::V1_0_0, SpecVersion::V1_1_0]),
            "[\"1.0.0\" \"1.1.0\"]"
        );
    }
}
