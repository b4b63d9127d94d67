//! etcd as production runs it, for the tests: members (`cni_testkit::etcd::Member`, one
//! process each, in a namespace of the test's), certificates made with `openssl` (a CA,
//! server and client certificates with the underlay addresses as IP SANs), and agents
//! expected to refuse to start.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use super::{attach_to_underlay, sh, wait_for, Cluster};

pub use cni_testkit::etcd::Member;

/// The last lines of every etcd log in `dir`.
pub fn log_tails(dir: &Path) -> String {
    let mut out = String::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("etcd-") && name.ends_with(".log") {
            let text = fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!(
                "== {name}\n{}\n",
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
        }
    }
    out
}

/// A certificate and its key, PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA made with openssl in `dir`, which issues server and client certificates.
#[derive(Debug, Clone)]
pub struct Ca {
    pub dir: PathBuf,
    pub name: String,
    pub pair: Pair,
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Ca {
    /// A new self-signed CA `name` (P-256) in `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        fs::create_dir_all(dir).unwrap();
        let pair = Pair {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            pair.key.to_str().unwrap(),
            "-out",
            pair.cert.to_str().unwrap(),
        ]);
        Ca {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            pair,
        }
    }

    /// A certificate `name` signed by this CA, valid for the IP addresses `ips` (server and
    /// client use: etcd's members present theirs to each other as both).
    pub fn issue(&self, name: &str, ips: &[&str]) -> Pair {
        let base = self.dir.join(format!("{}-{name}", self.name));
        let pair = Pair {
            cert: base.with_extension("pem"),
            key: base.with_extension("key"),
        };
        let csr = base.with_extension("csr");
        let ext = base.with_extension("ext");
        let mut lines = vec![
            "basicConstraints=CA:FALSE".to_string(),
            "keyUsage=digitalSignature,keyEncipherment".to_string(),
            "extendedKeyUsage=serverAuth,clientAuth".to_string(),
        ];
        if !ips.is_empty() {
            let sans: Vec<String> = ips.iter().map(|ip| format!("IP:{ip}")).collect();
            lines.push(format!("subjectAltName={}", sans.join(",")));
        }
        fs::write(&ext, lines.join("\n") + "\n").unwrap();
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            pair.key.to_str().unwrap(),
            "-out",
            csr.to_str().unwrap(),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            csr.to_str().unwrap(),
            "-CA",
            self.pair.cert.to_str().unwrap(),
            "-CAkey",
            self.pair.key.to_str().unwrap(),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext.to_str().unwrap(),
            "-out",
            pair.cert.to_str().unwrap(),
        ]);
        pair
    }
}

/// etcd server flags for TLS with client certificates: `server` presented, clients
/// verified against `trusted` (a PEM bundle).
pub fn tls_server_args(server: &Pair, trusted: &Path) -> Vec<String> {
    vec![
        "--cert-file".into(),
        server.cert.display().to_string(),
        "--key-file".into(),
        server.key.display().to_string(),
        "--trusted-ca-file".into(),
        trusted.display().to_string(),
        "--client-cert-auth".into(),
    ]
}

/// An agent's (or etcdctl's, with its own flag names) TLS flags.
pub fn agent_tls_args(endpoints: &str, ca: &Path, client: Option<&Pair>) -> Vec<String> {
    let mut args = vec![
        "--etcd-endpoints".into(),
        endpoints.to_string(),
        "--etcd-cafile".into(),
        ca.display().to_string(),
    ];
    if let Some(c) = client {
        args.extend([
            "--etcd-certfile".into(),
            c.cert.display().to_string(),
            "--etcd-keyfile".into(),
            c.key.display().to_string(),
        ]);
    }
    args
}

/// etcdctl's TLS flags.
pub fn etcdctl_tls_args(ca: &Path, client: &Pair) -> Vec<String> {
    vec![
        format!("--cacert={}", ca.display()),
        format!("--cert={}", client.cert.display()),
        format!("--key={}", client.key.display()),
    ]
}

/// Copies `from` over `to` atomically (rename of a copy), as a Secret volume update does.
pub fn replace_file(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    fs::copy(from, &tmp).unwrap();
    fs::rename(&tmp, to).unwrap();
}

/// The etcd lease of every subnet key (key, lease ID), from etcdctl's `fields` output.
pub fn lease_ids(c: &Cluster) -> Vec<(String, i64)> {
    let out = c.etcdctl(&[
        "get",
        &format!("{}/subnets/", super::PREFIX),
        "--prefix",
        "-w",
        "fields",
    ]);
    let mut ids = Vec::new();
    let mut key = None;
    for line in out.lines() {
        if let Some(k) = line.strip_prefix("\"Key\" : ") {
            key = Some(k.trim_matches('"').to_string());
        } else if let Some(l) = line.strip_prefix("\"Lease\" : ") {
            ids.push((key.take().unwrap_or_default(), l.trim().parse().unwrap()));
        }
    }
    ids.sort();
    ids
}

