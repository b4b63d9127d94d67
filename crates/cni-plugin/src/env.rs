//! The environment seam: where the runner reads `CNI_*` variables from.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;

/// A source of environment variables. The process environment in production
/// ([`ProcessEnv`]); a map or a closure in tests.
pub trait Env {
    /// The value of `name`, `None` when unset.
    fn var(&self, name: &str) -> Option<String>;

    /// The value of `name` as its bytes, `None` when unset (for paths, which need not be
    /// UTF-8). Sources holding only strings return [`Env::var`].
    fn var_os(&self, name: &str) -> Option<OsString> {
        self.var(name).map(OsString::from)
    }

    /// False when `name` is set to bytes that are not UTF-8 (what [`Env::var`] returns for it
    /// is then a lossy copy, not the value). Sources holding only strings never are.
    fn is_utf8(&self, _name: &str) -> bool {
        true
    }
}

/// The real process environment. Values that are not UTF-8 are converted lossily.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    fn var_os(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    fn is_utf8(&self, name: &str) -> bool {
        std::env::var_os(name).is_none_or(|v| v.to_str().is_some())
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl Env for Vec<(&str, &str)> {
    fn var(&self, name: &str) -> Option<String> {
        (&self[..]).var(name)
    }
}

impl Env for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// A list of pairs; the last pair of a name wins.
impl Env for &[(&str, &str)] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_string())
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn var(&self, name: &str) -> Option<String> {
        (&self[..]).var(name)
    }
}
