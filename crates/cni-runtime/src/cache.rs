//! The on-disk result cache, in libcni's exact layout (`cacheAdd`, `getCachedResult`, `cacheDel`
//! and `GetCachedAttachments` in containernetworking/cni `libcni/api.go`), so Go runtimes and rcni
//! read each other's entries.
//!
//! Path: `<cacheDir>/results/<network>-<containerID>-<ifname>`. Content: one JSON object
//! `{"kind":"cniCacheV1","containerId","config"(base64),"ifName","networkName","netns",
//! "cniArgs","capabilityArgs","result"}` encoded as Go encodes it. Unlike libcni, files are
//! written atomically (temp file in the same directory, then rename; no fsync: see `cache_temp`) and every component of
//! the path is validated on every command. Temp files are named after the entry they become
//! (see `cache_temp`), so DEL and GC remove what a killed write left.

use std::fs;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Value};

use cni_attribution::AttachmentId;
use cni_types::{netns_text, CniError, CniResult, NetnsNotUtf8, RawObject, SpecVersion};

use crate::attachment::Attachment;
use crate::cache_temp::{self, STALE_AGE, TEMP_PREFIX};
use crate::error::RuntimeError;
use crate::gojson;
use crate::statedir::ensure_private_dir;
use cni_persist::spare::{self, Spares};

/// The only `kind` libcni writes.
pub const CACHE_KIND: &str = "cniCacheV1";
/// libcni's default cache directory.
pub const DEFAULT_CACHE_DIR: &str = "/var/lib/cni";
/// The longest file name the cache can create (NAME_MAX on Linux and the BSDs).
pub const MAX_ENTRY_NAME: usize = 255;

/// One cache entry (libcni's `cachedInfo` / `NetworkAttachment`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CacheEntry {
    pub container_id: String,
    /// The network config list bytes (stored base64-encoded).
    pub config: Vec<u8>,
    pub ifname: String,
    pub network_name: String,
    /// JSON text in the file: a path that is not UTF-8 cannot be written (see `to_go_json`).
    pub netns: PathBuf,
    pub cni_args: Vec<(String, String)>,
    pub capability_args: Map<String, Value>,
    /// The final ADD result, as the last plugin reported it.
    pub result: Option<Value>,
}

impl CacheEntry {
    /// The entry as Go's `json.Marshal` writes it: struct fields in declaration order, empty
    /// optional fields left out, maps with sorted keys. A netns path that is not UTF-8 is
    /// refused: the format has only text for it.
    pub fn to_go_json(&self) -> Result<String, NetnsNotUtf8> {
        let netns = netns_text(&self.netns)?;
        let mut out = String::with_capacity(512);
        out.push_str("{\"kind\":");
        gojson::write_string(&mut out, CACHE_KIND);
        out.push_str(",\"containerId\":");
        gojson::write_string(&mut out, &self.container_id);
        out.push_str(",\"config\":");
        gojson::write_string(&mut out, &BASE64.encode(&self.config));
        out.push_str(",\"ifName\":");
        gojson::write_string(&mut out, &self.ifname);
        out.push_str(",\"networkName\":");
        gojson::write_string(&mut out, &self.network_name);
        if !netns.is_empty() {
            out.push_str(",\"netns\":");
            gojson::write_string(&mut out, netns);
        }
        if !self.cni_args.is_empty() {
            out.push_str(",\"cniArgs\":");
            let pairs: Vec<Value> = self
                .cni_args
                .iter()
                .map(|(k, v)| Value::from(vec![k.clone(), v.clone()]))
                .collect();
            gojson::write_value(&mut out, &Value::Array(pairs));
        }
        if !self.capability_args.is_empty() {
            out.push_str(",\"capabilityArgs\":");
            gojson::write_value(&mut out, &Value::Object(self.capability_args.clone()));
        }
        if let Some(result) = self.result.as_ref().filter(|r| !r.is_null()) {
            out.push_str(",\"result\":");
            gojson::write_value(&mut out, result);
        }
        out.push('}');
        Ok(out)
    }