impl Cluster {
    /// A cluster whose etcd (https on the underlay gateway) presents a certificate of `ca`
    /// and demands client certificates of `ca`; etcdctl uses one, the agents get `ca` as
    /// their CA and `client` as their certificate. The network `config` is written.
    pub fn with_tls_etcd(config: &serde_json::Value, ca: &Ca, client: &Pair) -> Cluster {
        let mut c = Cluster::bare(config);
        let url = format!("https://{}:2379", super::UNDERLAY_GW);
        let server = ca.issue("server", &[&super::UNDERLAY_GW.to_string(), "127.0.0.1"]);
        let root = ca.issue("root", &[]);
        c.etcd_url = url.clone();
        c.etcd_server_args = tls_server_args(&server, &ca.pair.cert);
        c.etcdctl_args = etcdctl_tls_args(&ca.pair.cert, &root);
        c.agent_etcd_args = agent_tls_args(&url, &ca.pair.cert, Some(client));
        c.start_etcd();
        c.put_config(config);
        c
    }

    /// Starts the agents of nodes 0 and 1, waits until they route to each other, attaches a
    /// pod on each and checks that the pods talk; the pods.
    pub fn two_talking_pods(&mut self) -> [super::Pod; 2] {
        self.start_agent(0);
        self.start_agent(1);
        self.wait_converged(Duration::from_secs(30))
            .expect("the agents converge");
        let pods = [self.add_pod(0), self.add_pod(1)];
        super::every_pair_talks(&[(&pods[0].ns, pods[0].ip), (&pods[1].ns, pods[1].ip)]);
        pods
    }

    /// Starts the agent of node `i` expecting it to refuse to start: its exit status (`None`
    /// if it still runs after `timeout`, then killed) and its log.
    pub fn agent_exit(&mut self, i: usize, timeout: Duration) -> (Option<ExitStatus>, String) {
        let _ = fs::remove_file(self.nodes[i].dir.join("agent.log"));
        self.spawn_agent(i);
        let node = &mut self.nodes[i];
        let mut status = None;
        wait_for(timeout, || {
            status = node.agent.0.as_mut().unwrap().try_wait().unwrap();
            status.is_some()
        });
        node.agent.kill();
        (status, node.agent_log())
    }

    /// Starts node `i`'s agent with the etcd flags `args` and expects it to stop at once, its
    /// last line naming `endpoint` and `cause`, having programmed nothing.
    pub fn expect_refused(&mut self, i: usize, args: Vec<String>, endpoint: &str, cause: &str) {
        self.nodes[i].etcd_args = Some(args);
        let (status, log) = self.agent_exit(i, Duration::from_secs(20));
        let status = status.unwrap_or_else(|| panic!("agent kept running:\n{log}"));
        assert!(!status.success(), "{log}");
        let last = log.lines().last().unwrap_or_default().to_string();
        assert!(last.contains(cause), "last line names {cause:?}:\n{log}");
        assert!(
            last.contains(endpoint),
            "last line names {endpoint}:\n{log}"
        );
        eprintln!("refused as expected: {last}");
        assert!(
            self.nothing_programmed(i),
            "node{} programmed something",
            i + 1
        );
    }

    /// Nothing of node `i`'s agent in its kernel or files: no conflist, no subnet file, no
    /// route of the agent's.
    pub fn nothing_programmed(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        let routes = super::ip_json(&node.ns.name, &["route", "show", "proto", "124"]);
        !node.conf_dir().join("10-rcni.conflist").exists()
            && !node.subnet_file().exists()
            && routes.as_array().is_some_and(|a| a.is_empty())
    }

    /// The problems `rcni doctor` reports on node `i` (its configs, plugins and agent), as
    /// "object: why" lines.
    pub fn doctor_problems(&self, i: usize) -> Vec<String> {
        let node = &self.nodes[i];
        let out = Command::new("ip")
            .args(["netns", "exec", &node.ns.name])
            .arg(cni_testkit::bin_path("rcni").expect("cargo build -p rcni first"))
            .arg("--conf-dir")
            .arg(node.conf_dir())
            .arg("--cache-dir")
            .arg(node.dir.join("cache"))
            .arg("--bin-dir")
            .arg(&self.plugins)
            .args(["--json", "doctor", "--pod-state-dir"])
            .arg(node.dir.join("pod-state"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("rcni doctor: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                format!(
                    "{}: {}",
                    p["object"].as_str().unwrap(),
                    p["why"].as_str().unwrap()
                )
            })
            .collect()
    }

    /// Adds a namespace on the underlay at `ip` for an etcd member (veth `ue<index>`).
    pub fn add_member_ns(&mut self, index: u32, ip: std::net::Ipv4Addr) -> cni_testkit::Netns {
        let ns = self.sb.add_container().unwrap();
        attach_to_underlay(&self.sb, &ns, &format!("ue{index}"), ip);
        ns
    }
}

/// `sh` in namespace `ns`.
pub fn sh_in(ns: &str, args: &[&str]) -> String {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    sh(&full)
}
