//! Finding networks in a config directory (libcni's `ConfFiles` and `LoadNetworkConf` in
//! containernetworking/cni `libcni/conf.go`, and go-cni's choice of a default network).
//!
//! Every `.conf`, `.conflist` and `.json` file is loaded in file-name order; a name defined in
//! two files resolves as in libcni (a `.conflist` wins over a `.conf`/`.json`, then the first
//! file), and a `.conflist` also gets the `*.conf` plugins of the sub-directory named after its
//! network, unless it sets `loadOnlyInlinedPlugins`. Unlike libcni and
//! go-cni, a broken file does not hide the others: it becomes a [`ConfWarning`] naming the file
//! and the parse position, and the remaining files are still loaded.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::conf_dir::{conf_files, CONF_EXTENSIONS};
use crate::error::RuntimeError;
use crate::network::{self, Network};

/// A file that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfWarning {
    pub file: PathBuf,
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl fmt::Display for ConfWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Everything found in one directory.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    pub dir: PathBuf,
    /// Valid networks in file-name order, one per name (see [`Discovery::add`] for which).
    pub networks: Vec<Network>,
    pub warnings: Vec<ConfWarning>,
}

impl Discovery {
    /// The network called `name`.
    pub fn find(&self, name: &str) -> Option<&Network> {
        self.networks.iter().find(|n| n.name() == name)
    }

    /// Like [`Discovery::find`], with an error that also lists the skipped files.
    pub fn require(&self, name: &str) -> Result<&Network, RuntimeError> {
        self.find(name).ok_or_else(|| {
            let not_found = RuntimeError::NetworkNotFound {
                name: name.to_string(),
                dir: self.dir.clone(),
            };
            if self.warnings.is_empty() {
                return not_found;
            }
            let skipped: Vec<String> = self.warnings.iter().map(ToString::to_string).collect();
            RuntimeError::Config {
                file: None,
                message: format!("{not_found} (skipped files: {})", skipped.join("; ")),
            }
        })
    }

    /// Adds a loaded network; files arrive in name order. A name defined twice keeps one
    /// file, chosen as libcni's lookup by name chooses: a `.conflist` before any
    /// `.conf`/`.json`, otherwise the first file. The other becomes a warning.
    fn add(&mut self, net: Network) {
        let Some(i) = self.networks.iter().position(|n| n.name() == net.name()) else {
            self.networks.push(net);
            return;
        };
        let is_conflist = |n: &Network| n.source.as_deref().is_some_and(network::is_conflist);
        let (kept, ignored) = if is_conflist(&net) && !is_conflist(&self.networks[i]) {
            let shadowed = std::mem::replace(&mut self.networks[i], net);
            (&self.networks[i], shadowed)
        } else {
            (&self.networks[i], net)
        };
        let kept = kept
            .source
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        self.warnings.push(ConfWarning {
            file: ignored.source.clone().unwrap_or_default(),
            message: format!(
                "network {:?} is already defined in {kept}; this file is ignored",
                ignored.name()
            ),
            line: None,
            column: None,
        });
    }

    /// The default network: the first valid file in name order (go-cni's rule, but
    /// skipping broken files instead of failing).
    pub fn default_network(&self) -> Option<&Network> {
        self.networks.first()
    }
}

/// Loads every network of `dir`.
pub fn discover(dir: &Path) -> Result<Discovery, RuntimeError> {
    let files = conf_files(dir, &CONF_EXTENSIONS)
        .map_err(|e| RuntimeError::io("cannot read config directory", dir, e))?;
    let mut found = Discovery {
        dir: dir.to_path_buf(),
        ..Default::default()
    };
    for file in files {
        match Network::load_file_problem(&file) {
            Ok(net) => found.add(net),
            Err(p) => found.warnings.push(ConfWarning {
                file,
                message: p.message,
                line: p.line,
                column: p.column,
            }),
        }
    }
    Ok(found)
}