    /// Decodes an entry; keys match case-insensitively and unknown keys are ignored, as Go's
    /// decoder does. Fails unless `kind` is `cniCacheV1`.
    pub fn decode(bytes: &[u8]) -> Result<CacheEntry, String> {
        let obj = RawObject::parse(bytes).map_err(|e| e.to_string())?;
        let text = |key: &str| -> Result<String, String> {
            obj.decode::<String>(key)
                .map(Option::unwrap_or_default)
                .map_err(|e| format!("{key}: {e}"))
        };
        let kind = text("kind")?;
        if kind != CACHE_KIND {
            return Err(format!("wrong kind: {kind:?}"));
        }
        let config = match text("config")? {
            s if s.is_empty() => Vec::new(),
            s => BASE64
                .decode(s.as_bytes())
                .map_err(|e| format!("config: {e}"))?,
        };
        let cni_args = obj
            .decode::<Vec<Vec<String>>>("cniArgs")
            .map_err(|e| format!("cniArgs: {e}"))?
            .unwrap_or_default()
            .into_iter()
            .map(|mut pair| {
                pair.resize(2, String::new());
                (pair[0].clone(), pair[1].clone())
            })
            .collect();
        Ok(CacheEntry {
            container_id: text("containerId")?,
            config,
            ifname: text("ifName")?,
            network_name: text("networkName")?,
            netns: text("netns")?.into(),
            cni_args,
            capability_args: obj
                .decode::<Map<String, Value>>("capabilityArgs")
                .map_err(|e| format!("capabilityArgs: {e}"))?
                .unwrap_or_default(),
            result: obj
                .decode::<Value>("result")
                .map_err(|e| format!("result: {e}"))?,
        })
    }

    /// The attachment parameters recorded at ADD time (what GC's stale DELs use).
    pub fn attachment(&self) -> Attachment {
        Attachment {
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            args: self.cni_args.clone(),
            capability_args: self.capability_args.clone(),
        }
    }

    /// The attachment's identity.
    pub fn id(&self) -> AttachmentId {
        AttachmentId::new(&self.network_name, &self.container_id, &self.ifname)
    }
}

/// The cache under one cache directory.
#[derive(Debug, Clone)]
pub struct ResultCache {
    root: PathBuf,
}

