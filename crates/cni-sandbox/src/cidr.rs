//! UpdateRuntimeConfig: the node's pod CIDR rendered into the conf dir through containerd's
//! `conf_template` (a Go text/template with `.PodCIDR`, `.PodCIDRRanges` and `.Routes`),
//! only while no network config exists; later updates leave the file alone, as containerd
//! does. The rendered config is loaded before it is written, so a template that renders
//! something unusable never reaches the conf dir.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use cni_persist::{Durability, TempFile, TempName};

use gtmpl::Value;
use ipnet::IpNet;

use cni_runtime::{conf_files, Network, CONF_EXTENSIONS};

use crate::error::SandboxError;

/// The file the template is rendered into (sorts first, so it is the default network).
pub const RENDERED_NAME: &str = "10-rcni-pod.conflist";

/// What `update_cidr` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CidrUpdate {
    /// The template was rendered into this file.
    Written(PathBuf),
    /// A network config already exists (this one, the first): nothing changed.
    Unchanged(PathBuf),
}

/// Parses `10.1.0.0/24,fd00::/64` (the kubelet's `podCIDRs`).
pub fn parse_cidrs(s: &str) -> Result<Vec<IpNet>, SandboxError> {
    let cidrs: Vec<IpNet> = s
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            c.parse::<IpNet>()
                .map_err(|e| SandboxError::Invalid(format!("pod CIDR {c:?}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    if cidrs.is_empty() {
        return Err(SandboxError::Invalid("no pod CIDR given".into()));
    }
    Ok(cidrs)
}

/// Renders `template` with the pod CIDRs: `.PodCIDR` the first, `.PodCIDRRanges` all of them,
/// `.Routes` a default route per address family present.
pub fn render(template: &str, cidrs: &[IpNet]) -> Result<String, String> {
    let ranges: Vec<Value> = cidrs.iter().map(|c| Value::from(c.to_string())).collect();
    let mut routes: Vec<Value> = Vec::new();
    for c in cidrs {
        let r = Value::from(match c {
            IpNet::V4(_) => "0.0.0.0/0",
            IpNet::V6(_) => "::/0",
        });
        if !routes.contains(&r) {
            routes.push(r);
        }
    }
    let mut data = HashMap::new();
    data.insert("PodCIDR".to_string(), Value::from(cidrs[0].to_string()));
    data.insert("PodCIDRRanges".to_string(), Value::Array(ranges));
    data.insert("Routes".to_string(), Value::Array(routes));
    gtmpl::template(template, Value::Object(data)).map_err(|e| e.to_string())
}

/// Renders `template_file` into `<conf_dir>/10-rcni-pod.conflist` unless a config exists.
pub fn update_cidr(
    conf_dir: &Path,
    template_file: &Path,
    cidrs: &[IpNet],
) -> Result<CidrUpdate, SandboxError> {
    let existing = conf_files(conf_dir, &CONF_EXTENSIONS)
        .map_err(|e| SandboxError::io("cannot read config directory", conf_dir, e))?;
    if let Some(first) = existing.into_iter().next() {
        return Ok(CidrUpdate::Unchanged(first));
    }
    let template_err = |message: String| SandboxError::Template {
        path: template_file.to_path_buf(),
        message,
    };
    let template =
        fs::read_to_string(template_file).map_err(|e| template_err(format!("cannot read: {e}")))?;
    let rendered = render(&template, cidrs).map_err(template_err)?;
    Network::from_list_bytes(rendered.as_bytes())
        .map_err(|e| template_err(format!("renders an unusable config list: {e}")))?;
    fs::create_dir_all(conf_dir)
        .map_err(|e| SandboxError::io("cannot create config directory", conf_dir, e))?;
    let target = conf_dir.join(RENDERED_NAME);
    // The temp name has no config extension, so discovery never loads a half-written file;
    // one a killed update left is removed here. Fsync: the file is the node's network config,
    // which must survive a crash whole (containerd renders it only once).
    let gone = |t: &TempName| t.is_of(RENDERED_NAME) && t.writer_is_gone();
    cni_persist::remove_temps(conf_dir, gone)
        .map_err(|e| SandboxError::io("cannot clean", conf_dir, e.into()))?;
    let written = TempFile::create(conf_dir, RENDERED_NAME).and_then(|mut temp| {
        temp.set_mode(0o644)?; // a network config, readable as containerd writes it
        temp.write_all(rendered.as_bytes())?;
        temp.replace(&target, Durability::Fsync)
    });
    written.map_err(|e| SandboxError::io("cannot write", &target, e.into()))?;
    Ok(CidrUpdate::Written(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape of containerd's documented template: ranges and routes through `range`.
    const TEMPLATE: &str = r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,
"ipam":{"type":"host-local","ranges":[{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet":"{{$range}}"}]{{end}}],
"routes":[{{range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst":"{{$route}}"}{{end}}]}},
{"type":"portmap","capabilities":{"portMappings":true}}],"first":"{{.PodCIDR}}"}"#;

    #[test]
    fn renders_containerds_placeholders() {
        let cidrs = parse_cidrs("198.18.4.0/24, fd00:1::/64").unwrap();
        let out = render(TEMPLATE, &cidrs).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["first"], "198.18.4.0/24");
        let ipam = &v["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], "198.18.4.0/24");
        assert_eq!(ipam["ranges"][1][0]["subnet"], "fd00:1::/64");
        assert_eq!(ipam["routes"][0]["dst"], "0.0.0.0/0");
        assert_eq!(ipam["routes"][1]["dst"], "::/0");
        assert!(parse_cidrs("").is_err());
        assert!(parse_cidrs("300.0.0.0/8").is_err());
    }

    #[test]
    fn writes_once_and_then_leaves_the_file_alone() {
        let d = tempfile::tempdir().unwrap();
        let tpl = d.path().join("tpl");
        fs::write(&tpl, TEMPLATE).unwrap();
        let conf = d.path().join("net.d");
        let first = update_cidr(&conf, &tpl, &parse_cidrs("198.18.4.0/24").unwrap()).unwrap();
        let path = conf.join(RENDERED_NAME);
        assert_eq!(first, CidrUpdate::Written(path.clone()));
        let before = fs::read(&path).unwrap();
        let second = update_cidr(&conf, &tpl, &parse_cidrs("198.18.9.0/24").unwrap()).unwrap();
        assert_eq!(second, CidrUpdate::Unchanged(path.clone()));
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!(fs::read_dir(&conf).unwrap().count(), 1);

        // A template that renders broken JSON writes nothing.
        let empty = d.path().join("empty");
        fs::write(&tpl, r#"{"name": {{.PodCIDR}} }"#).unwrap();
        let e = update_cidr(&empty, &tpl, &parse_cidrs("198.18.4.0/24").unwrap()).unwrap_err();
        assert!(e.to_string().contains("unusable"), "{e}");
        assert!(!empty.join(RENDERED_NAME).exists());
    }
}