/// Loads the network called `name` from `dir`.
pub fn load_network(dir: &Path, name: &str) -> Result<Network, RuntimeError> {
    discover(dir)?.require(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(dir: &Path, name: &str, content: &str) {
        fs::write(dir.join(name), content).unwrap();
    }

    // Discovery by name, sub-directory plugins, legacy files.
    #[test]
    fn discovery_by_name_and_subdir_plugins() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "10-a.conflist",
            r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"inline"}]}"#,
        );
        write(
            d.path(),
            "20-b.conf",
            r#"{"cniVersion":"0.4.0","name":"b","type":"bridge","big":12345678901234567890}"#,
        );
        fs::create_dir(d.path().join("a")).unwrap();
        write(&d.path().join("a"), "y.conf", r#"{"type":"y"}"#);
        write(&d.path().join("a"), "x.conf", r#"{"type":"x"}"#);
        write(&d.path().join("a"), "z.json", r#"{"type":"ignored"}"#);
        let found = discover(d.path()).unwrap();
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        let a = found.find("a").unwrap();
        assert_eq!(a.plugin_types(), ["inline", "x", "y"]);
        let b = found.find("b").unwrap();
        assert_eq!(b.plugin_types(), ["bridge"]);
        assert_eq!(b.version.to_string(), "0.4.0");
        assert_eq!(
            b.plugins()[0].get("big").unwrap().get(),
            "12345678901234567890"
        );
        assert!(matches!(
            found.require("z"),
            Err(RuntimeError::NetworkNotFound { .. })
        ));
        assert_eq!(found.default_network().unwrap().name(), "a");
    }

    // Sub-directory plugins are not loaded with loadOnlyInlinedPlugins.
    #[test]
    fn load_only_inlined_plugins() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "a.conflist",
            r#"{"cniVersion":"1.1.0","name":"a","loadOnlyInlinedPlugins":true,"plugins":[{"type":"inline"}]}"#,
        );
        fs::create_dir(d.path().join("a")).unwrap();
        write(&d.path().join("a"), "x.conf", r#"{"type":"x"}"#);
        assert_eq!(
            load_network(d.path(), "a").unwrap().plugin_types(),
            ["inline"]
        );
    }

    // A list without `plugins` gets them all from its sub-directory.
    #[test]
    fn subdir_only_list() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "a.conflist",
            r#"{"cniVersion":"1.1.0","name":"a"}"#,
        );
        let found = discover(d.path()).unwrap();
        assert!(found.find("a").is_none());
        assert!(found.warnings[0]
            .message
            .contains("no plugin configs found"));
        fs::create_dir(d.path().join("a")).unwrap();
        write(&d.path().join("a"), "x.conf", r#"{"type":"x"}"#);
        assert_eq!(load_network(d.path(), "a").unwrap().plugin_types(), ["x"]);
    }

    // A broken file does not hide other networks; the warning has a position.
    #[test]
    fn broken_file_is_a_warning_with_position() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "00-broken.conflist",
            "{\n  \"name\": \"x\",\n  oops\n}",
        );
        write(
            d.path(),
            "05-empty.conflist",
            r#"{"name":"e","plugins":[]}"#,
        );
        write(
            d.path(),
            "10-good.conflist",
            r#"{"cniVersion":"1.0.0","name":"good","plugins":[{"type":"p"}]}"#,
        );
        write(
            d.path(),
            "20-dup.conflist",
            r#"{"cniVersion":"1.0.0","name":"good","plugins":[{"type":"q"}]}"#,
        );
        write(d.path(), "30-bad-sub.conflist", r#"{"name":"bs"}"#);
        fs::create_dir(d.path().join("bs")).unwrap();
        write(&d.path().join("bs"), "p.conf", "{bad");
        write(d.path(), "README.md", "not a config");
        let found = discover(d.path()).unwrap();
        assert_eq!(found.networks.len(), 1);
        assert_eq!(found.default_network().unwrap().name(), "good");
        assert_eq!(found.warnings.len(), 4, "{:?}", found.warnings);
        let w = &found.warnings[0];
        assert!(w.file.ends_with("00-broken.conflist"));
        assert_eq!((w.line, w.column), (Some(3), Some(3)));
        assert!(w.to_string().contains("00-broken.conflist:3:3"), "{w}");
        assert!(found.warnings[1].message.contains("no plugins in list"));
        assert!(found.warnings[2].message.contains("already defined"));
        assert!(found.warnings[3].message.contains("p.conf"));
        let e = found.require("missing").unwrap_err().to_string();
        assert!(e.contains("00-broken.conflist"), "{e}");
    }

    // A missing directory is empty, not an error; directories are skipped.
    #[test]
    fn missing_dir_and_subdirs() {
        let d = tempfile::tempdir().unwrap();
        let found = discover(&d.path().join("nope")).unwrap();
        assert!(found.networks.is_empty() && found.warnings.is_empty());
        fs::create_dir(d.path().join("x.conflist")).unwrap();
        assert!(conf_files(d.path(), &CONF_EXTENSIONS).unwrap().is_empty());
    }

    // Version selection reaches the loaded network; a bad cniVersions entry fails.
    #[test]
    fn version_selection() {
        let n = Network::from_list_bytes(
            br#"{"name":"n","cniVersion":"0.3.1","cniVersions":["0.4.0","1.0.0","99.0.0"],"plugins":[{"type":"p"}]}"#,
        )
        .unwrap();
        assert_eq!(n.version.to_string(), "1.0.0");
        assert!(Network::from_list_bytes(
            br#"{"name":"n","cniVersions":["1.0.f"],"plugins":[{"type":"p"}]}"#
        )
        .is_err());
        assert!(Network::from_list_bytes(br#"{"name":"../n","plugins":[{"type":"p"}]}"#).is_err());
    }

    // Lookup by name prefers a `.conflist` over an earlier `.conf` of the same name.
    #[test]
    fn conflist_wins_over_an_earlier_conf() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "00-a.conf",
            r#"{"cniVersion":"1.0.0","name":"a","type":"single"}"#,
        );
        write(
            d.path(),
            "10-a.conflist",
            r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"listed"}]}"#,
        );
        write(
            d.path(),
            "20-a.conflist",
            r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"later"}]}"#,
        );
        let found = discover(d.path()).unwrap();
        assert_eq!(found.networks.len(), 1);
        assert_eq!(found.require("a").unwrap().plugin_types(), ["listed"]);
        let ignored: Vec<_> = found.warnings.iter().map(|w| w.file.clone()).collect();
        assert_eq!(
            ignored,
            [d.path().join("00-a.conf"), d.path().join("20-a.conflist")]
        );
    }

    // Only a `.conflist` reads its sub-directory, and only `*.conf` files in it; the
    // string form of `loadOnlyInlinedPlugins` is honoured.
    #[test]
    fn subdir_rules() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "10-shaped.conf",
            r#"{"cniVersion":"1.0.0","name":"shaped","plugins":[{"type":"inline"}]}"#,
        );
        write(
            d.path(),
            "20-s.conflist",
            r#"{"cniVersion":"1.0.0","name":"s","loadOnlyInlinedPlugins":"TRUE","plugins":[{"type":"inline"}]}"#,
        );
        write(
            d.path(),
            "30-c.conflist",
            r#"{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"inline"}]}"#,
        );
        for net in ["shaped", "s", "c"] {
            fs::create_dir(d.path().join(net)).unwrap();
            write(&d.path().join(net), "1.conf", r#"{"type":"sub"}"#);
        }
        write(&d.path().join("c"), "2.CONF", r#"{"type":"wrong-case"}"#);
        write(&d.path().join("c"), "3.conflist", r#"{"type":"wrong-ext"}"#);
        fs::create_dir(d.path().join("c").join("4.conf")).unwrap();
        let found = discover(d.path()).unwrap();
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert_eq!(found.require("shaped").unwrap().plugin_types(), ["inline"]);
        assert_eq!(found.require("s").unwrap().plugin_types(), ["inline"]);
        assert_eq!(
            found.require("c").unwrap().plugin_types(),
            ["inline", "sub"]
        );
    }

    // The cached `config` of a list with sub-directory plugins names the whole
    // chain (libcni's misses them), and keeps the list's other keys byte for byte.
    #[test]
    fn cached_config_carries_subdir_plugins() {
        let d = tempfile::tempdir().unwrap();
        let list = r#"{"cniVersion":"1.0.0","name":"c","big":12345678901234567890,"plugins":[{"type":"inline"}]}"#;
        write(d.path(), "c.conflist", list);
        fs::create_dir(d.path().join("c")).unwrap();
        write(&d.path().join("c"), "1.conf", r#"{"type":"sub","n":1.50}"#);
        let net = load_network(d.path(), "c").unwrap();
        let config = String::from_utf8(net.config_bytes().to_vec()).unwrap();
        assert_eq!(
            config,
            r#"{"cniVersion":"1.0.0","name":"c","big":12345678901234567890,"plugins":[{"type":"inline"},{"type":"sub","n":1.50}]}"#
        );
        let again = Network::from_list_bytes(net.config_bytes()).unwrap();
        assert_eq!(again.plugin_types(), ["inline", "sub"]);
        // Without sub-directory plugins the bytes are the file's.
        fs::remove_dir_all(d.path().join("c")).unwrap();
        let net = load_network(d.path(), "c").unwrap();
        assert_eq!(net.config_bytes(), list.as_bytes());
    }

    #[test]
    fn loopback_network() {
        let lo = Network::loopback();
        assert_eq!(lo.name(), "cni-loopback");
        assert_eq!(lo.plugin_types(), ["loopback"]);
        let parsed = Network::from_list_bytes(lo.config_bytes()).unwrap();
        assert_eq!(parsed.version, lo.version);
    }
}