impl ResultCache {
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        ResultCache {
            root: cache_dir.into(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn results_dir(&self) -> PathBuf {
        self.root.join("results")
    }

    /// Emptied files kept for reuse as temp files (see `cni_persist::spare`); never entries.
    fn spare_dir(&self) -> PathBuf {
        self.root.join("spare")
    }

    /// The entry's file name `<net>-<cid>-<ifname>` after validating all three (no
    /// separators). A name longer than [`MAX_ENTRY_NAME`] bytes is refused with code 4: the
    /// entry could not be written, so ADD must not run its plugins.
    pub fn entry_name(&self, network: &str, att: &Attachment) -> Result<String, RuntimeError> {
        att.validate(network)?;
        let name = format!("{network}-{}-{}", att.container_id, att.ifname);
        if name.len() > MAX_ENTRY_NAME {
            return Err(RuntimeError::Invalid(
                CniError::invalid_environment(format!(
                    "container ID is too long: the cache file name \"<network>-<containerID>-<ifname>\" \
                     would be {} bytes, at most {MAX_ENTRY_NAME} are possible",
                    name.len()
                ))
                .with_details(att.container_id.clone()),
            ));
        }
        Ok(name)
    }

    /// `<cacheDir>/results/<net>-<cid>-<ifname>` (see [`ResultCache::entry_name`]).
    pub fn path(&self, network: &str, att: &Attachment) -> Result<PathBuf, RuntimeError> {
        Ok(self.results_dir().join(self.entry_name(network, att)?))
    }

    /// The results directory, created private and checked (owner, mode, no symlink).
    fn checked_results_dir(&self) -> Result<PathBuf, RuntimeError> {
        let dir = self.results_dir();
        ensure_private_dir(&dir)
            .map_err(|e| RuntimeError::io("unusable cache directory", &dir, e))?;
        Ok(dir)
    }

    /// Writes an entry atomically: directory 0700, file 0600, temp file named after the entry.
    pub fn store(&self, entry: &CacheEntry) -> Result<PathBuf, RuntimeError> {
        let name = self.entry_name(&entry.network_name, &entry.attachment())?;
        let dir = self.checked_results_dir()?;
        cache_temp::write_atomic(
            &dir,
            Spares::new(&self.spare_dir()),
            &entry.network_name,
            &name,
            entry.to_go_json()?.as_bytes(),
        )
        .map_err(|e| RuntimeError::io("cannot write cached result", dir.join(&name), e))
    }

    /// Writes `entry` unless an entry of its attachment exists (`Ok(false)` then, nothing
    /// changed): the runtime's claim on an attachment before its ADD runs.
    pub fn create(&self, entry: &CacheEntry) -> Result<bool, RuntimeError> {
        let name = self.entry_name(&entry.network_name, &entry.attachment())?;
        let dir = self.checked_results_dir()?;
        cache_temp::create_atomic(
            &dir,
            Spares::new(&self.spare_dir()),
            &entry.network_name,
            &name,
            entry.to_go_json()?.as_bytes(),
        )
        .map(|created| created.is_some())
        .map_err(|e| RuntimeError::io("cannot write cached result", dir.join(&name), e))
    }

    /// The entry's file when one exists (whatever its content).
    pub fn existing(
        &self,
        network: &str,
        att: &Attachment,
    ) -> Result<Option<PathBuf>, RuntimeError> {
        let path = self.path(network, att)?;
        Ok(fs::symlink_metadata(&path).is_ok().then_some(path))
    }

    /// The raw cached entry (libcni's `getCachedConfig` reads the same). A missing or unreadable
    /// file is `None`.
    pub fn load_entry(
        &self,
        network: &str,
        att: &Attachment,
    ) -> Result<Option<CacheEntry>, RuntimeError> {
        let path = self.path(network, att)?;
        let Ok(decoded) = spare::read_stable(&path, CacheEntry::decode) else {
            return Ok(None);
        };
        decoded.map(Some).map_err(|message| RuntimeError::BadCache {
            network: network.to_string(),
            message: format!("failed to unmarshal cached network config: {message}"),
        })
    }

    /// The cached result converted to `version`, ready to send as `prevResult` (as libcni's
    /// `getCachedResult`). A missing file is `None`; a file that is not an entry is read as a
    /// legacy bare result.
    pub fn load_result(
        &self,
        network: &str,
        att: &Attachment,
        version: SpecVersion,
    ) -> Result<Option<Value>, RuntimeError> {
        let path = self.path(network, att)?;
        // An entry's result, or a legacy bare result.
        let read = spare::read_stable(&path, |bytes| match CacheEntry::decode(bytes) {
            Ok(entry) => Ok(entry.result),
            Err(_) => serde_json::from_slice::<Value>(bytes).map(Some),
        });
        let Ok(parsed) = read else {
            return Ok(None);
        };
        let bad = |message: String| RuntimeError::BadCache {
            network: network.to_string(),
            message,
        };
        let raw = match parsed
            .map_err(|e| bad(format!("cache file is neither an entry nor a result: {e}")))?
        {
            Some(r) => r,
            None => return Ok(None),
        };
        let result = CniResult::parse(&raw, SpecVersion::V0_1_0).map_err(|e| bad(e.to_string()))?;
        result
            .to_value(version)
            .map(Some)
            .map_err(|e| bad(format!("cannot convert cached result to {version}: {e}")))
    }

    /// Removes an entry and the temp files a killed write of it left, ignoring every error
    /// (as libcni's `cacheDel`).
    pub fn remove(&self, network: &str, att: &Attachment) {
        if let Ok(name) = self.entry_name(network, att) {
            let dir = self.results_dir();
            self.recycle(&dir.join(&name));
            cache_temp::remove_entry_temps(&dir, network, &name);
        }
    }

    /// Takes an entry away (atomically, as an unlink would) and keeps its inode as a spare.
    fn recycle(&self, entry: &Path) {
        if fs::symlink_metadata(entry).is_ok_and(|m| m.is_file()) {
            Spares::new(&self.spare_dir()).park(entry);
        } else {
            let _ = fs::remove_file(entry);
        }
    }

    /// Removes the temp files of `network` and every stale one (GC; the caller holds the
    /// network lock exclusively). Returns how many were removed.
    pub fn sweep_temps(&self, network: &str) -> usize {
        Spares::new(&self.spare_dir()).clear();
        cache_temp::sweep(&self.results_dir(), network, STALE_AGE)
    }

    /// Every valid entry, in file-name order, optionally only one container's (as libcni's
    /// `GetCachedAttachments`). The file name is only a pre-filter; the JSON decides.
    pub fn attachments(&self, container_id: Option<&str>) -> Vec<CacheEntry> {
        let Ok(dir) = fs::read_dir(self.results_dir()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.starts_with(TEMP_PREFIX))
            .collect();
        names.sort();
        names
            .into_iter()
            .filter(|name| match container_id {
                Some(cid) => name
                    .find(&format!("-{cid}-"))
                    .is_some_and(|i| i > 0 && i + cid.len() + 2 < name.len()),
                None => true,
            })
            .filter_map(|name| {
                spare::read_stable(&self.results_dir().join(name), CacheEntry::decode)
                    .ok()?
                    .ok()
            })
            .filter(|e| container_id.is_none_or(|cid| e.container_id == cid))
            .filter(|e| !e.ifname.is_empty() && !e.network_name.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> CacheEntry {
        CacheEntry {
            container_id: "ctr1".into(),
            config: br#"{"cniVersion":"1.1.0","name":"dbnet","plugins":[{"type":"bridge"}]}"#
                .to_vec(),
            ifname: "eth0".into(),
            network_name: "dbnet".into(),
            netns: "/run/netns/x".into(),
            cni_args: vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("K8S_POD_NAME".into(), "p".into()),
            ],
            capability_args: json!({"portMappings":[{"protocol":"tcp","hostPort":8080,"containerPort":80}],"mac":"00:11:22:33:44:55"})
                .as_object()
                .unwrap()
                .clone(),
            result: Some(json!({"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"interface":0,"address":"198.18.0.5/16","gateway":"198.18.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]})),
        }
    }

    // The exact Go layout (field order, omitempty, sorted maps, std base64 with padding).
    #[test]
    fn go_byte_layout() {
        let e = entry();
        let expected = format!(
            concat!(
                r#"{{"kind":"cniCacheV1","containerId":"ctr1","config":"{}","ifName":"eth0","networkName":"dbnet","netns":"/run/netns/x","#,
                r#""cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAME","p"]],"#,
                r#""capabilityArgs":{{"mac":"00:11:22:33:44:55","portMappings":[{{"containerPort":80,"hostPort":8080,"protocol":"tcp"}}]}},"#,
                r#""result":{{"cniVersion":"1.1.0","interfaces":[{{"name":"eth0","sandbox":"/run/netns/x"}}],"ips":[{{"address":"198.18.0.5/16","gateway":"198.18.0.1","interface":0}}],"routes":[{{"dst":"0.0.0.0/0"}}]}}}}"#
            ),
            BASE64.encode(&e.config)
        );
        assert_eq!(e.to_go_json().unwrap(), expected);
        assert!(BASE64.encode(b"ab").ends_with('='));
        let minimal = CacheEntry {
            netns: PathBuf::new(),
            cni_args: vec![],
            capability_args: Map::new(),
            result: None,
            ..entry()
        };
        let s = minimal.to_go_json().unwrap();
        assert!(!s.contains("netns") && !s.contains("cniArgs") && !s.contains("capabilityArgs"));
        assert!(!s.contains("result"));
        assert_eq!(
            CacheEntry::decode(e.to_go_json().unwrap().as_bytes()).unwrap(),
            e
        );
    }

    // The entry holds the netns as JSON text: one that is not UTF-8 is refused, typed, not
    // written as a lossy copy naming another path.
    #[cfg(unix)]
    #[test]
    fn netns_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/run/netns/\xff"));
        let e = CacheEntry {
            netns: bad.into(),
            ..entry()
        };
        assert_eq!(e.to_go_json().unwrap_err().path, bad);
        let d = tempfile::tempdir().unwrap();
        let err = ResultCache::new(d.path()).store(&e).unwrap_err();
        assert!(matches!(err, RuntimeError::NetnsNotUtf8(_)), "{err}");
        assert_eq!(err.code(), cni_types::code::INVALID_ENVIRONMENT);
        assert!(!d.path().join("results/dbnet-ctr1-eth0").exists());
    }

    // Directory 0700, file 0600, no temp files left.
    #[cfg(unix)]
    #[test]
    fn modes_and_atomic_write() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let cache = ResultCache::new(d.path().join("cni"));
        let path = cache.store(&entry()).unwrap();
        assert_eq!(path, d.path().join("cni/results/dbnet-ctr1-eth0"));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&cache.results_dir()), 0o700);
        cache.store(&entry()).unwrap();
        assert_eq!(fs::read_dir(cache.results_dir()).unwrap().count(), 1);
    }

    // Conversion to the list version; legacy bare results; corrupt files.
    #[test]
    fn load_converted_and_legacy() {
        let d = tempfile::tempdir().unwrap();
        let cache = ResultCache::new(d.path());
        let att = entry().attachment();
        assert_eq!(
            cache
                .load_result("dbnet", &att, SpecVersion::V1_0_0)
                .unwrap(),
            None
        );
        cache.store(&entry()).unwrap();
        let v = cache
            .load_result("dbnet", &att, SpecVersion::V0_4_0)
            .unwrap()
            .unwrap();
        assert_eq!(v["cniVersion"], "0.4.0");
        assert_eq!(v["ips"][0]["version"], "4");
        let path = cache.path("dbnet", &att).unwrap();
        fs::write(
            &path,
            r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"198.18.2.3/24"}]}"#,
        )
        .unwrap();
        let v = cache
            .load_result("dbnet", &att, SpecVersion::V1_0_0)
            .unwrap()
            .unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert!(v["ips"][0].get("version").is_none());
        fs::write(&path, "garbage").unwrap();
        assert!(cache
            .load_result("dbnet", &att, SpecVersion::V1_0_0)
            .is_err());
        cache.remove("dbnet", &att);
        assert!(!path.exists());
        cache.remove("dbnet", &att); // errors ignored
    }

    // Listing and path validation.
    #[test]
    fn attachments_and_validation() {
        let d = tempfile::tempdir().unwrap();
        let cache = ResultCache::new(d.path());
        cache.store(&entry()).unwrap();
        let other = CacheEntry {
            container_id: "c-2".into(),
            network_name: "net-b".into(),
            ..entry()
        };
        cache.store(&other).unwrap();
        fs::write(cache.results_dir().join("junk"), "{").unwrap();
        fs::write(cache.results_dir().join("x-ctr1-y"), r#"{"kind":"other"}"#).unwrap();
        assert_eq!(cache.attachments(None).len(), 2);
        let only = cache.attachments(Some("c-2"));
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].network_name, "net-b");
        let bad = Attachment::new("../../etc", "", "eth0");
        assert!(cache.path("dbnet", &bad).is_err());
        let bad_if = Attachment::new("c1", "", "a/b");
        assert!(cache.path("dbnet", &bad_if).is_err());
        assert!(cache
            .path("../x", &Attachment::new("c1", "", "eth0"))
            .is_err());
    }
}
