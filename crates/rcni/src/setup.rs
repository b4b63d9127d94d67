//! Turning flags and environment into a runtime and an attachment, as cnitool does
//! (`setupRuntimeConfig` in containernetworking/cni `cnitool/cmd/root.go`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha512};

use cni_runtime::{Attachment, Runtime, Timeouts};
use cni_types::CniArgs;

use crate::cli::{Global, DEFAULT_BIN_DIRS};
use crate::failure::Failure;

/// The runtime for these flags.
pub fn runtime(g: &Global) -> Runtime {
    let bins: Vec<PathBuf> = if g.bin_dirs.iter().any(|d| !d.as_os_str().is_empty()) {
        g.bin_dirs
            .iter()
            .filter(|d| !d.as_os_str().is_empty())
            .cloned()
            .collect()
    } else {
        DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect()
    };
    let mut rt = Runtime::new(bins, &g.cache_dir);
    if let Some(secs) = g.timeout {
        rt.timeouts = Timeouts::uniform(Some(Duration::from_secs(secs)));
    }
    rt.rollback = !g.no_rollback;
    rt
}

/// A bare name is a namespace in /run/netns unless a file of that name is in the current
/// directory; anything else is a path, made absolute like cnitool does (no symlink resolving).
pub fn netns_path(arg: &Path) -> Result<PathBuf, Failure> {
    let bare = !arg.as_os_str().as_encoded_bytes().contains(&b'/');
    let p = if bare && !arg.exists() {
        Path::new("/run/netns").join(arg)
    } else {
        arg.to_path_buf()
    };
    std::path::absolute(&p).map_err(|e| Failure::usage(format!("bad netns path {arg:?}: {e}")))
}

/// cnitool's container ID: `cnitool-` + hex of the first 10 bytes of SHA-512(netns path).
pub fn container_id_for(netns: &Path) -> String {
    let digest = Sha512::digest(netns.as_os_str().as_encoded_bytes());
    let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("cnitool-{hex}")
}

/// CNI_ARGS like cnitool: `K=V` pairs separated by `;`, empty keys or values rejected.
pub fn parse_args(s: Option<&str>) -> Result<Vec<(String, String)>, Failure> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let parsed =
        CniArgs::parse(s).map_err(|e| Failure::usage(format!("invalid CNI_ARGS {s:?}: {e}")))?;
    if let Some((k, v)) = parsed
        .pairs()
        .iter()
        .find(|(k, v)| k.is_empty() || v.is_empty())
    {
        return Err(Failure::usage(format!(
            "invalid CNI_ARGS pair {k:?}={v:?}: key and value must not be empty"
        )));
    }
    Ok(parsed.pairs().to_vec())
}

/// CAP_ARGS: a JSON object.
pub fn parse_capability_args(s: Option<&str>) -> Result<Map<String, Value>, Failure> {
    let Some(s) = s.filter(|s| !s.trim().is_empty()) else {
        return Ok(Map::new());
    };
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Failure::usage("CAP_ARGS must be a JSON object")),
        Err(e) => Err(Failure::usage(format!("invalid CAP_ARGS JSON: {e}"))),
    }
}

/// The attachment for `<network> <netns>` verbs.
pub fn attachment(g: &Global, netns_arg: &Path) -> Result<Attachment, Failure> {
    let netns = netns_path(netns_arg)?;
    let container_id = g
        .container_id
        .clone()
        .unwrap_or_else(|| container_id_for(&netns));
    Ok(Attachment {
        container_id,
        netns,
        ifname: g.ifname.clone(),
        args: parse_args(g.args.as_deref())?,
        capability_args: parse_capability_args(g.capability_args.as_deref())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The container ID cnitool derives (expected value from coreutils:
    // `printf /run/netns/test | sha512sum | cut -c1-20`).
    #[test]
    fn cnitool_container_id() {
        assert_eq!(
            container_id_for(Path::new("/run/netns/test")),
            "cnitool-8ae22670664f2caaa6b3"
        );
    }

    #[test]
    fn netns_names_and_paths() {
        assert_eq!(
            netns_path(Path::new("rcni-surely-missing")).unwrap(),
            Path::new("/run/netns/rcni-surely-missing")
        );
        assert_eq!(
            netns_path(Path::new("/var/run/netns/x")).unwrap(),
            Path::new("/var/run/netns/x")
        );
        assert!(netns_path(Path::new("./x")).unwrap().is_absolute());
    }

    // CNI_ARGS and CAP_ARGS parsing, as cnitool does it.
    #[test]
    fn cnitool_args() {
        assert_eq!(
            parse_args(Some("IgnoreUnknown=1;K8S_POD_NAME=p")).unwrap(),
            vec![
                ("IgnoreUnknown".to_string(), "1".to_string()),
                ("K8S_POD_NAME".to_string(), "p".to_string())
            ]
        );
        assert!(parse_args(Some("A=")).is_err());
        assert!(parse_args(Some("=B")).is_err());
        assert!(parse_args(Some("AB")).is_err());
        assert!(parse_args(None).unwrap().is_empty());
        let caps = parse_capability_args(Some(r#"{"mac":"c2:11:22:33:44:55"}"#)).unwrap();
        assert_eq!(caps["mac"], "c2:11:22:33:44:55");
        assert!(parse_capability_args(Some("[1]")).is_err());
        assert!(parse_capability_args(Some("{")).is_err());
    }
}
