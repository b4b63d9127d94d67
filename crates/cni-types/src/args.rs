//! CNI_ARGS: `K=V;K=V` (SPEC.md, Section 2: Execution Protocol; CONVENTIONS.md, "CNI_ARGS"; Go's
//! `LoadArgs` in containernetworking/cni `pkg/types/args.go`).

use crate::error::CniError;

/// Why CNI_ARGS was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("ARGS: invalid pair {0:?}")]
    InvalidPair(String),
    #[error("ARGS: unknown args {0:?}")]
    Unknown(Vec<String>),
    #[error("ARGS: invalid IgnoreUnknown value {0:?}")]
    BadIgnoreUnknown(String),
}

impl ArgsError {
    /// CNI_ARGS is an environment variable, so bad values are code 4.
    pub fn to_cni_error(&self) -> CniError {
        CniError::invalid_environment(self.to_string())
    }
}

/// Parsed CNI_ARGS, in their original order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses like Go's `LoadArgs`: every piece must split on `=` into exactly two parts; the
    /// empty string is no arguments.
    pub fn parse(s: &str) -> Result<CniArgs, ArgsError> {
        if s.is_empty() {
            return Ok(CniArgs::default());
        }
        let mut pairs = Vec::new();
        for piece in s.split(';') {
            let mut parts = piece.split('=');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(k), Some(v), None) => pairs.push((k.to_string(), v.to_string())),
                _ => return Err(ArgsError::InvalidPair(piece.to_string())),
            }
        }
        Ok(CniArgs { pairs })
    }

    pub fn from_pairs(pairs: Vec<(String, String)>) -> CniArgs {
        CniArgs { pairs }
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The value of `key` (case-sensitive, as Go matches struct field names); the last wins.
    ///
    /// Go's `LoadArgs` decodes every pair into its field in turn, so for a repeated key the
    /// last value is what the plugin sees, and a value that does not decode fails the call
    /// wherever it stands: a typed key must check every one of [`CniArgs::values`].
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, in order (a key may be repeated).
    pub fn values<'a>(&'a self, key: &'a str) -> impl DoubleEndedIterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `IgnoreUnknown` as `1`/`true`/`0`/`false` in any case; absent is false. Repeated, the
    /// last wins, and every value must be one of those (Go decodes each in turn).
    pub fn ignore_unknown(&self) -> Result<bool, ArgsError> {
        let mut ignore = false;
        for v in self.values("IgnoreUnknown") {
            ignore = match v.to_ascii_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err(ArgsError::BadIgnoreUnknown(v.to_string())),
            };
        }
        Ok(ignore)
    }

    /// Fails on keys outside `known` unless `IgnoreUnknown` is set (Go's `LoadArgs`).
    pub fn check_known(&self, known: &[&str]) -> Result<(), ArgsError> {
        if self.ignore_unknown()? {
            return Ok(());
        }
        let unknown: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(ArgsError::Unknown(unknown))
        }
    }

    /// The environment form, `k1=v1;k2=v2` in order, no escaping (as libcni's `stringify`).
    pub fn to_env_string(&self) -> String {
        self.pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Go's `LoadArgs`: exact pairs, case-sensitive keys, `IgnoreUnknown`.
    #[test]
    fn parses_like_go() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=p;IP=198.18.0.5").unwrap();
        assert_eq!(a.get("IP"), Some("198.18.0.5"));
        assert_eq!(a.get("ip"), None);
        assert!(a.ignore_unknown().unwrap());
        assert!(a.check_known(&["IP"]).is_ok());
        assert_eq!(
            a.to_env_string(),
            "IgnoreUnknown=1;K8S_POD_NAME=p;IP=198.18.0.5"
        );
        assert_eq!(CniArgs::parse("").unwrap().pairs().len(), 0);
        for bad in ["A", "A=B=C", "A=1;", ";A=1"] {
            assert!(
                matches!(CniArgs::parse(bad), Err(ArgsError::InvalidPair(_))),
                "{bad}"
            );
        }
    }

    // Go's LoadArgs decodes every pair in turn: the last value wins, a bad one anywhere fails.
    #[test]
    fn repeated_keys_last_wins_and_every_value_is_checked() {
        let a = CniArgs::parse("IP=198.18.0.5;K=v;IP=198.18.0.6").unwrap();
        assert_eq!(a.get("IP"), Some("198.18.0.6"));
        assert_eq!(
            a.values("IP").collect::<Vec<_>>(),
            ["198.18.0.5", "198.18.0.6"]
        );
        assert_eq!(a.values("ip").count(), 0);
        let later_off = CniArgs::parse("IgnoreUnknown=1;IgnoreUnknown=0;FOO=1").unwrap();
        assert!(later_off.check_known(&[]).is_err());
        let later_on = CniArgs::parse("IgnoreUnknown=0;IgnoreUnknown=1;FOO=1").unwrap();
        assert!(later_on.check_known(&[]).is_ok());
        let bad_first = CniArgs::parse("IgnoreUnknown=maybe;IgnoreUnknown=1;FOO=1").unwrap();
        assert_eq!(
            bad_first.check_known(&[]),
            Err(ArgsError::BadIgnoreUnknown("maybe".into()))
        );
    }

    #[test]
    fn unknown_keys() {
        let a = CniArgs::parse("ip=198.18.88.6").unwrap();
        let e = a.check_known(&["IP"]).unwrap_err();
        assert_eq!(e.to_string(), "ARGS: unknown args [\"ip=198.18.88.6\"]");
        assert_eq!(e.to_cni_error().code, 4);
        let ignored = CniArgs::parse("K=V;IgnoreUnknown=TRUE").unwrap();
        assert!(ignored.check_known(&[]).is_ok());
        let bad = CniArgs::parse("IgnoreUnknown=yes").unwrap();
        assert!(bad.check_known(&[]).is_err());
    }
}
